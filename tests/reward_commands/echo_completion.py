# Test reward command: the reward is len(completion) and the reply echoes the completion, so that
# big batches fill both pipes at once.
import json
import sys

for line in sys.stdin:
    completion = json.loads(line)["completion"]
    sys.stdout.write(json.dumps({"reward": len(completion), "echo": completion}) + "\n")
    sys.stdout.flush()
