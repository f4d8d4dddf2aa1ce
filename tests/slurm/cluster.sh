#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the SLURM profile's integration test.
#
#   tests/slurm/cluster.sh start    install slurm-wlm + munge (apt, only if missing), write
#                                   /etc/slurm/slurm.conf + gres.conf, start munged, slurmctld,
#                                   slurmd and wait until the node is idle (idempotent)
#   tests/slurm/cluster.sh stop     shut the daemons down (only the ones this script started)
#   tests/slurm/cluster.sh status   print sinfo / scontrol diagnostics
#
# Exit status of `start`: 0 ready; 77 the environment cannot host a cluster (no apt-get, not
# root, apt cannot reach its mirror, cannot make device nodes): the test skips on 77 and fails
# on anything else. Daemons run as root (SlurmUser=root) to keep the setup small.
#
# Why the default /etc/slurm/slurm.conf and not a private SLURM_CONF: the executor plugin wipes
# SLURM_* variables before it submits (so SLURM_CONF never reaches the job step), hence the
# cluster has to live at the path every Slurm binary reads by default.
set -euo pipefail

FAKE_GPUS="${SLURM_TEST_FAKE_GPUS:-2}"       # fake GPUs (GRES) on the node, 0 disables GRES
STATE_DIR=/run/fedmgda-slurm-test           # our pid files, fake devices, marker file
CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf
LOG_DIR=/var/log/slurm
MUNGE_PID=/run/munge/fedmgda-slurm-test.pid  # munged runs as user munge: its own dir
CTLD_PID="$STATE_DIR/slurmctld.pid"
SLURMD_PID="$STATE_DIR/slurmd.pid"
NODE="$(hostname -s)"
MARKER="Written by tests/slurm/cluster.sh"

log() { echo "[slurm-cluster] $*" >&2; }
env_skip() { log "ENVIRONMENT: $*"; exit 77; }

diagnostics() {
    log "---- diagnostics ----"
    { sinfo -N -l || true; scontrol show node "$NODE" || true; squeue -a || true; } >&2 2>&1
    for f in "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" /var/log/munge/munged.log; do
        [[ -f $f ]] && { log "---- tail $f"; tail -n 40 "$f" >&2; }
    done
    log "---- end diagnostics ----"
}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null || missing+=(munge)
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null || env_skip "apt-get unavailable, cannot install ${missing[*]}"
    [[ $(id -u) == 0 ]] || env_skip "not root, cannot apt-get install ${missing[*]}"
    log "installing slurm-wlm munge (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d keeps the packages' own service start-up out of the way (no systemd here).
    if ! apt-get update -qq >"$STATE_DIR/apt.log" 2>&1; then
        tail -n 20 "$STATE_DIR/apt.log" >&2
        env_skip "apt-get update failed (package mirror unreachable?)"
    fi
    if ! apt-get install -y -qq --no-install-recommends slurm-wlm munge >>"$STATE_DIR/apt.log" 2>&1; then
        tail -n 20 "$STATE_DIR/apt.log" >&2
        env_skip "apt-get install slurm-wlm munge failed"
    fi
}

