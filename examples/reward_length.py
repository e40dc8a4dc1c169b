#!/usr/bin/env python3
# An example reward command for shardrl (rl.reward = "command"): reward 1 when the completion's
# last number equals the answer, minus a small penalty per character, so that among right
# answers the shorter ones win. Python standard library only. The reply's "pass" says which
# answers were right: shardrl's pass_rate and eval/pass@k count those (without it they count
# rewards of exactly 1, which this penalty never leaves).
#
# Use it with:
#   [rl]
#   reward = "command"
#   reward_command = ["python3", "examples/reward_length.py"]
#
# The protocol (JSON lines; one process serves the whole job, per rank that scores):
#   stdin   one request per line:
#           {"prompt": str, "completion": str, "answer": str, "metadata": {...}}
#   stdout  one reply per request, in the same order, each on its own line:
#           {"reward": <finite number>, "pass": true|false}
#           ("pass" is optional; extra keys are allowed and ignored)
#   stderr  forwarded to the job's log, line by line: print diagnostics there, never on stdout.
# Flush stdout after each reply: the job allows each batch rl.reward_timeout_s seconds, and a
# reply held in a buffer never arrives. A request never spans lines (JSON escapes newlines).
# Exit when stdin ends (the job is done); a non-zero exit, a line that is not such a reply, or a
# reply missing stops the job with an error naming the request.
import json
import re
import sys

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
PENALTY_PER_CHAR = 0.001


def parse_number(text):
    try:
        return float(text)
    except ValueError:
        return None


def correct(request):
    numbers = NUMBER.findall(request["completion"])
    expected = parse_number(request["answer"].strip())
    return bool(numbers) and expected is not None and parse_number(numbers[-1]) == expected


def main():
    for line in sys.stdin:
        request = json.loads(line)
        right = correct(request)
        reward = (1.0 if right else 0.0) - PENALTY_PER_CHAR * len(request["completion"])
        print(json.dumps({"reward": reward, "pass": right}), flush=True)


if __name__ == "__main__":
    main()
