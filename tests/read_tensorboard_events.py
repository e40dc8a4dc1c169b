#!/usr/bin/env python3
"""Reads a run's TensorBoard event file as TensorFlow's record reader does, and checks it against
the run's metrics.jsonl and config.toml. Every record's two masked CRC-32Cs are verified
(crcmod), every Event is decoded with the protobuf runtime from the message definitions below
(compiled by protoc: the field numbers and types of tensorflow/core/util/event.proto and
tensorflow/core/framework/summary.proto, tensor.proto, tensor_shape.proto). Checked: one event
file; its first event the file version; the config as a text summary at step 0; one summary
per metrics.jsonl record, at its iteration, each step once, holding exactly the record's finite
fields under their tags with the record's values (as float32), its wall time the record's "time"
(also for a resumed run's earlier iterations, written again).
  read_tensorboard_events.py RUN_DIR        exit 0: all good; 1: a check failed (printed);
                                            77: protoc, google.protobuf or crcmod missing
"""
import glob
import importlib
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

PROTO = """
syntax = "proto3";
package shardrl_tb_test;
message TensorShapeProto {
  message Dim { int64 size = 1; string name = 2; }
  repeated Dim dim = 2;
  bool unknown_rank = 3;
}
message TensorProto {
  int32 dtype = 1;   // tensorflow.DataType (an enum: the same varint); DT_STRING = 7
  TensorShapeProto tensor_shape = 2;
  int32 version_number = 3;
  bytes tensor_content = 4;
  repeated bytes string_val = 8;
}
message PluginData { string plugin_name = 1; bytes content = 2; }
message SummaryMetadata { PluginData plugin_data = 1; string display_name = 2; string summary_description = 3; }
message Summary {
  message Value {
    string node_name = 7;
    string tag = 1;
    SummaryMetadata metadata = 9;
    oneof value { float simple_value = 2; bytes obsolete_old_style_histogram = 3; TensorProto tensor = 8; }
  }
  repeated Value value = 1;
}
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what { string file_version = 3; bytes graph_def = 4; Summary summary = 5; }
}
"""


def skip(reason):
    print(f"read_tensorboard_events: skipped: {reason}", file=sys.stderr)
    sys.exit(77)


def fail(message):
    print(f"read_tensorboard_events: {message}", file=sys.stderr)
    sys.exit(1)


def tag_of(field):
    return "time/" + field if field.endswith("_s") and not field.endswith("_per_s") else field


def main():
    run = sys.argv[1]
    try:
        import crcmod.predefined
        import google.protobuf  # noqa: F401
    except ImportError as e:
        skip(f"{e} (apt-get install python3-protobuf python3-crcmod)")
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "tb_events.proto"), "w") as f:
        f.write(PROTO)
    try:
        subprocess.run(["protoc", f"--proto_path={tmp}", f"--python_out={tmp}", "tb_events.proto"], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        skip(f"protoc: {e} (apt-get install protobuf-compiler)")
    sys.path.insert(0, tmp)
    pb = importlib.import_module("tb_events_pb2")
    crc32c = crcmod.predefined.mkCrcFun("crc-32c")

    def masked(data):
        c = crc32c(data)
        return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    files = glob.glob(os.path.join(run, "tensorboard", "*tfevents*"))
    if len(files) != 1:
        fail(f"expected one event file in {run}/tensorboard, found {files}")
    raw = open(files[0], "rb").read()
    events, pos = [], 0
    while pos < len(raw):
        if pos + 12 > len(raw):
            fail(f"truncated record header at byte {pos}")
        header = raw[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", raw[pos + 8:pos + 12])
        if header_crc != masked(header):
            fail(f"record at byte {pos}: the length's CRC does not match")
        data = raw[pos + 12:pos + 12 + length]
        if len(data) != length or pos + 16 + length > len(raw):
            fail(f"record at byte {pos}: truncated")
        (data_crc,) = struct.unpack("<I", raw[pos + 12 + length:pos + 16 + length])
        if data_crc != masked(data):
            fail(f"record at byte {pos}: the data's CRC does not match")
        event = pb.Event()
        event.ParseFromString(data)
        events.append(event)
        pos += 16 + length

    if not events or events[0].file_version != "brain.Event:2":
        fail("the first event is not the file version brain.Event:2")
    config = open(os.path.join(run, "config.toml")).read()
    texts = [v for e in events if e.HasField("summary") for v in e.summary.value if v.HasField("tensor")]
    if len(texts) != 1 or texts[0].tag != "config" or texts[0].metadata.plugin_data.plugin_name != "text":
        fail(f"expected one text summary 'config' for the text plugin, got {[t.tag for t in texts]}")
    if texts[0].tensor.dtype != 7 or config.strip() not in texts[0].tensor.string_val[0].decode():
        fail("the config text summary does not hold config.toml")

    scalars, wall_times = {}, {}
    for e in events:
        if not e.HasField("summary") or any(v.HasField("tensor") for v in e.summary.value):
            continue
        if e.step in scalars:
            fail(f"step {e.step} appears twice")
        scalars[e.step] = {v.tag: v.simple_value for v in e.summary.value}
        wall_times[e.step] = e.wall_time
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if line.strip()]
    if sorted(scalars) != sorted(r["iteration"] for r in records):
        fail(f"steps {sorted(scalars)} against metrics.jsonl's iterations {[r['iteration'] for r in records]}")
    for r in records:
        want = {tag_of(k): struct.unpack("<f", struct.pack("<f", v))[0]
                for k, v in r.items() if k not in ("iteration", "time") and v is not None and math.isfinite(v)}
        if "time" not in r or wall_times[r["iteration"]] != r["time"]:
            fail(f"iteration {r['iteration']}: wall time {wall_times[r['iteration']]} against the record's "
                 f"{r.get('time')}")
        got = scalars[r["iteration"]]
        if got != want:
            diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
            fail(f"iteration {r['iteration']}: TensorBoard against metrics.jsonl differ: {diff}")
    print(f"read_tensorboard_events: {len(events)} events, {len(records)} iterations, every CRC and value checked")


if __name__ == "__main__":
    main()
