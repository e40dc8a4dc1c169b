# Test reward command: talks on stderr (a line at start, one per request, an unterminated one at
# exit); the reward is the request's index.
echo "starting up" >&2
n=0
while IFS= read -r line; do
  echo "scoring request $n" >&2
  echo "{\"reward\": $n}"
  n=$((n + 1))
done
printf 'bye without newline' >&2
