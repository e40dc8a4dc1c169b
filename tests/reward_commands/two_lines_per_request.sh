# Test reward command: replies twice to each request (in one write), which the job must catch.
while IFS= read -r line; do
  printf '{"reward": 1}\n{"reward": 2}\n'
done
