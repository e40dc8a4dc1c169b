# A private Slurm on this machine for tests: munged, slurmctld and one slurmd (node "localhost"),
# or N slurmd (nodes n1..nN) that share the machine, everything (keys, state, logs, sockets, pid
# files) under one directory and on free ports, so it neither needs nor touches a system Slurm.
# Sourced; needs root (munged runs as user munge).
#   local_slurm_start DIR [N] -> exports SLURM_CONF; returns 77 with the reason on stderr when
#                                this machine cannot run one (not root, packages missing)
#   local_slurm_stop DIR      -> stops the daemons by the PIDs in their pid files
#   local_slurm_job_field JOBID FIELD -> FIELD's value in `scontrol show job` (JobState, ExitCode...)
#   local_slurm_wait_gone JOBID SECONDS -> waits until the job has left the queue; if it has not
#                                within SECONDS, calls the sourcing script's `fail MESSAGE` (or,
#                                where there is none, prints MESSAGE and returns 1)
#   local_slurm_test_cleanup WORK -> a test's EXIT trap: stops the Slurm, deletes or keeps WORK
# Several nodes on one machine, with a Slurm not built with --enable-multiple-slurmd (Debian's):
# each node has its own NodeHostname (Slurm refuses two nodes of one host name), port, spool,
# TmpFS (where the PMIx plugin makes its per-step directories, named by job and step only), pid
# and log file, all by %n; they all listen on 127.0.0.1, and each gets an equal share of the cores
# (at least one) and of the memory. Every node reports the machine's host name to its tasks;
# SLURMD_NODENAME tells them apart (mpi/layout.cpp uses it).

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
  local dir=$1 count=${2:-} reason
  reason=$(local_slurm_skip_reason)
  if [[ -n $reason ]]; then echo "local Slurm: $reason" >&2; return 77; fi
  local -a nodes
  if [[ -z $count ]]; then nodes=(localhost)
  elif [[ $count =~ ^[1-9][0-9]*$ ]]; then mapfile -t nodes < <(seq -f 'n%g' 1 "$count")
  else echo "local Slurm: node count must be a positive number, not '$count'" >&2; return 1; fi
  mkdir -p "$dir"/{munge,state,spool,log,run,tmp}
  chown munge:munge "$dir/munge"
  chmod 0755 "$dir" "$dir/munge"   # munged refuses a socket directory that others cannot enter
  runuser -u munge -- test -x "$dir/munge" ||
    { echo "local Slurm: user munge cannot enter $dir/munge (a parent directory is private)" >&2; return 1; }
  runuser -u munge -- mungekey --create --keyfile="$dir/munge/munge.key" --force
  runuser -u munge -- munged --socket="$dir/munge/munge.socket.2" --key-file="$dir/munge/munge.key" \
    --log-file="$dir/munge/munged.log" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/munged.seed" || { echo "local Slurm: munged did not start" >&2; return 1; }

  local cpus memory node
  cpus=$(($(nproc) / ${#nodes[@]}))
  ((cpus >= 1)) || cpus=1
  memory=$(($(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') / ${#nodes[@]}))
  cat >"$dir/slurm.conf" <<CONF
ClusterName=shardrl-test
SlurmctldHost=localhost
SlurmctldPort=$(local_slurm_free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also holds a requeued job back before it may start again (default 120 s)
AuthInfo=socket=$dir/munge/munge.socket.2,cred_expire=5
# and the scheduler looks at pending jobs every 2 s instead of 60 s, so it starts soon after
SchedulerParameters=sched_interval=2
# Job ids from a random start: Open MPI names its shared-memory files after the PMIx namespace,
# which is the job and step id, so two private Slurms on one machine must not both run job 1.
FirstJobId=$((RANDOM * 100 + 100))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
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
CONF
  for node in "${nodes[@]}"; do
    mkdir -p "$dir/spool/$node" "$dir/tmp/$node"
    echo "NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 Port=$(local_slurm_free_port)" \
      "CPUs=$cpus RealMemory=$memory State=UNKNOWN" >>"$dir/slurm.conf"
  done
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP" >>"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
  slurmctld || { echo "local Slurm: slurmctld did not start (see $dir/log/slurmctld.log)" >&2; return 1; }
  for node in "${nodes[@]}"; do
    slurmd -N "$node" || { echo "local Slurm: slurmd $node did not start (see $dir/log/slurmd-$node.log)" >&2; return 1; }
  done
  local i
  for i in $(seq 1 60); do   # the nodes register within a few seconds
    [[ $(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l) -eq ${#nodes[@]} ]] && return 0
    sleep 0.5
  done
  echo "local Slurm: not all of ${nodes[*]} became idle: $(sinfo -h -N -o '%N %t' | tr '\n' ' ')(see $dir/log/)" >&2
  return 1
}

local_slurm_stop() {
  local dir=$1 pidfile pid i
  for pidfile in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid" "$dir/munge/munged.pid"; do
    [[ -s $pidfile ]] || continue
    pid=$(<"$pidfile")
    kill "$pid" 2>/dev/null || continue
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

local_slurm_job_field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

local_slurm_wait_gone() {
  local i message
  for ((i = 0; i < $2 * 5; ++i)); do
    squeue -h -j "$1" 2>/dev/null | grep -q . || return 0
    sleep 0.2
  done
  message="job $1 still in the queue after $2 s: $(squeue -h -j "$1")"
  if declare -F fail >/dev/null; then fail "$message"; fi
  echo "local Slurm: $message" >&2
  return 1
}

# A test's EXIT trap (trap 'local_slurm_test_cleanup "$work"' EXIT): stops the Slurm under
# WORK/slurm, then deletes WORK after a pass or a skip (exit 0 or 77) and keeps it, named, after a
# failure or with SHARDRL_KEEP_TEST_DIR set.
local_slurm_test_cleanup() {
  local rc=$? work=$1
  local_slurm_stop "$work/slurm"
  if [[ ($rc -eq 0 || $rc -eq 77) && -z ${SHARDRL_KEEP_TEST_DIR:-} ]]; then rm -rf "$work"
  else echo "kept for inspection: $work" >&2; fi
}
