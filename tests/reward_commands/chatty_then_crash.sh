# Test reward command: 30 stderr lines a request (more than the log takes), replies to four
# requests, then a traceback and exit 1 before the fifth: the traceback must reach the log.
n=0
while IFS= read -r line; do
  if [ "$n" -eq 4 ]; then
    echo "Traceback (most recent call last):" >&2
    echo "ValueError: request 4 is bad" >&2
    exit 1
  fi
  i=0
  while [ "$i" -lt 30 ]; do
    echo "request $n detail $i" >&2
    i=$((i + 1))
  done
  echo "{\"reward\": $n}"
  n=$((n + 1))
done
