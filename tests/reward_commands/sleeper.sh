# Test reward command: reads a request, starts a reply and never finishes it.
read -r line
printf '{"rew'
sleep 60
