# Test reward command: replies to its first request, then writes a stray second line a moment
# later; every later request gets 3.
IFS= read -r line
echo '{"reward": 1}'
sleep 0.2
echo '{"reward": 2}'
while IFS= read -r line; do
  echo '{"reward": 3}'
done