write_config() {
    local cpus mem_mb gres_node=""
    # At least 4 CPUs and 16 GB, whatever the machine has: SlurmdParameters=config_overrides
    # makes Slurm trust these numbers (nothing enforces them without cgroups), so a small CI
    # runner still accepts a test job that asks for a few GB or threads.
    cpus="$(nproc)"
    ((cpus < 4)) && cpus=4
    mem_mb="$(awk '/^MemTotal:/ {m = $2 / 1024 * 0.9; if (m < 16000) m = 16000; printf "%d", m}' /proc/meminfo)"
    # Never clobber a real cluster's configuration: only replace a file this script wrote.
    if [[ -f $CONF ]] && ! head -n1 "$CONF" | grep -q "$MARKER"; then
        env_skip "$CONF exists and was not written by this script: refusing to replace a real Slurm setup"
    fi
    mkdir -p /etc/slurm "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
    if ((FAKE_GPUS > 0)); then
        # Slurm rejects plain files as GPU devices; character devices with the NVIDIA major
        # number (195) are enough for it to count and hand them out. No driver is involved.
        mkdir -p "$STATE_DIR/dev"
        echo "AutoDetect=off" >"$GRES_CONF.new"
        for ((i = 0; i < FAKE_GPUS; i++)); do
            if [[ ! -c $STATE_DIR/dev/gpu$i ]] && ! mknod "$STATE_DIR/dev/gpu$i" c 195 "$i"; then
                log "WARNING: mknod not permitted here: no fake GPUs, the GPU request path goes untested"
                FAKE_GPUS=0
                break
            fi
            echo "NodeName=$NODE Name=gpu File=$STATE_DIR/dev/gpu$i" >>"$GRES_CONF.new"
        done
    fi
    if ((FAKE_GPUS > 0)); then
        gres_node=" Gres=gpu:${FAKE_GPUS}"
        mv "$GRES_CONF.new" "$GRES_CONF"
    else
        rm -f "$GRES_CONF.new"
        rm -f "$GRES_CONF"
    fi
    cat >"$CONF.new" <<EOF
# $MARKER: a throw-away one-node test cluster. Do not use elsewhere.
ClusterName=fedmgda-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# Containers rarely give us a writable cgroup tree: track processes by /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Like most sites: a job without --mem gets 1 GB per CPU, not the whole node (which would run
# such jobs one at a time). Rules should still declare mem_mb (profiles/README.md, Traps).
DefMemPerCPU=1000
SchedulerType=sched/backfill
# No slurmdbd: the executor must poll with squeue, which only sees a finished job for
# MinJobAge seconds (the plugin wants >= 3 x its first status-check delay).
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=300
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb${gres_node} State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    if [[ -f $CONF ]] && cmp -s "$CONF" "$CONF.new"; then
        rm "$CONF.new"
        return 1 # unchanged
    fi
    mv "$CONF.new" "$CONF"
    return 0
}

start_munge() {
    if alive "$MUNGE_PID" && munge -n | unmunge >/dev/null 2>&1; then return 0; fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating munge key"
        if command -v mungekey >/dev/null; then mungekey --create --force; else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID" \
        || { log "munged failed to start"; diagnostics; exit 1; }
    for _ in $(seq 50); do munge -n | unmunge >/dev/null 2>&1 && return 0; sleep 0.1; done
    log "munged does not answer"; diagnostics; exit 1
}

wait_idle() {
    local state=""
    for _ in $(seq 60); do
        state="$(sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1 || true)"
        case "$state" in
            idle | mixed | allocated) log "node $NODE is $state"; return 0 ;;
            *drain* | *down* | *fail* | *inval*) break ;;
        esac
        sleep 1
    done
    log "node $NODE did not become idle (state: '${state:-none}')"
    diagnostics
    exit 1
}

stop() {
    if alive "$CTLD_PID"; then
        log "stopping slurmctld + slurmd"
        scontrol shutdown >/dev/null 2>&1 || true
    fi
    for pidf in "$SLURMD_PID" "$CTLD_PID" "$MUNGE_PID"; do
        if alive "$pidf"; then
            local pid; pid="$(cat "$pidf")"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; kill "$pid" 2>/dev/null || true; sleep 0.2; done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
        fi
        rm -f "$pidf"
    done
    log "stopped"
}

start() {
    [[ $(id -u) == 0 ]] || env_skip "must run as root to install and start Slurm daemons"
    mkdir -p "$STATE_DIR"
    install_packages
    local changed=0
    write_config && changed=1
    if ((changed == 0)) && alive "$CTLD_PID" && alive "$SLURMD_PID" \
        && [[ $(sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null) == idle ]]; then
        log "already running and idle"
        return 0
    fi
    alive "$CTLD_PID" || alive "$SLURMD_PID" && stop
    start_munge
    log "starting slurmctld + slurmd (node $NODE, $FAKE_GPUS fake GPUs)"
    # -c: start from a clean job state, -i: ignore state we cannot recover.
    /usr/sbin/slurmctld -c -i || { diagnostics; exit 1; }
    /usr/sbin/slurmd || { diagnostics; exit 1; }
    for _ in $(seq 30); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.5; done
    wait_idle
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status) diagnostics ;;
    *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac
