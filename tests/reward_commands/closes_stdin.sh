# Test reward command: reads one request, closes its stdin and goes on running.
read -r line
exec 0<&-
sleep 60
