#!/usr/bin/env python3
"""shardrl's LoRA against Hugging Face PEFT on the same base and adapters (issue: HF interop, LoRA).

For Llama and Qwen3 (tied embeddings) this builds a random base with transformers as hf_parity.py
does, wraps it with peft.get_peft_model (plain LoRA on q, k, v, o, gate, up, down), overwrites the
adapters with random values (PEFT starts B at zero, which would hide any error in the adapters'
path) and saves them with save_pretrained. shardrl's hf_parity tool (tests/gpu/hf_parity.cpp) then
loads the base (model.init_from) and the PEFT directory (lora.init_from) on N ranks, and compares:
  * the logits, the loss L (mean over rows and positions 0..S-2 of -log p(token[n+1] | tokens[..n]))
    and the gradient of L with respect to every adapter, with PyTorch's PeftModel (fp32, on the
    GPU, TF32 off); the gradients' names must be exactly the adapters' (no base parameter's);
  * `convert --to-peft` of the job checkpoint hf_parity saved: the same adapter tensors, bit for
    bit, which PeftModel.from_pretrained loads to the reference's logits exactly;
  * `convert --to-safetensors --merged`: transformers loads it to the reference's logits (relative
    error <= 1e-5: merging changes only rounding), and its weights are merge_and_unload()'s (<= 1e-6).

Pass criteria, per tensor, as relative L2 error ||shardrl - torch|| / ||torch||, as in hf_parity.py:
  * fp32 mode: <= 1e-4;
  * bf16 mode: <= max(3 x the same error of PyTorch's own bf16 PeftModel, 8e-3).
The adapters must move the reference's logits by at least 1e-3 (relative), or the test is blind.

  python3 tests/gpu/peft_parity.py --build build/cuda-release --ranks 2 --out /tmp/peft_parity
Exit 0 when every comparison passes; a table of the errors on stdout either way.
"""
import argparse
import copy
import json
import os
import shutil
import sys

import peft
import torch
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_parity  # noqa: E402  (its main() is guarded)
from hf_parity import BF16_FACTOR, BF16_FLOOR, FP32_TOL, rel, run  # noqa: E402

ARCHS = ("llama", "qwen3")
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ATTN = {"q_proj", "k_proj", "v_proj", "o_proj"}   # the rest are in .mlp
MIN_EFFECT = 1e-3     # adapters that move the logits less than this would let a broken path pass
MERGED_LOGITS_TOL = 1e-5
MERGED_TENSOR_TOL = 1e-6


def shardrl_name(peft_name):
    """base_model.model.X.q_proj.lora_A.default.weight -> X.q_proj.lora_A.weight (shardrl's name)."""
    prefix = "base_model.model."
    assert peft_name.startswith(prefix), peft_name
    return ".".join(p for p in peft_name[len(prefix):].split(".") if p != "default")


