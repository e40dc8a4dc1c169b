# Test reward command: the reward is the completion's length in code points. While the file
# `stop.flag` is in the working directory, at the request its first line names (1-based) it does
# what Slurm's scancel or a preemption does to a job step: SIGTERM to the rank that started it,
# then to itself (no handler: it ends), before replying. With "parent" after the number, only the
# rank is signalled (its own signal came later), and the command replies as usual.
import json
import os
import signal
import sys

stop_at, only_parent = None, False
if os.path.exists("stop.flag"):
    with open("stop.flag") as f:
        words = f.readline().split()
    stop_at, only_parent = int(words[0]), words[1:] == ["parent"]
for count, line in enumerate(sys.stdin, start=1):
    if count == stop_at:
        os.kill(os.getppid(), signal.SIGTERM)
        if not only_parent:
            os.kill(os.getpid(), signal.SIGTERM)
    request = json.loads(line)
    print(json.dumps({"reward": len(request["completion"])}), flush=True)
