# Test reward command: reads one request and exits 0 without a reply, while the job still writes.
read -r line
exit 0
