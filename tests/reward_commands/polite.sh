# Test reward command: the reward is its own pid; it exits at stdin EOF.
while IFS= read -r line; do
  echo "{\"reward\": $$}"
done
