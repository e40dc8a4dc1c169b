#!/usr/bin/python3
"""Plots a run's per-iteration metrics (RUN_DIR/metrics.jsonl, written by io/metrics_log.hpp).

    scripts/plot_metrics.py RUN_DIR [--out PNG]

Three panels against the iteration: reward_mean and pass_rate; loss and kl; rollout_tokens_per_s
and train_tokens_per_s. A key missing from the log is left out (a panel shows what exists); null
values (non-finite numbers) are gaps. Writes RUN_DIR/metrics.png unless --out is given and prints
the path. Exit codes: 0 written, 2 no usable metrics file or bad arguments, 1 matplotlib missing.
Needs matplotlib (Debian: python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import json
import math
import os
import sys

# (y label, keys); a key in RIGHT_AXIS is drawn against a y axis of its own on the right, because
# its scale differs from the others' by orders of magnitude (kl ~1e-3 beside a loss ~1).
PANELS = [
    ("reward", ["reward_mean", "pass_rate"]),
    ("loss", ["loss", "kl"]),
    ("throughput (tokens/s)", ["rollout_tokens_per_s", "train_tokens_per_s"]),
]
RIGHT_AXIS = {"kl"}


def fail(message, code=2):
    print(f"plot_metrics: {message}", file=sys.stderr)
    sys.exit(code)


def read_metrics(path):
    """One dict per non-blank line; an unfinished last line (a running or killed job) is skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        fail(f"cannot read metrics file '{path}': {e.strerror}")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):  # no newline after it: a record still being written
                continue
            fail(f"{path}:{number}: not valid JSON ({e.msg})")
        if not isinstance(record, dict):
            fail(f"{path}:{number}: expected a JSON object")
        records.append(record)
    if not records:
        fail(f"metrics file '{path}' has no records")
    return records


def number(value):
    """A plottable float, or NaN (a gap) for null and anything that is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def main():
    parser = argparse.ArgumentParser(description="Plot RUN_DIR/metrics.jsonl to a PNG.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory holding metrics.jsonl")
    parser.add_argument("--out", metavar="PNG", help="output file (default RUN_DIR/metrics.png)")
    args = parser.parse_args()

    metrics_path = os.path.join(args.run_dir, "metrics.jsonl")
    records = [r for r in read_metrics(metrics_path) if not math.isnan(number(r.get("iteration")))]
    if not records:
        fail(f"metrics file '{metrics_path}' has no record with a numeric \"iteration\"")
    out = args.out or os.path.join(args.run_dir, "metrics.png")

    try:
        import matplotlib

        matplotlib.use("Agg")  # no display
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        fail(f"matplotlib is not installed for {sys.executable} "
             "(Debian: apt-get install python3-matplotlib, or run scripts/setup.sh)", code=1)

    iterations = [number(r["iteration"]) for r in records]
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(8, 9), sharex=True)
    for ax, (title, keys) in zip(axes, PANELS):
        present = [k for k in keys if any(k in r for r in records)]
        lines = []
        top = ax  # the legend goes on the axes drawn last, so that no line covers it
        for index, key in enumerate(present):
            target = ax
            if key in RIGHT_AXIS and len(present) > 1:
                target = top = ax.twinx()
                target.set_ylabel(key)
            lines += target.plot(iterations, [number(r.get(key)) for r in records], marker=".",
                                 label=key, color=f"C{index}")
        if lines:
            top.legend(lines, [line.get_label() for line in lines], loc="best")
        else:
            ax.text(0.5, 0.5, f"no {' / '.join(keys)} in the log", transform=ax.transAxes,
                    ha="center", va="center", color="gray")
        ax.set_ylabel(title)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("iteration")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(os.path.basename(os.path.normpath(os.path.abspath(args.run_dir))))
    fig.tight_layout()
    try:
        fig.savefig(out, format="png", dpi=100)
    except OSError as e:
        fail(f"cannot write '{out}': {e.strerror}")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
