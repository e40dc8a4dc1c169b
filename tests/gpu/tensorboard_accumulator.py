#!/usr/bin/env python3
"""TensorBoard's own reader (event_accumulator) on a shardrl run's event file: every scalar of
metrics.jsonl at its iteration (as float32), each step once, the config as a text summary at step
0. Needs the tensorboard package (installed on the GPU machine; the CPU suite's
tests/read_tensorboard_events.py checks the same file with the bare protobuf runtime).
  tests/gpu/tensorboard_accumulator.py RUN_DIR
"""
import glob, json, math, os, struct, sys
from tensorboard.backend.event_processing import event_accumulator as ea
run = sys.argv[1]
f = glob.glob(os.path.join(run, "tensorboard", "*tfevents*"))
assert len(f) == 1, f
acc = ea.EventAccumulator(f[0], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
records = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
tag = lambda k: "time/" + k if k.endswith("_s") and not k.endswith("_per_s") else k
checked = 0
for r in records:
    for k, v in r.items():
        if k == "iteration" or v is None or not math.isfinite(v):
            continue
        events = [e for e in acc.Scalars(tag(k)) if e.step == r["iteration"]]
        assert len(events) == 1, (k, r["iteration"], events)
        assert events[0].value == f32(v), (k, r["iteration"], events[0].value, v)
        checked += 1
for t in tags["scalars"]:
    steps = [e.step for e in acc.Scalars(t)]
    assert len(steps) == len(set(steps)), (t, steps)
text = acc.Tensors("config")
assert len(text) == 1 and text[0].step == 0, text
body = text[0].tensor_proto.string_val[0].decode()
assert open(os.path.join(run, "config.toml")).read().strip() in body
import tensorboard
print(f"tensorboard {tensorboard.__version__} event_accumulator: {len(tags['scalars'])} scalar tags, "
      f"{len(records)} iterations, {checked} values equal to metrics.jsonl, each step once, config text at step 0")
