#!/usr/bin/env python3
"""A TensorBoard that was showing a run while the run was resumed from an earlier checkpoint.
TensorBoard itself (`tensorboard --logdir`, with its Rust data server and with its Python
reader) serves the first job's event file; the file is then replaced as the resumed job replaces
it (the new file written, the old one removed); after its reload interval, what does it serve for
each step? Printed for each reader, with the file as written (its session start at step 0) and
as a control without that event. Needs the tensorboard package (on the GPU machine). BEFORE and
AFTER are copies of one run directory after its first job and after the resumed one
(docs/observability.md has the commands).
  tests/gpu/tensorboard_live_resume.py BEFORE_RUN_DIR AFTER_RUN_DIR
"""
import glob, json, os, shutil, socket, struct, subprocess, sys, tempfile, time, urllib.request

before, after = sys.argv[1], sys.argv[2]
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]


def event_file(run):
    files = glob.glob(os.path.join(run, "tensorboard", "*tfevents*"))
    assert len(files) == 1, files
    return files[0]


def without_session_start(src, dst):
    raw, out, pos, n = open(src, "rb").read(), b"", 0, 0
    while pos < len(raw):
        (length,) = struct.unpack("<Q", raw[pos:pos + 8])
        if n != 1:
            out += raw[pos:pos + 16 + length]
        pos, n = pos + 16 + length, n + 1
    open(dst, "wb").write(out)


def lr_points(port):
    url = f"http://localhost:{port}/data/plugin/scalars/scalars?tag=lr&run=."
    for _ in range(60):
        try:
            return sorted((int(s), v) for _, s, v in json.load(urllib.request.urlopen(url, timeout=5)))
        except Exception:
            time.sleep(1)
    return None


def served(load_fast, writer):
    logdir = tempfile.mkdtemp()
    first = event_file(before)
    shutil.copy(first, logdir)
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--port", str(port),
                           "--reload_interval", "1", f"--load_fast={load_fast}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(8)
        first_points = lr_points(port)
        os.remove(os.path.join(logdir, os.path.basename(first)))
        second = event_file(after)
        writer(second, os.path.join(logdir, os.path.basename(second)))
        time.sleep(8)
        return first_points, lr_points(port)
    finally:
        tb.terminate()
        err = tb.communicate(timeout=20)[1].decode(errors="replace")
        if "error" in err.lower():
            print(f"  (load_fast={load_fast} stderr tail: {err[-400:]!r})")


want = sorted((json.loads(l)["iteration"], f32(json.loads(l)["lr"])) for l in open(os.path.join(after, "metrics.jsonl")))
print("the resumed run's lr by step:", want)
for load_fast in ("true", "false"):
    for name, writer in (("as written", shutil.copy), ("control, no session start", without_session_start)):
        first_points, points = served(load_fast, writer)
        verdict = "right" if points == want else "WRONG"
        print(f"load_fast={load_fast}, {name}: before {first_points}; after the resume {points}: {verdict}")
