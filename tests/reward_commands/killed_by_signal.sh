# Test reward command: reads one request, then kills itself with SIGKILL.
read -r line
kill -9 $$
