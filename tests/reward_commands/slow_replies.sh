# Test reward command: replies 0.5 to each request a tenth of a second after reading it: steady
# progress that a batch of many requests takes long over.
while IFS= read -r line; do
  sleep 0.1
  echo '{"reward": 0.5}'
done
