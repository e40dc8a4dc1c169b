#!/usr/bin/env python3
"""The peer of bench_train_step: PyTorch FSDP2 (fully_shard, bf16 parameters, fp32 reduction)
training a Hugging Face Llama / Qwen3 model built from a config (no download), AdamW, on random
tokens. Same shapes, micro-batch, sequence length and step count as shardrl's benchmark.

    torchrun --nproc_per_node N bench/torch_fsdp2.py --model llama-1b --micro-batch 1 --seq 2048 --steps 10

--compile compiles each decoder block with torch.compile before sharding it (torchtitan's
recipe); the default is eager. --recompute recomputes each decoder block's activations in
backward (Hugging Face's gradient checkpointing, non-reentrant), as shardrl's
train.activation_recompute does: what long sequences need.

Prints step time, tokens/s per GPU, MFU (6 x params x tokens + causal attention, against
--peak-tflops) and peak GPU memory, in the format of bench_train_step.

The step does what shardrl's does: forward without a KV cache (use_cache=False: with it
transformers builds a DynamicCache in training, which every compiled block would receive),
backward, the gradients clipped to norm 1 (shardrl's optim.clip_grad_norm default), AdamW.
The loss is transformers' own (the logits of the whole micro-batch in fp32; shardrl's head
works in chunks): the peer's memory includes those logits.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

# The shapes of shardrl's presets (src/config/model_presets.cpp).
SHAPES = {
    "llama-1b": dict(kind="llama", vocab_size=128256, hidden_size=2048, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=64, intermediate_size=8192,
                     rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True),
    "qwen3-0.6b": dict(kind="qwen3", vocab_size=151936, hidden_size=1024, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
}


def build(name, seq):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
    shape = dict(SHAPES[name])
    kind = shape.pop("kind")
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (Qwen3Config, Qwen3ForCausalLM)
    config = config_cls(max_position_embeddings=max(seq, 4096), attn_implementation="sdpa", **shape)
    return model_cls(config), config


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(SHAPES), default="llama-1b")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder block (torchtitan style)")
    p.add_argument("--recompute", action="store_true", help="recompute each decoder block's activations in backward")
    a = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(1234)
    with torch.device("cuda"):
        model, config = build(a.model, a.seq)
    if a.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, layer in enumerate(model.model.layers):
        if a.compile:
            layer = torch.compile(layer)
            model.model.layers[i] = layer
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    params = sum(p.numel() for p in model.parameters())   # sharded DTensors report global sizes

    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    ids = torch.randint(0, config.vocab_size, (a.micro_batch, a.seq), device="cuda", generator=g)
    labels = torch.randint(0, config.vocab_size, (a.micro_batch, a.seq), device="cuda", generator=g)

    def step():
        loss = model(input_ids=ids, labels=labels, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    step_s = (time.perf_counter() - t0) / a.steps

    per_token = 6.0 * params + 6.0 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * a.seq
    tokens_per_gpu = a.micro_batch * a.seq / step_s
    peak = torch.tensor(float(torch.cuda.max_memory_allocated()), device="cuda")
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        mode = ("compiled" if a.compile else "eager") + (", recompute" if a.recompute else "")
        print(f"torch FSDP2 ({mode}) train step | model {a.model} ({params / 1e9:.3f}B params, bf16/fp32 reduce) | "
              f"{world} rank(s), micro-batch {a.micro_batch} x {a.seq} per rank | torch {torch.__version__}")
        print(f"  step {step_s * 1e3:.1f} ms | {tokens_per_gpu:.0f} tokens/s per GPU | "
              f"MFU {100 * tokens_per_gpu * per_token / (a.peak_tflops * 1e12):.1f}% (of {a.peak_tflops:g} TFLOP/s) | "
              f"peak allocated {peak.item() / 2**30:.2f} GiB per rank")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
