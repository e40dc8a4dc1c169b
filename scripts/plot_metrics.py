#!/usr/bin/python3
"""Plots a run's per-iteration metrics (RUN_DIR/metrics.jsonl, written by io/metrics_log.hpp).

    scripts/plot_metrics.py RUN_DIR [--out PNG] [--print-layout]

Panels against the iteration: reward (reward_mean, pass_rate, eval/pass@1), loss (loss, and kl on
an axis of its own), throughput (rollout and train tokens/s). Only what informs is drawn: a metric
missing from the log, or zero at every iteration (kl with rl.kl_coef = 0), is left out, and a
panel left with nothing is not drawn. Each metric has its own colour, line style and marker, so
two that coincide (reward_mean and pass_rate on a 0/1 reward) both stay visible. Over more than 20
iterations the per-iteration values are drawn faint and a rolling mean over them bold (a metric
logged at only some iterations, like eval/pass@1, as its points joined). When the
run's config.toml has a supervised warm-up (rl.sft_steps > 0), a line marks where RL starts after
it. Null values (non-finite numbers) are gaps.

Writes RUN_DIR/metrics.png unless --out is given and prints the path; --print-layout prints what
would be drawn (JSON) instead. Exit codes: 0 written, 2 no usable metrics file or bad arguments,
1 matplotlib missing. Needs matplotlib (Debian: python3-matplotlib, installed by scripts/setup.sh);
started by another interpreter without it (pyenv, conda, a virtualenv), it runs itself again with
Debian's /usr/bin/python3.
"""
import argparse
import json
import math
import os
import sys

# (y label, keys); a key in RIGHT_AXIS is drawn against a y axis of its own on the right, because
# its scale differs from the others' by orders of magnitude (kl ~1e-3 beside a loss ~1).
PANELS = [
    ("reward", ["reward_mean", "pass_rate", "eval/pass@1"]),
    ("loss", ["loss", "kl"]),
    ("throughput (tokens/s)", ["rollout_tokens_per_s", "train_tokens_per_s"]),
]
RIGHT_AXIS = {"kl"}
# Per key of a panel, in order: distinct in colour, dash and marker.
STYLES = [("C0", "-", "o"), ("C1", "--", "^"), ("C2", ":", "s")]
SMOOTH_FROM = 20           # iterations; fewer are drawn as they are
SYSTEM_PYTHON = "/usr/bin/python3"
REEXEC_MARK = "SHARDRL_PLOT_METRICS_REEXEC"


def fail(message, code=2):
    print(f"plot_metrics: {message}", file=sys.stderr)
    sys.exit(code)


def import_pyplot():
    """matplotlib's pyplot without a display; this interpreter lacking it, the system one's."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        if os.environ.get(REEXEC_MARK) is None and os.access(SYSTEM_PYTHON, os.X_OK):
            os.environ[REEXEC_MARK] = sys.executable
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
        first = os.environ.get(REEXEC_MARK)   # the interpreter that started us, if we ran again
        tried = f"{first} and {sys.executable}" if first else sys.executable
        fail(f"matplotlib is not installed for {tried} "
             "(Debian: apt-get install python3-matplotlib, or run scripts/setup.sh)", code=1)


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


def informative(values):
    """Some value is a number other than zero."""
    return any(not math.isnan(v) and v != 0 for v in values)


def rolling_mean(values, window):
    """The mean of the last `window` finite values at each point (gaps skipped)."""
    out = []
    for i in range(len(values)):
        recent = [v for v in values[max(0, i - window + 1):i + 1] if not math.isnan(v)]
        out.append(sum(recent) / len(recent) if recent else math.nan)
    return out


def warmup_steps(run_dir):
    """rl.sft_steps of the run's resolved config.toml, or 0 (none, unreadable, or no tomllib)."""
    try:
        import tomllib  # Python 3.11+
        with open(os.path.join(run_dir, "config.toml"), "rb") as f:
            steps = tomllib.load(f).get("rl", {}).get("sft_steps", 0)
    except (ImportError, OSError, ValueError):
        return 0
    return steps if isinstance(steps, int) and steps > 0 else 0


