# Test reward command: the reward is 1 if this process has file descriptor $1 open, else 0.
while IFS= read -r line; do
  if [ -e "/proc/$$/fd/$1" ]; then echo '{"reward": 1}'; else echo '{"reward": 0}'; fi
done
