#!/usr/bin/env python3
"""Where a train step's GPU time goes, from Nsight Compute's per-kernel durations.

  ncu --profile-from-start off --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv <program> > kernels.csv
  bench/kernel_breakdown.py kernels.csv --steps N

Each kernel's duration is measured alone (ncu serialises kernels), so the sum is the step's time
with no overlap of communication and compute: an upper bound on the exposed collectives. Kernels
are grouped by what they compute, from their demangled names: cuBLAS's GEMMs, the flash
attention kernels, and each Kokkos kernel by the shardrl function whose lambda it runs.
"""
import argparse
import collections
import csv
import re
import sys

# First match wins; the pattern is searched in the kernel's short name (see short_name).
CATEGORIES = [
    ("attention", r"flash_|attention|softmax"),
    ("KV cache write", r"kv_cache_write"),
    ("sampling (the draw)", r"sample_tokens|logits_max|sampling"),
    ("cross-entropy", r"token_logprob|masked_nll"),
    ("optimizer", r"adamw|optimizer"),
    ("collectives", r"nccl"),
    ("norms", r"rmsnorm"),
    ("rope", r"rope"),
    ("swiglu", r"swiglu"),
    ("embedding", r"embedding"),
    ("GEMMs", r"gemm|cutlass|xmma|nvjet|cublas|splitKreduce|gemv"),
    ("casts, adds, fills, copies", r"cast|add|axpy|scale|fill|copy|zero|ViewFill|ViewCopy|memset"),
]


def short_name(kernel):
    """A Kokkos kernel's demangled name carries its functor, the lambda of a shardrl function
    (`Kokkos::ParallelFor<void kernels::rmsnorm_forward<bf16>(...)::[lambda ...]`): keep that
    function's name; any other kernel keeps its own name without namespaces' anonymity and
    template arguments."""
    k = kernel.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    if "Kokkos" in k:
        m = re.search(r"Parallel(?:For|Reduce|Scan)<(?:Kokkos::CombinedFunctorReducer<)?(?:void )?"
                      r"([A-Za-z_][A-Za-z0-9_:]*)", k)
        if m:
            return m.group(1)
    m = re.search(r"^(?:void\s+)?([A-Za-z_][A-Za-z0-9_:]*)", k)
    return (m.group(1) if m else k)[:80]


def read(path):
    durations = collections.defaultdict(float)   # short name -> ns
    counts = collections.Counter()
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]   # ncu's own messages are not CSV rows
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}.get(unit, 1.0)
        name = short_name(row["Kernel Name"])
        durations[name] += value * scale
        counts[name] += 1
    return durations, counts


def category(name):
    for label, pattern in CATEGORIES:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=1, help="timed steps the profile covers")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    durations, counts = read(a.csv)
    if not durations:
        sys.exit(f"{a.csv}: no gpu__time_duration.sum rows (was ncu run with --csv and that metric?)")
    total = sum(durations.values())
    by_cat = collections.defaultdict(float)
    launches = collections.Counter()
    for name, ns in durations.items():
        by_cat[category(name)] += ns
        launches[category(name)] += counts[name]
    ms = lambda ns: ns / 1e6 / a.steps
    print(f"| part of the step | ms per step | share | kernels per step |")
    print(f"| --- | --- | --- | --- |")
    for label, ns in sorted(by_cat.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {ms(ns):.1f} | {100 * ns / total:.1f}% | {launches[label] // a.steps} |")
    print(f"| **sum of kernel times** | **{ms(total):.1f}** | 100% | {sum(counts.values()) // a.steps} |")
    print()
    print(f"| kernel (top {a.top}) | part | ms per step | launches per step |")
    print(f"| --- | --- | --- | --- |")
    for name, ns in sorted(durations.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"| `{name}` | {category(name)} | {ms(ns):.2f} | {counts[name] // a.steps} |")


if __name__ == "__main__":
    main()
