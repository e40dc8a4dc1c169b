#!/usr/bin/env python3
"""A TensorBoard that was showing a run while the run was resumed from an earlier checkpoint:
TensorBoard's own reader (event_accumulator, on the run's tensorboard/ directory as
`tensorboard --logdir` reads it) loads the event file of the first job, the file is then
replaced as the resumed job replaces it, and the reader loads again. Every scalar must then
appear once per step with the resumed job's values: the new file's session start at step 0 makes
the reader drop what it had loaded. Without that event (the same file with it cut out, run as
a control) the abandoned iterations stay beside the new ones, and the check must fail.
Needs the tensorboard package (on the GPU machine). BEFORE and AFTER are copies of one run
directory after its first job and after the resumed one (docs/observability.md has the commands).
  tests/gpu/tensorboard_live_resume.py BEFORE_RUN_DIR AFTER_RUN_DIR
"""
import glob, json, math, os, shutil, struct, sys, tempfile
from tensorboard.backend.event_processing import event_accumulator as ea

before, after = sys.argv[1], sys.argv[2]
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
tag = lambda k: "time/" + k if k.endswith("_s") and not k.endswith("_per_s") else k


def event_file(run):
    files = glob.glob(os.path.join(run, "tensorboard", "*tfevents*"))
    assert len(files) == 1, files
    return files[0]


def without_session_start(src, dst):
    """The file with its second record (the session start) cut out; the others' CRCs stay valid."""
    raw, out, pos, n = open(src, "rb").read(), b"", 0, 0
    while pos < len(raw):
        (length,) = struct.unpack("<Q", raw[pos:pos + 8])
        if n != 1:
            out += raw[pos:pos + 16 + length]
        pos, n = pos + 16 + length, n + 1
    open(dst, "wb").write(out)


def problems(after_file_writer):
    """What the live reader shows wrong after the resume: a list of strings, empty if all is right."""
    logdir = tempfile.mkdtemp()
    first = event_file(before)
    shutil.copy(first, logdir)
    acc = ea.EventAccumulator(logdir, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    loaded = len(acc.Scalars("lr"))
    assert loaded == sum(1 for l in open(os.path.join(before, "metrics.jsonl")) if l.strip()), loaded
    os.remove(os.path.join(logdir, os.path.basename(first)))
    second = event_file(after)
    after_file_writer(second, os.path.join(logdir, os.path.basename(second)))
    acc.Reload()
    found = []
    records = [json.loads(l) for l in open(os.path.join(after, "metrics.jsonl")) if l.strip()]
    for t in acc.Tags()["scalars"]:
        steps = [e.step for e in acc.Scalars(t)]
        if len(steps) != len(set(steps)):
            found.append(f"{t}: steps {steps}")
    for r in records:
        for k, v in r.items():
            if k in ("iteration", "time") or v is None or not math.isfinite(v):
                continue
            values = [e.value for e in acc.Scalars(tag(k)) if e.step == r["iteration"]]
            if values != [f32(v)]:
                found.append(f"{k} at {r['iteration']}: {values} against {f32(v)}")
    return found


with_start = problems(shutil.copy)
assert not with_start, with_start[:5]
control = problems(without_session_start)
assert control, "the control (no session start) showed no stale points: the check cannot fail"
import tensorboard
print(f"tensorboard {tensorboard.__version__}: after the resume every step once with the resumed values; "
      f"without the session start {len(control)} problems, e.g. {control[0]}")
