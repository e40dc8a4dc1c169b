# Test reward command: starts a long `sleep` in the background and replies with its pid; it exits
# at stdin EOF, leaving the `sleep` behind.
sleep 300 &
child=$!
while IFS= read -r line; do
  echo "{\"reward\": $child}"
done
