#!/usr/bin/env python3
"""Draws a `shardrl train --trace` file as a PNG: one band per rank, its spans as bars on rows by
nesting depth (iterations on top, then rollout and train, then their parts), coloured by what they
are, over the host time. For a picture where Perfetto (ui.perfetto.dev), the interactive view, is
not at hand.
  scripts/plot_trace.py TRACE.json [--out PNG] [--from S] [--to S]   (seconds from the trace's start)
"""
import argparse
import json
import os
import sys

if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        # A python3 without matplotlib first on PATH (pyenv, a venv): Debian's has it. Run again
        # once under it (the mark says we did), and where it lacks matplotlib too, say so.
        if os.environ.get("SHARDRL_PLOT_TRACE_REEXEC") is None and os.access("/usr/bin/python3", os.X_OK):
            os.environ["SHARDRL_PLOT_TRACE_REEXEC"] = sys.executable
            os.execv("/usr/bin/python3", ["/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit("plot_trace: matplotlib is not installed for "
                 + " and ".join(filter(None, [os.environ.get("SHARDRL_PLOT_TRACE_REEXEC"), sys.executable]))
                 + " (Debian: apt-get install python3-matplotlib, or run scripts/setup.sh)")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# What a span is, by the start of its name (the unit or step index follows).
KINDS = [("iteration", "#bbbbbb"), ("warm-up step", "#dddddd"), ("rollout weights", "#8c564b"),
         ("rollout", "#1f77b4"), ("train", "#2ca02c"), ("evaluation", "#9467bd"), ("prefill", "#17becf"),
         ("decode step", "#aec7e8"), ("log-probs", "#bcbd22"), ("reference log-probs", "#dbdb8d"),
         ("forward unit", "#98df8a"), ("backward unit", "#ff9896"), ("all-gather unit", "#ffbb78"),
         ("reduce-scatter unit", "#d62728"), ("optimizer", "#7f7f7f"), ("checkpoint save", "#e377c2")]


def kind_of(name):
    for kind, colour in KINDS:
        if name == kind or name.startswith(kind + " "):
            return kind, colour
    return name, "#000000"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--out")
    ap.add_argument("--from", dest="t_from", type=float, default=None)
    ap.add_argument("--to", dest="t_to", type=float, default=None)
    a = ap.parse_args()
    try:
        events = json.load(open(a.trace))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_trace: cannot read {a.trace}: {e}")
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit(f"plot_trace: {a.trace} has no spans")
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    t0 = min(e["ts"] for e in spans)
    ranks = sorted({e["pid"] for e in spans})
    depth = max(e["args"].get("depth", 0) for e in spans) + 1
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.45 * depth * len(ranks)))
    seen = {}
    for i, rank in enumerate(ranks):
        base = (len(ranks) - 1 - i) * (depth + 1)
        for e in spans:
            if e["pid"] != rank:
                continue
            start, end = (e["ts"] - t0) / 1e6, (e["ts"] + e["dur"] - t0) / 1e6
            if (a.t_from is not None and end < a.t_from) or (a.t_to is not None and start > a.t_to):
                continue
            kind, colour = kind_of(e["name"])
            y = base + depth - 1 - e["args"].get("depth", 0)
            bar = ax.barh(y, max(end - start, 1e-6), left=start, height=0.8, color=colour, edgecolor="none")
            seen.setdefault(kind, bar)
        ax.text(-0.01, base + depth / 2, names.get(rank, f"rank {rank}"), transform=ax.get_yaxis_transform(),
                ha="right", va="center")
    ax.set_yticks([])
    ax.set_xlabel("seconds from the trace's start (host clock)")
    if a.t_from is not None or a.t_to is not None:
        ax.set_xlim(a.t_from, a.t_to)
    ax.legend(seen.values(), seen.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=6, fontsize=8,
              frameon=False)
    ax.set_title(os.path.basename(a.trace))
    fig.tight_layout()
    out = a.out or os.path.splitext(a.trace)[0] + ".png"
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
