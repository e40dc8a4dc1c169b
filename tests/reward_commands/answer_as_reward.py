# Test reward command: the reward is float(answer) + metadata["bonus"] (0 without), with an extra
# key that the job must ignore.
import json
import sys

for line in sys.stdin:
    request = json.loads(line)
    reward = float(request["answer"]) + request["metadata"].get("bonus", 0)
    print(json.dumps({"reward": reward, "note": "extra keys are ignored"}), flush=True)
