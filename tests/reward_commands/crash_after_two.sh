# Test reward command: reads one request, writes two replies and exits with status 3 (replies and
# EOF often arrive in one read: the replies must still count).
read -r line
echo "giving up" >&2
printf '{"reward": 1}\n{"reward": 2}\n'
exit 3
