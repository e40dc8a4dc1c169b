# Test reward command: every completion scores 0.5 and passes (as a right answer would whose reward
# a length penalty took below 1).
while IFS= read -r line; do
  echo '{"reward": 0.5, "pass": true}'
done
