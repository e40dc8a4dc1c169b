# Test reward command: replies {"reward": 0} to the first request, then the line given as $1 to
# every later one.
read -r line
echo '{"reward": 0}'
while IFS= read -r line; do
  printf '%s\n' "$1"
done
