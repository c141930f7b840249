#!/usr/bin/env bash
# Start a real single-node Slurm cluster on this machine (Debian's slurm-wlm
# and munge), for the smoke test of the job-array scripts. Needs root; installs
# the packages when missing. Idempotent: a running cluster is left as it is.
#
# usage: scripts/slurm/local_cluster.sh [start|stop|status]
set -euo pipefail
action="${1:-start}"
host="$(hostname -s)"
conf_dir=/etc/slurm

stop() {
    pkill -x slurmd 2>/dev/null || true
    pkill -x slurmctld 2>/dev/null || true
}

case "$action" in
stop) stop; exit 0 ;;
status) sinfo && squeue; exit 0 ;;
start) ;;
*) sed -n '2,6p' "$0"; exit 2 ;;
esac

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

# munge: a key and a running daemon.
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged
fi

if sinfo -h -o %T 2>/dev/null | grep -q idle; then
    echo "slurm already running on $host"
    exit 0
fi
stop

cpus="$(nproc)"
mem_mb="$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))"
mkdir -p "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat >"$conf_dir/slurm.conf" <<CONF
# Written by themisto's scripts/slurm/local_cluster.sh: one node, no cgroups.
ClusterName=themisto-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
# No cgroup plugins are configured; an empty cgroup.conf keeps slurmd quiet.
: >"$conf_dir/cgroup.conf" 2>/dev/null

slurmctld
slurmd
for _ in $(seq 1 30); do
    if sinfo -h -o %T 2>/dev/null | grep -Eq 'idle|mix|alloc'; then
        sinfo
        exit 0
    fi
    sleep 1
done
echo "error: slurm did not come up; see /var/log/slurm/*.log" >&2
tail -5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
