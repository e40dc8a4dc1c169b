# Test reward command: the reward is len(prompt) + 1000 * len(completion), in code points, so that
# a test can tell the texts arrived whole (newlines, quotes, non-ASCII).
import json
import sys

for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({"reward": len(request["prompt"]) + 1000 * len(request["completion"])}), flush=True)