def layout(records, run_dir):
    """What is drawn: the smoothing window, the warm-up mark, and the panels with their series."""
    iterations = [number(r["iteration"]) for r in records]
    window = max(2, len(records) // 20) if len(records) > SMOOTH_FROM else 1
    panels = []
    for title, keys in PANELS:
        series = []
        for index, key in enumerate(keys):
            values = [number(r.get(key)) for r in records]
            if not informative(values):
                continue
            color, dash, marker = STYLES[index]
            series.append({"key": key, "values": values, "color": color, "linestyle": dash, "marker": marker,
                           "right_axis": key in RIGHT_AXIS})
        if series:
            if len(series) == 1:
                series[0]["right_axis"] = False   # alone in its panel: no second axis needed
            panels.append({"title": title, "series": series})
    return {"iterations": iterations, "window": window, "warmup_steps": warmup_steps(run_dir), "panels": panels}


def draw(plan, out, title):
    plt = import_pyplot()
    from matplotlib.ticker import MaxNLocator

    iterations, window = plan["iterations"], plan["window"]
    panels = plan["panels"] or [{"title": "metrics", "series": []}]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3 * len(panels)), sharex=True, squeeze=False)
    axes = [row[0] for row in axes]
    for ax, panel in zip(axes, panels):
        handles = []
        top = ax  # the legend goes on the axes drawn last, so that no line covers it
        for s in panel["series"]:
            target = ax
            if s["right_axis"]:
                target = top = ax.twinx()
                target.set_ylabel(s["key"])
            style = dict(color=s["color"], linestyle=s["linestyle"])
            finite = [(x, y) for x, y in zip(iterations, s["values"]) if not math.isnan(y)]
            if len(finite) < len(iterations) / 2:
                # Sparse (eval/ every rl.eval_interval iterations): its points, joined, unsmoothed.
                handles += target.plot([x for x, _ in finite], [y for _, y in finite], marker=s["marker"],
                                       label=s["key"], **style)
            elif window > 1:
                target.plot(iterations, s["values"], alpha=0.25, linewidth=0.8, **style)
                handles += target.plot(iterations, rolling_mean(s["values"], window), linewidth=2,
                                       label=f"{s['key']} (mean of {window})", **style)
            else:
                handles += target.plot(iterations, s["values"], marker=s["marker"], label=s["key"], **style)
        if handles:
            top.legend(handles, [h.get_label() for h in handles], loc="best")
        else:
            ax.text(0.5, 0.5, "no informative metric in the log", transform=ax.transAxes, ha="center",
                    va="center", color="gray")
        if plan["warmup_steps"] and iterations:
            ax.axvline(min(iterations) - 0.5, color="gray", linestyle="-.", linewidth=1)
        ax.set_ylabel(panel["title"])
        ax.grid(True, alpha=0.3)
    if plan["warmup_steps"] and iterations:
        axes[0].annotate(f"RL starts after {plan['warmup_steps']} warm-up steps", xy=(min(iterations) - 0.5, 1),
                         xycoords=("data", "axes fraction"), xytext=(4, -12), textcoords="offset points",
                         color="gray", fontsize=8)
    axes[-1].set_xlabel("iteration")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(out, format="png", dpi=100)
    except OSError as e:
        fail(f"cannot write '{out}': {e.strerror}")


def main():
    parser = argparse.ArgumentParser(description="Plot RUN_DIR/metrics.jsonl to a PNG.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory holding metrics.jsonl")
    parser.add_argument("--out", metavar="PNG", help="output file (default RUN_DIR/metrics.png)")
    parser.add_argument("--print-layout", action="store_true",
                        help="print what would be drawn (JSON: panels, series, styles, smoothing, warm-up) "
                             "instead of drawing")
    args = parser.parse_args()

    metrics_path = os.path.join(args.run_dir, "metrics.jsonl")
    records = [r for r in read_metrics(metrics_path) if not math.isnan(number(r.get("iteration")))]
    if not records:
        fail(f"metrics file '{metrics_path}' has no record with a numeric \"iteration\"")
    plan = layout(records, args.run_dir)
    if args.print_layout:
        summary = {k: plan[k] for k in ("window", "warmup_steps")}
        summary["panels"] = [{"title": p["title"],
                              "series": [{k: s[k] for k in ("key", "color", "linestyle", "marker", "right_axis")}
                                         for s in p["series"]]} for p in plan["panels"]]
        print(json.dumps(summary))
        return 0
    out = args.out or os.path.join(args.run_dir, "metrics.png")
    draw(plan, out, os.path.basename(os.path.normpath(os.path.abspath(args.run_dir))))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
