# Test reward command: the reward is its own pid; it then ignores stdin EOF and SIGTERM (and so
# does its `sleep`), so only SIGKILL ends it.
trap '' TERM
IFS= read -r line
echo "{\"reward\": $$}"
while :; do
  sleep 1
done