def loss_and_grads(model, tokens):
    """hf_parity.loss_and_grads for a PeftModel: the same loss; the gradients are those of the
    parameters PEFT leaves trainable (the adapters), under shardrl's names."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=tokens, use_cache=False).logits
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    loss = -logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).mean()
    loss.backward()
    grads = {shardrl_name(n): p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach().float().cpu(), loss.item(), grads


def forward(model, tokens):
    with torch.no_grad():
        return model(input_ids=tokens, use_cache=False).logits.float().cpu()


def load_base(directory, dtype, dev):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).to(dev).eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="shardrl build directory (with tests/hf_parity, src/app/shardrl)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--out", default="/tmp/peft_parity")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--seq", type=int, default=96)
    ap.add_argument("--rank", type=int, default=8, help="LoRA rank r, on both sides")
    ap.add_argument("--alpha", type=float, default=16.0, help="LoRA alpha, on both sides")
    ap.add_argument("--only", default="", help="comma-separated architectures (" + ", ".join(ARCHS) + ")")
    args = ap.parse_args()
    if args.rows % args.ranks:
        ap.error("--rows must divide among --ranks")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out_root = os.path.abspath(args.out)   # the paths go into configs (lora.init_from) and checkpoints
    parity = os.path.join(args.build, "tests", "hf_parity")
    shardrl = os.path.join(args.build, "src", "app", "shardrl")
    mpirun = ["mpirun", "-np", str(args.ranks), "--oversubscribe"]
    os.makedirs(out_root, exist_ok=True)
    log = os.path.join(out_root, "commands.log")
    print(f"transformers {transformers.__version__}, peft {peft.__version__}, torch {torch.__version__}, {dev}, "
          f"{args.ranks} ranks, r={args.rank}, alpha={args.alpha}")
    failures, rows = [], []
    for i, (name, cfg) in enumerate(hf_parity.configs().items()):   # i as in hf_parity: same seeds
        if name not in ARCHS or (args.only and name not in args.only.split(",")):
            continue
        d = os.path.join(out_root, name)
        base_dir, adapter_dir, run_dir = (os.path.join(d, s) for s in ("base", "adapter", "run"))
        hf_parity.build(name, cfg, base_dir, seed=1234 + i)
        # The base reloaded from its directory rather than build's model: PEFT then records that
        # directory as base_model_name_or_path (and looks nothing up on the Hub when saving), and
        # the reference is loaded exactly as the PeftModels below that must match it bit for bit.
        lora_cfg = peft.LoraConfig(r=args.rank, lora_alpha=args.alpha, target_modules=MODULES, lora_dropout=0.0,
                                   bias="none", task_type="CAUSAL_LM")
        ref = peft.get_peft_model(load_base(base_dir, torch.float32, dev), lora_cfg)
        g = torch.Generator().manual_seed(4321 + i)
        with torch.no_grad():   # B = 0 (PEFT's start) would make every adapter path invisible
            for n, p in ref.named_parameters():
                if ".lora_A." in n:
                    p.copy_(torch.randn(p.shape, generator=g) / args.rank)
                elif ".lora_B." in n:
                    p.copy_(0.05 * torch.randn(p.shape, generator=g))
        ref.save_pretrained(adapter_dir, save_embedding_layers=False)
        ref.eval()

        g = torch.Generator().manual_seed(99 + i)
        tokens = torch.randint(0, cfg.vocab_size, (args.rows, args.seq), generator=g)
        tokens_path = os.path.join(d, "tokens.json")
        with open(tokens_path, "w") as f:
            json.dump({"tokens": tokens.tolist()}, f)
        t = tokens.to(dev)
        ref_logits, ref_loss, ref_grads = loss_and_grads(ref, t)
        # Without autograd, the path the PeftModel loaded from the exported directory takes: what
        # that one must equal exactly.
        ref_eval = forward(ref, t)
        with ref.disable_adapter():
            base_logits = forward(ref, t)
        moved = rel(ref_eval, base_logits)
        rows.append((name, "peft", "adapters' change of the logits (at least)", moved, MIN_EFFECT))
        if not moved >= MIN_EFFECT:   # NaN fails too
            failures.append(f"{name}: the adapters move the logits by {moved:.3g} < {MIN_EFFECT:g}: a blind test")
        expected = 2 * len(MODULES) * cfg.num_hidden_layers
        if len(ref_grads) != expected or any(".lora_" not in k for k in ref_grads):
            failures.append(f"{name}: PEFT's trainable parameters are {len(ref_grads)}, not the {expected} adapters")

        # PyTorch's own bf16 error, for the bf16 tolerance. PeftModel.from_pretrained over a bf16
        # base keeps the adapters in fp32 by default (autocast_adapter_dtype=True); they are cast
        # to bf16 here, so that this model is bf16 throughout as hf_parity's bf16 model is, and its
        # error is what bf16 arithmetic costs on every path (adapters included).
        hb = peft.PeftModel.from_pretrained(load_base(base_dir, torch.bfloat16, dev), adapter_dir, is_trainable=True)
        hb = hb.to(dtype=torch.bfloat16).eval()
        hb_logits, hb_loss, hb_grads = loss_and_grads(hb, t)
        del hb

        lora_set = ["--set", f"lora.rank={args.rank}", "--set", f"lora.alpha={args.alpha}",
                    "--set", f"lora.init_from={adapter_dir}"]
        shutil.rmtree(run_dir, ignore_errors=True)   # a checkpoint from an earlier run must not stand in
        for precision in ("fp32", "bf16"):
            out = os.path.join(d, f"shardrl_{precision}.safetensors")
            save = ["--save", run_dir] if precision == "fp32" else []
            if run(mpirun + [parity, "--model", base_dir, "--tokens", tokens_path, "--precision", precision,
                             "--out", out] + lora_set + save, log) is None:
                failures.append(f"{name} {precision}: hf_parity failed")
                continue
            got = load_file(out)
            mine = {k[len("grad."):] for k in got if k.startswith("grad.")}
            frozen = sorted(k for k in mine if ".lora_" not in k)
            for what, names in (("gradients of base parameters (frozen)", frozen),
                                ("adapter gradients missing", sorted(set(ref_grads) - mine)),
                                ("adapter gradients PEFT lacks", sorted(mine - set(ref_grads) - set(frozen)))):
                if names:
                    failures.append(f"{name} {precision}: {what}: {names[:4]} ({len(names)})")
            checks = [("logits", got["logits"], ref_logits, hb_logits),
                      ("loss", got["loss"], torch.tensor([ref_loss]), torch.tensor([hb_loss]))]
            checks += [(n, got["grad." + n], want, hb_grads[n]) for n, want in ref_grads.items() if n in mine]
            worst = (0.0, "", 0.0, 0.0)
            for what, m, want, theirs_bf16 in checks:
                if m.shape != want.shape:
                    failures.append(f"{name} {precision} {what}: shape {tuple(m.shape)} vs {tuple(want.shape)}")
                    continue
                err = rel(m, want)
                tol = FP32_TOL if precision == "fp32" else max(BF16_FACTOR * rel(theirs_bf16, want), BF16_FLOOR)
                if not err <= tol:   # NaN fails too
                    failures.append(f"{name} {precision} {what}: relative error {err:.3g} > {tol:.3g}")
                if what in ("logits", "loss"):
                    rows.append((name, precision, what, err, tol))
                elif err / tol >= worst[0]:
                    worst = (err / tol, what, err, tol)
            if worst[1]:
                rows.append((name, precision, "worst grad: " + worst[1], worst[2], worst[3]))
            rows.append((name, precision, f"adapter gradients compared: {len(checks) - 2}", float("nan"), float("nan")))

        # Export: the checkpoint's adapters as PEFT's, bit for bit, and PEFT's logits from them.
        ckpt = os.path.join(run_dir, "checkpoints", "iter_00000000.h5")
        exported, merged = os.path.join(d, "exported_peft"), os.path.join(d, "merged")
        for p in (exported, merged):
            shutil.rmtree(p, ignore_errors=True)
        if not os.path.exists(ckpt) or run([shardrl, "convert", "--from", ckpt, "--to-peft", exported,
                                            "--dtype", "fp32"], log) is None:
            failures.append(f"{name}: no checkpoint from hf_parity --save, or convert --to-peft failed")
        else:
            theirs = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
            back = load_file(os.path.join(exported, "adapter_model.safetensors"))
            if set(back) != set(theirs):
                failures.append(f"{name}: convert --to-peft's tensor names differ from PEFT's: "
                                f"{sorted(set(back) ^ set(theirs))[:4]}")
            differ = [k for k in theirs if k in back and not (back[k].dtype == theirs[k].dtype and
                                                              torch.equal(back[k], theirs[k]))]
            rows.append((name, "export", f"adapter tensors after convert --to-peft: {len(differ)} of {len(theirs)} "
                         "differ", max([rel(back[k].float(), theirs[k].float()) for k in differ], default=0.0), 0.0))
            if differ:
                failures.append(f"{name}: convert --to-peft changed adapter tensors: {differ[:4]}")
            again = peft.PeftModel.from_pretrained(load_base(base_dir, torch.float32, dev), exported).eval()
            a = forward(again, t)
            del again
            same = torch.equal(a, ref_eval)
            rows.append((name, "export", "PeftModel logits from the exported adapters (exact)",
                         0.0 if same else rel(a, ref_eval), 0.0))
            if not same:
                failures.append(f"{name}: logits from the exported adapters differ ({rel(a, ref_eval):.3g})")

        # Merged: W + alpha/r B A as a Hugging Face directory; fp32 throughout, so only rounding differs.
        if not os.path.exists(ckpt) or run([shardrl, "convert", "--from", ckpt, "--to-safetensors", merged,
                                            "--merged", "--dtype", "fp32"], log) is None:
            failures.append(f"{name}: no checkpoint from hf_parity --save, or convert --merged failed")
        else:
            m = load_base(merged, torch.float32, dev)
            err = rel(forward(m, t), ref_eval)
            del m
            rows.append((name, "merged", "logits of the merged model vs PeftModel's", err, MERGED_LOGITS_TOL))
            if not err <= MERGED_LOGITS_TOL:
                failures.append(f"{name}: merged model's logits: relative error {err:.3g} > {MERGED_LOGITS_TOL:g}")
            unloaded = copy.deepcopy(ref).merge_and_unload()   # a copy: merging changes the model in place
            folded = {k: v.detach().float().cpu() for k, v in unloaded.state_dict().items()}
            del unloaded
            written = load_file(os.path.join(merged, "model.safetensors"))
            # Tied embeddings (qwen3): lm_head.weight may be on one side only; the adapted ones must be on both.
            common = set(folded) & set(written)
            adapted = {f"model.layers.{layer}.{'self_attn' if mod in ATTN else 'mlp'}.{mod}.weight"
                       for layer in range(cfg.num_hidden_layers) for mod in MODULES}
            if adapted - common:
                failures.append(f"{name}: merged weights missing on one side: {sorted(adapted - common)[:4]}")
            errs = {}
            for k in sorted(common):
                if written[k].shape != folded[k].shape:
                    failures.append(f"{name} merged {k}: shape {tuple(written[k].shape)} vs {tuple(folded[k].shape)}")
                else:
                    errs[k] = rel(written[k].float(), folded[k])
            bad = [k for k, e in errs.items() if not e <= MERGED_TENSOR_TOL]
            if bad:
                failures.append(f"{name}: merged tensors differ from merge_and_unload()'s: {bad[:4]} ({len(bad)})")
            if errs:
                k = max(errs, key=errs.get)
                rows.append((name, "merged", f"worst of {len(errs)} tensors vs merge_and_unload(): {k}", errs[k],
                             MERGED_TENSOR_TOL))
        del ref
    return hf_parity.report(rows, failures)


if __name__ == "__main__":
    sys.exit(main())
