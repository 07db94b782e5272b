#!/usr/bin/env bash
# A single-node Slurm (munge, slurmctld, slurmd from Debian's packages),
# configured and started here, runs a 4-task Chorus job with `srun -n 4`:
# rank and size come from SLURM_PROCID/SLURM_NTASKS and the coordinator is
# derived from the node list and job id. The daemons are stopped afterwards,
# even on failure. usage: srun_test.sh CHORUSRUN_UNUSED COLLECTIVE_CHECK
set -uo pipefail
check="$2"
for tool in slurmctld slurmd srun munged; do
  command -v "$tool" >/dev/null || { echo "srun_test: $tool missing (scripts/install-deps.sh installs it)"; exit 1; }
done
work=$(mktemp -d /tmp/chorus-slurm.XXXXXX)
host=$(hostname -s)
cleanup() {
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munged.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  done
  sleep 1
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munged.pid"; do
    [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

# munge: its own key and socket in $work, run as root (--force).
mkdir -p "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/socket" \
  --pid-file="$work/munged.pid" --log-file="$work/munge/log" --seed-file="$work/munge/seed" || {
  echo "srun_test: munged failed to start"; cat "$work/munge/log"; exit 1; }

# Ports below the kernel's ephemeral range (32768 and up by default), where
# the connections of tests running alongside cannot be holding them, and not
# listened on now. A port taken anyway makes slurmctld exit after it has
# daemonized; that is caught below, by name, rather than by srun's timeout.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$(( $1 + RANDOM % 2000 ))
    ss -Hltn "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
  done
  echo "$p"
}
ctld_port=$(free_port 20000)
slurmd_port=$(free_port 23000)

cat > "$work/slurm.conf" <<CONF
ClusterName=chorus
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
mkdir -p "$work/state" "$work/spool"
export SLURM_CONF="$work/slurm.conf"
slurmctld -f "$SLURM_CONF" || { echo "slurmctld failed"; cat "$work/slurmctld.log"; exit 1; }
slurmd -f "$SLURM_CONF" || { echo "slurmd failed"; cat "$work/slurmd.log"; exit 1; }
for i in $(seq 1 60); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)' && break
  sleep 0.5
done
sinfo 2>&1 | sed 's/^/sinfo: /'
if ! sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)'; then
  echo "srun_test: the Slurm node did not become idle within 30 s; slurmctld log:"
  tail -20 "$work/slurmctld.log"
  echo "slurmd log:"
  tail -20 "$work/slurmd.log"
  exit 1
fi
# -O: 4 tasks on 2 CPUs need overcommit. Only Slurm's variables reach Chorus.
timeout 600 srun -n 4 -O --kill-on-bad-exit=1 \
  env -u CHORUS_RANK -u CHORUS_WORLD_SIZE -u CHORUS_COORDINATOR \
  "$check" --every 6 --offset 2
rc=$?
echo "srun_test: srun exited $rc"
[ $rc -eq 0 ] || { tail -20 "$work/slurmd.log"; }
exit $rc
