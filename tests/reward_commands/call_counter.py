# Test reward command: the reward is the number of requests this process has seen, so that a
# second batch proves the process lived on.
import json
import sys

seen = 0
for line in sys.stdin:
    json.loads(line)
    seen += 1
    print(json.dumps({"reward": seen}), flush=True)
