# Test reward command: every completion scores 0.5 and passes (as a right answer would whose reward
# a length penalty took below 1) where the request carries the question both ways: as the model
# saw it ("prompt", the chat template applied) and as the dataset wrote it (metadata's "prompt").
import json
import sys

for line in sys.stdin:
    request = json.loads(line)
    question = request["metadata"].get("prompt", "")
    rendered = request["prompt"]
    both = question != "" and question in rendered and rendered != question
    print(json.dumps({"reward": 0.5, "pass": both}), flush=True)
