# Test reward command: the reward is float(answer) + metadata["bonus"] (0 without), with an extra
# key that the job must ignore, and metadata["pass"] as the reply's "pass" where it is given.
import json
import sys

for line in sys.stdin:
    request = json.loads(line)
    reward = float(request["answer"]) + request["metadata"].get("bonus", 0)
    reply = {"reward": reward, "note": "extra keys are ignored"}
    if "pass" in request["metadata"]:
        reply["pass"] = request["metadata"]["pass"]
    print(json.dumps(reply), flush=True)
