#!/usr/bin/env python3
"""shardrl against Hugging Face transformers on the same weights (issue: HF interop).

For each architecture (Llama, Llama with Llama 3's RoPE scaling, the exact Llama-3.2-1B config, Qwen3
with tied embeddings, Qwen3-MoE) this builds a randomly
initialised model with transformers from a config (no download), saves it with save_pretrained,
and compares, on the same token rows:
  * the logits of a forward pass, and
  * the gradient of L = mean over rows and positions 0..S-2 of -log p(token[n+1] | tokens[..n])
    with respect to every parameter,
between PyTorch (fp32, on the GPU, TF32 off) and shardrl's hf_parity tool (tests/gpu/hf_parity.cpp),
which imports the directory through model.init_from's path on N ranks.

Pass criteria, per tensor, as relative L2 error ||shardrl - torch|| / ||torch||:
  * fp32 mode: <= 1e-4;
  * bf16 mode: <= max(3 x the same error of PyTorch's own bf16 model, 8e-3): shardrl in bf16 is
    no worse than three times what bf16 arithmetic costs PyTorch (8e-3 ~ two bf16 ulps).
Also: the directory shardrl exports back (convert --from-safetensors, then --to-safetensors) loads
in transformers and gives the original model's logits exactly.

  python3 tests/gpu/hf_parity.py --build build/cuda-release --ranks 2 --out /tmp/hf_parity
Exit 0 when every comparison passes; a table of the errors on stdout either way.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file

FP32_TOL = 1e-4
BF16_FLOOR = 8e-3
BF16_FACTOR = 3.0


def configs():
    common = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=32, max_position_embeddings=256,
                  rms_norm_eps=1e-6, attention_bias=False, hidden_act="silu", initializer_range=0.02)
    rope = dict(rope_theta=10000.0)
    # Llama 3's frequency scaling: with original_max_position_embeddings = 64 the bands (kept below
    # 16 positions of wavelength, divided above 64, interpolated between) cut through a 32-wide head.
    llama3_rope = dict(rope_theta=500000.0, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                              high_freq_factor=4.0,
                                                              original_max_position_embeddings=64))
    # meta-llama/Llama-3.2-1B's config.json, with random weights.
    llama32_1b = transformers.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=8192),
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False, hidden_act="silu", initializer_range=0.02)
    return {
        "llama": transformers.LlamaConfig(**common, **rope, tie_word_embeddings=False, mlp_bias=False),
        "llama3_rope": transformers.LlamaConfig(**common, **llama3_rope, tie_word_embeddings=False, mlp_bias=False),
        "llama3.2-1b": llama32_1b,
        "qwen3": transformers.Qwen3Config(**common, rope_theta=1000000.0, tie_word_embeddings=True,
                                          use_sliding_window=False),
        "qwen3_moe": transformers.Qwen3MoeConfig(**common, **rope, tie_word_embeddings=False, num_experts=8,
                                                 num_experts_per_tok=2, moe_intermediate_size=128,
                                                 decoder_sparse_step=1, norm_topk_prob=True, mlp_only_layers=[],
                                                 output_router_logits=False, router_aux_loss_coef=0.0),
    }


def build(name, cfg, directory, seed):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():   # norms away from 1, so a misplaced or missing norm weight shows
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            # A trained router is decisive; at initializer_range 0.02 every token's experts are
            # near ties, and bf16 rounding (in PyTorch as in shardrl) flips the choice of some,
            # which moves a whole token between experts: a discrete difference, not arithmetic.
            if pname.endswith("mlp.gate.weight"):
                p.normal_(0.0, 0.3)
    model.save_pretrained(directory)
    # The Hub's layout has one tensor per expert matrix; a transformers that keeps experts fused
    # in memory may save them fused: write the file in the Hub's layout, as published models are.
    path = os.path.join(directory, "model.safetensors")
    saved = load_file(path)
    if any(".experts.gate_up_proj" in k or ".experts.down_proj" in k for k in saved):
        hub = {}
        for k, t in saved.items():
            hub.update(per_expert(k, t, cfg))
        save_file({k: v.contiguous() for k, v in hub.items()}, path, metadata={"format": "pt"})
        print(f"{name}: rewrote fused expert tensors per expert (the Hub's layout)")
    return model


def per_expert(name, t, cfg):
    """Fused expert tensors (transformers 5) as the Hub's per-expert matrices; others unchanged."""
    D, I = cfg.hidden_size, cfg.moe_intermediate_size if hasattr(cfg, "moe_intermediate_size") else 0
    prefix = name.rsplit(".experts.", 1)[0] + ".experts."
    if name.endswith(".experts.gate_up_proj"):
        if t.shape[-1] != D:   # stored (E, D, 2I): make it (E, 2I, D)
            t = t.transpose(1, 2)
        assert t.shape[1:] == (2 * I, D), (name, tuple(t.shape))
        out = {}
        for e in range(t.shape[0]):
            out[f"{prefix}{e}.gate_proj.weight"] = t[e, :I]
            out[f"{prefix}{e}.up_proj.weight"] = t[e, I:]
        return out
    if name.endswith(".experts.down_proj"):
        if t.shape[1:] != (D, I):   # stored (E, I, D)
            t = t.transpose(1, 2)
        assert t.shape[1:] == (D, I), (name, tuple(t.shape))
        return {f"{prefix}{e}.down_proj.weight": t[e] for e in range(t.shape[0])}
    return {name: t}


