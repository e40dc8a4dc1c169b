# Test reward command: the reward is the completion's length in code points. While the file
# `stop.flag` is in the working directory, at the request its first line names (1-based) it does
# what Slurm's scancel or a preemption does to a job step: SIGTERM to the rank that started it,
# then to itself (no handler: it ends), before replying. After the number, "parent" signals only
# the rank (its own signal came later) and replies as usual. The signal always goes before the
# reply: sent after it, it could reach the rank only once the rank had moved on (this process
# may wait for a core while the ranks run), and what the job does then depends on when.
import json
import os
import signal
import sys

stop_at, mode = None, ""
if os.path.exists("stop.flag"):
    with open("stop.flag") as f:
        words = f.readline().split()
    stop_at, mode = int(words[0]), " ".join(words[1:])
for count, line in enumerate(sys.stdin, start=1):
    if count == stop_at:
        os.kill(os.getppid(), signal.SIGTERM)
        if mode != "parent":
            os.kill(os.getpid(), signal.SIGTERM)
    request = json.loads(line)
    print(json.dumps({"reward": len(request["completion"])}), flush=True)
