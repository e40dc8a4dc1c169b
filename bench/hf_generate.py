#!/usr/bin/env python3
"""The peer of bench_decode: Hugging Face `generate` on the same model shape (built from a config,
no download, bf16, random weights), the same prompt length, new tokens and batch sizes, sampling
at temperature 1 with no EOS, on one GPU.

    python3 bench/hf_generate.py --model llama-1b --batch 1 8 64 --new-tokens 32 --prompt-tokens 4
"""
import argparse
import time

import torch

from torch_fsdp2 import SHAPES, build


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(SHAPES), default="llama-1b")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--prompt-tokens", type=int, default=4)
    a = p.parse_args()
    torch.manual_seed(1234)
    with torch.device("cuda"):
        model, config = build(a.model, a.prompt_tokens + a.new_tokens)
    model = model.to(torch.bfloat16).eval()
    for batch in a.batch:
        ids = torch.full((batch, a.prompt_tokens), 97, device="cuda")
        kw = dict(max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, do_sample=True, temperature=1.0, top_k=0,
                  top_p=1.0, eos_token_id=None, pad_token_id=0)
        with torch.no_grad():
            model.generate(ids, **kw)   # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        tokens = batch * (out.shape[1] - a.prompt_tokens)
        print(f"HF generate {a.model} bf16 (torch {torch.__version__}): batch {batch:3d}  {tokens:6d} tokens in {s:.3f} s  "
              f"{tokens / s:.0f} tokens/s  ({s / a.new_tokens * 1e3:.2f} ms per step)")


if __name__ == "__main__":
    main()