def loss_and_grads(model, tokens):
    """Logits, loss and every parameter's gradient (fp32 on the host), as hf_parity defines them."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=tokens, use_cache=False).logits
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    target = tokens[:, 1:]
    loss = -logp.gather(-1, target.unsqueeze(-1)).mean()
    loss.backward()
    grads = {}
    for n, p in model.named_parameters():
        if p.grad is not None:
            grads.update(per_expert(n, p.grad.detach().float().cpu(), model.config))
    return logits.detach().float().cpu(), loss.item(), grads


def rel(a, b):
    return (torch.linalg.vector_norm((a.double() - b.double())) /
            max(torch.linalg.vector_norm(b.double()).item(), 1e-30)).item()


def run(cmd, log):
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        return None
    return r.stdout


def report(rows, failures):
    """The table of (model, mode, what, relative error, tolerance) rows and the failures; the exit code."""
    print(f"\n{'model':10} {'mode':10} {'what':60} {'rel. error':>11} {'tolerance':>10}")
    for name, mode, what, err, tol in rows:
        print(f"{name:10} {mode:10} {what:60} {err:11.3g} {tol:10.3g}")
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("\nall comparisons within tolerance")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="shardrl build directory (with tests/hf_parity)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--out", default="/tmp/hf_parity")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--seq", type=int, default=96)
    ap.add_argument("--only", default="", help="comma-separated architectures")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    parity = os.path.join(args.build, "tests", "hf_parity")
    shardrl = os.path.join(args.build, "src", "app", "shardrl")
    mpirun = ["mpirun", "-np", str(args.ranks), "--oversubscribe"]
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "commands.log")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {dev}, {args.ranks} ranks")
    failures = []
    rows = []
    for i, (name, cfg) in enumerate(configs().items()):
        if args.only and name not in args.only.split(","):
            continue
        d = os.path.join(args.out, name)
        model = build(name, cfg, d, seed=1234 + i)
        g = torch.Generator().manual_seed(99 + i)
        tokens = torch.randint(0, cfg.vocab_size, (args.rows, args.seq), generator=g)
        with open(os.path.join(d, "tokens.json"), "w") as f:
            json.dump({"tokens": tokens.tolist()}, f)
        ref_logits, ref_loss, ref_grads = loss_and_grads(model.to(dev), tokens.to(dev))
        if hasattr(cfg, "num_experts_per_tok"):   # how close the fp32 routing is to a tie
            try:
                with torch.no_grad():
                    routers = model(input_ids=tokens.to(dev), use_cache=False,
                                    output_router_logits=True).router_logits
                k = cfg.num_experts_per_tok
                tops = [r.float().reshape(-1, r.shape[-1]).topk(k + 1, dim=-1).values for r in routers]
                gaps = torch.cat([t[:, k - 1] - t[:, k] for t in tops])
            except Exception as e:   # only a report: the comparison does not depend on it
                print(f"{name}: router logits not available ({e})")
                gaps = torch.tensor([float("nan")])
            rows.append((name, "routing", f"smallest logit gap k-th/(k+1)-th expert; {int((gaps < 0.05).sum())} "
                         f"of {gaps.numel()} below 0.05", gaps.min().item(), float("nan")))
        bf16_model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).to(dev)
        hb_logits, hb_loss, hb_grads = loss_and_grads(bf16_model, tokens.to(dev))
        del bf16_model
        modes = [("fp32", []), ("bf16", [])]
        if cfg.model_type == "qwen3_moe":   # both expert GEMM paths
            modes.append(("fp32", ["--set", "model.moe_impl=loop"]))
        for precision, extra in modes:
            out = os.path.join(d, f"shardrl_{precision}{'_loop' if extra else ''}.safetensors")
            precision_label = precision + ("/loop" if extra else "")
            if run(mpirun + [parity, "--model", d, "--tokens", os.path.join(d, "tokens.json"), "--precision",
                             precision, "--out", out] + extra, log) is None:
                failures.append(f"{name} {precision_label}: hf_parity failed; config.json: " +
                                open(os.path.join(d, "config.json")).read().replace("\n", " "))
                continue
            got = load_file(out)
            checks = [("logits", got["logits"], ref_logits, hb_logits),
                      ("loss", got["loss"], torch.tensor([ref_loss]), torch.tensor([hb_loss]))]
            for pname, ref in ref_grads.items():
                checks.append((pname, got["grad." + pname], ref, hb_grads[pname]))
            missing = [k[len("grad."):] for k in got if k.startswith("grad.") and k[len("grad."):] not in ref_grads]
            if missing:
                failures.append(f"{name} {precision_label}: gradients transformers lacks: {missing[:4]}")
            worst = (0.0, "")
            for what, mine, ref, theirs_bf16 in checks:
                if mine.shape != ref.shape:
                    failures.append(f"{name} {precision_label} {what}: shape {tuple(mine.shape)} vs {tuple(ref.shape)}")
                    continue
                err = rel(mine, ref)
                tol = FP32_TOL if precision == "fp32" else max(BF16_FACTOR * rel(theirs_bf16, ref), BF16_FLOOR)
                if err > tol:
                    failures.append(f"{name} {precision_label} {what}: relative error {err:.3g} > {tol:.3g}")
                if what in ("logits", "loss"):
                    rows.append((name, precision_label, what, err, tol))
                elif err / tol > worst[0]:
                    worst = (err / tol, what, err, tol)
            if worst[0] > 0:
                rows.append((name, precision_label, "worst grad: " + worst[1], worst[2], worst[3]))
            rows.append((name, precision_label, f"gradients compared: {len(ref_grads)}", float("nan"), float("nan")))
        # Back out: convert to a checkpoint and export again; transformers loads it and agrees exactly.
        ckpt = os.path.join(d, "imported.h5")
        back = os.path.join(d, "exported")
        if (run(mpirun + [shardrl, "convert", "--from-safetensors", d, "--to", ckpt], log) is None or
                run([shardrl, "convert", "--from", ckpt, "--to-safetensors", back, "--dtype", "fp32"], log) is None):
            failures.append(f"{name}: convert failed")
            continue
        again = transformers.AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32).to(dev)
        with torch.no_grad():
            a = again(input_ids=tokens.to(dev), use_cache=False).logits.float().cpu()
        same = torch.equal(a, ref_logits)
        rows.append((name, "export", "logits after import+export (exact)", 0.0 if same else rel(a, ref_logits), 0.0))
        if not same:
            failures.append(f"{name}: the exported directory's logits differ ({rel(a, ref_logits):.3g})")
        del again, model
    return report(rows, failures)


if __name__ == "__main__":
    sys.exit(main())
