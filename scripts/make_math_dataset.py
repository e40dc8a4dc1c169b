#!/usr/bin/env python3
"""Synthetic multi-step arithmetic word problems for the text RL path (rl.task = "text").

Writes JSONL train and eval splits, one problem per line:
  {"prompt": "...", "answer": "42", "solution": "... #### 42", "steps": 3}
`answer` is an integer (the math reward compares it exactly); `solution` is a worked solution
ending in "#### <answer>" (GSM8K's convention), for the supervised warm-up. Standard library
only, deterministic for a seed, so the whole path runs on a CPU without any download.

  scripts/make_math_dataset.py --out data/math [--train 2000] [--eval 200] [--steps 2] [--seed 1]

The eval split uses its own random stream (seed + 1) and never repeats a train prompt.
"""
import argparse
import json
import os
import random

NAMES = ["Ada", "Ben", "Chen", "Dina", "Eli", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemi", "Lior"]
THINGS = ["apples", "books", "marbles", "stamps", "coins", "pencils", "shells", "cards", "beads", "tickets"]


def problem(rng, steps):
    """One problem of `steps` operations after the start: text, worked solution, answer."""
    name = rng.choice(NAMES)
    thing = rng.choice(THINGS)
    value = rng.randint(5, 60)
    sentences = [f"{name} has {value} {thing}."]
    work = [f"{name} starts with {value} {thing}."]
    for _ in range(steps):
        op = rng.choice(["buy", "give", "double", "triple", "share"] if value > 3 else ["buy", "double"])
        if op == "buy":
            k = rng.randint(2, 40)
            sentences.append(f"Then {name} buys {k} more.")
            work.append(f"After buying {k}: {value} + {k} = {value + k}.")
            value += k
        elif op == "give":
            k = rng.randint(1, value - 1)
            friend = rng.choice([n for n in NAMES if n != name])
            sentences.append(f"{name} gives {k} to {friend}.")
            work.append(f"After giving {k} away: {value} - {k} = {value - k}.")
            value -= k
        elif op in ("double", "triple"):
            m = 2 if op == "double" else 3
            sentences.append(f"Then the number of {thing} {'doubles' if m == 2 else 'triples'}.")
            work.append(f"After it {'doubles' if m == 2 else 'triples'}: {value} * {m} = {value * m}.")
            value *= m
        else:  # share: only into parts that divide evenly, so the answer stays an integer
            parts = [d for d in (2, 3, 4, 5) if value % d == 0]
            if not parts:
                k = rng.randint(2, 40)
                sentences.append(f"Then {name} buys {k} more.")
                work.append(f"After buying {k}: {value} + {k} = {value + k}.")
                value += k
                continue
            d = rng.choice(parts)
            sentences.append(f"{name} shares them equally among {d} boxes and keeps one box.")
            work.append(f"One box of {d}: {value} / {d} = {value // d}.")
            value //= d
    sentences.append(f"How many {thing} does {name} have now?")
    solution = " ".join(work) + f" #### {value}"
    return " ".join(sentences), solution, value


def split(rng, count, steps, seen):
    rows = []
    while len(rows) < count:
        text, solution, answer = problem(rng, steps)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"prompt": text, "answer": str(answer), "solution": solution, "steps": steps})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for train.jsonl and eval.jsonl")
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--eval", type=int, default=200)
    ap.add_argument("--steps", type=int, default=2, help="operations after the start (the difficulty)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.steps < 1 or args.train < 1 or args.eval < 0:
        ap.error("--steps and --train must be at least 1, --eval at least 0")
    os.makedirs(args.out, exist_ok=True)
    seen = set()
    train = split(random.Random(args.seed), args.train, args.steps, seen)
    evals = split(random.Random(args.seed + 1), args.eval, args.steps, seen)
    for name, rows in (("train", train), ("eval", evals)):
        with open(os.path.join(args.out, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(train)} train and {len(evals)} eval problems of {args.steps} steps in {args.out}")


if __name__ == "__main__":
    main()
