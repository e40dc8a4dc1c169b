# A private Slurm on this machine for tests: munged, slurmctld and one slurmd (node "localhost"),
# everything (keys, state, logs, sockets, pid files) under one directory and on free ports, so it
# neither needs nor touches a system Slurm. Sourced; needs root (munged runs as user munge).
#   local_slurm_start DIR   -> exports SLURM_CONF; returns 77 with the reason on stderr when
#                              this machine cannot run one (not root, packages missing)
#   local_slurm_stop DIR    -> stops the daemons by the PIDs in their pid files

local_slurm_skip_reason() {
  local tool
  for tool in munged mungekey slurmctld slurmd sbatch scontrol squeue runuser python3; do
    command -v "$tool" >/dev/null 2>&1 ||
      { echo "$tool not found (scripts/test.sh installs slurm-wlm and munge)"; return; }
  done
  [[ $(id -u) -eq 0 ]] || echo "not root: munged and slurmd must be started as root"
}

local_slurm_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

local_slurm_start() {
  local dir=$1 reason
  reason=$(local_slurm_skip_reason)
  if [[ -n $reason ]]; then echo "local Slurm: $reason" >&2; return 77; fi
  mkdir -p "$dir"/{munge,state,spool,log,run}
  chown munge:munge "$dir/munge"
  chmod 0755 "$dir" "$dir/munge"   # munged refuses a socket directory that others cannot enter
  runuser -u munge -- test -x "$dir/munge" ||
    { echo "local Slurm: user munge cannot enter $dir/munge (a parent directory is private)" >&2; return 1; }
  runuser -u munge -- mungekey --create --keyfile="$dir/munge/munge.key" --force
  runuser -u munge -- munged --socket="$dir/munge/munge.socket.2" --key-file="$dir/munge/munge.key" \
    --log-file="$dir/munge/munged.log" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/munged.seed" || { echo "local Slurm: munged did not start" >&2; return 1; }

  local cpus memory
  cpus=$(nproc)
  memory=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  cat >"$dir/slurm.conf" <<CONF
ClusterName=shardrl-test
SlurmctldHost=localhost
SlurmctldPort=$(local_slurm_free_port)
SlurmdPort=$(local_slurm_free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also holds a requeued job back before it may start again (default 120 s)
AuthInfo=socket=$dir/munge/munge.socket.2,cred_expire=5
# and the scheduler looks at pending jobs every 2 s instead of 60 s, so it starts soon after
SchedulerParameters=sched_interval=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
MailProg=/bin/true
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld || { echo "local Slurm: slurmctld did not start (see $dir/log/slurmctld.log)" >&2; return 1; }
  slurmd -N localhost || { echo "local Slurm: slurmd did not start (see $dir/log/slurmd.log)" >&2; return 1; }
  local i
  for i in $(seq 1 60); do   # the node registers within a few seconds
    [[ $(sinfo -h -n localhost -o %t 2>/dev/null) == idle ]] && return 0
    sleep 0.5
  done
  echo "local Slurm: node localhost did not become idle (see $dir/log/)" >&2
  return 1
}

local_slurm_stop() {
  local dir=$1 pidfile pid i
  for pidfile in "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid" "$dir/munge/munged.pid"; do
    [[ -s $pidfile ]] || continue
    pid=$(<"$pidfile")
    kill "$pid" 2>/dev/null || continue
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}
