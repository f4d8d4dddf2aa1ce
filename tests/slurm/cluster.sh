#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the SLURM profile's integration test.
#
#   tests/slurm/cluster.sh start    install slurm-wlm + munge (apt, only if missing), write
#                                   /etc/slurm/slurm.conf + gres.conf, start munged, slurmctld,
#                                   slurmd and wait until the node is idle (idempotent)
#   tests/slurm/cluster.sh stop     undo `start`: shut down the daemons this script started and
#                                   put the machine back as it was before `start` (idempotent)
#   tests/slurm/cluster.sh status   print sinfo / scontrol diagnostics
#
# Exit status of `start`: 0 ready; 77 the environment cannot host a cluster (no apt-get, not
# root, apt cannot reach its mirror, cannot make device nodes, a slurm.conf this script did not
# write): the test skips on 77 and fails on anything else. Daemons run as root (SlurmUser=root)
# to keep the setup small.
#
# What `stop` undoes. `start` records in its state directory (/run/fedmgda-slurm-test) what it
# adds before it adds it: the packages apt installed (those that were not installed before),
# the users and groups their scripts created, the downloaded .deb files, and each file or
# directory that did not exist before (/etc/slurm, the spool and log directories, munge's key
# and directories). `stop` then removes slurm.conf and gres.conf when they carry this script's
# marker, purges the recorded packages (never one that was installed before `start`, such as a
# real cluster's; it refuses, and exits 1, where apt would take another package with them),
# deletes the recorded users, groups, files and directories, and finally the state directory
# with the fake device nodes. Left installed, Slurm's clients and a slurm.conf would make every
# later Snakemake start on this machine run `scontrol show config` against a stopped
# controller and wait about 9 s (the Slurm executor plugin's import). Only apt's package lists
# (`apt-get update`) and the package tools' own logs and record backups stay. A second `start`
# keeps the first one's record; `stop` without a record (nothing started, or stopped already)
# removes only marked configuration files.
#
# Why the default /etc/slurm/slurm.conf and not a private SLURM_CONF: the executor plugin wipes
# SLURM_* variables before it submits (so SLURM_CONF never reaches the job step), hence the
# cluster has to live at the path every Slurm binary reads by default.
set -euo pipefail

FAKE_GPUS="${SLURM_TEST_FAKE_GPUS:-2}"       # fake GPUs (GRES) on the node, 0 disables GRES
STATE_DIR=/run/fedmgda-slurm-test           # our pid files, fake devices, what `stop` undoes
CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf
LOG_DIR=/var/log/slurm
MUNGE_PID=/run/munge/fedmgda-slurm-test.pid  # munged runs as user munge: its own dir
CTLD_PID="$STATE_DIR/slurmctld.pid"
SLURMD_PID="$STATE_DIR/slurmd.pid"
NODE="$(hostname -s)"
MARKER="Written by tests/slurm/cluster.sh"
# What `start` added, one item a line, for `stop` to take away again.
INSTALLED="$STATE_DIR/installed-packages"   # packages that were not installed before
CREATED="$STATE_DIR/created-paths"          # entries of OWN_PATHS that did not exist before
ACCOUNTS="$STATE_DIR/created-accounts"      # "user NAME" / "group NAME" the packages added
DEBS="$STATE_DIR/downloaded-debs"           # .deb files apt left in its cache
ARCHIVES=/var/cache/apt/archives
# Every path outside $STATE_DIR that this script or the packages' scripts may create, parents
# before children (`stop` removes them in the reverse order).
OWN_PATHS=(/etc/slurm /var/log/slurm /var/spool/slurmctld /var/spool/slurmd
    /etc/munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge)

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

# Installed packages, one `name[:arch]` a line, sorted (for comm). A package whose files are
# gone (not installed, or only its configuration files left: status ?n or ?c) does not count.
installed_set() {
    dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' 2>/dev/null \
        | awk '$1 !~ /^.[nc]/ {print $2}' | LC_ALL=C sort -u
}

# The users and groups the packages' scripts create, where they exist.
accounts_set() {
    local name
    for name in munge slurm; do
        if getent passwd "$name" >/dev/null; then echo "user $name"; fi
        if getent group "$name" >/dev/null; then echo "group $name"; fi
    done | LC_ALL=C sort
}

# Note the paths of OWN_PATHS that do not exist yet, before anything creates them. A second
# `start` finds them (made by the first) and keeps the first one's record as it is.
record_absent_paths() {
    local path
    for path in "${OWN_PATHS[@]}"; do
        [[ -e $path || -L $path ]] && continue
        grep -qxF -- "$path" "$CREATED" 2>/dev/null || echo "$path" >>"$CREATED"
    done
}

# Append to the record file $1 the lines of $3 that are not in $2 (both sorted).
record_new() {
    LC_ALL=C comm -13 "$2" "$3" >>"$1"
}

install_packages() {
    local missing=() rc=0
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
    # What is there before, so that `stop` purges only what this install adds (also when it
    # fails half-way), and never a package, user or cached .deb that was there already.
    installed_set >"$STATE_DIR/packages.before"
    accounts_set >"$STATE_DIR/accounts.before"
    find "$ARCHIVES" -maxdepth 1 -name '*.deb' -printf '%f\n' 2>/dev/null \
        | LC_ALL=C sort >"$STATE_DIR/debs.before"
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >>"$STATE_DIR/apt.log" 2>&1 \
        || rc=$?
    record_new "$INSTALLED" "$STATE_DIR/packages.before" <(installed_set)
    record_new "$ACCOUNTS" "$STATE_DIR/accounts.before" <(accounts_set)
    record_new "$DEBS" "$STATE_DIR/debs.before" \
        <(find "$ARCHIVES" -maxdepth 1 -name '*.deb' -printf '%f\n' 2>/dev/null | LC_ALL=C sort)
    rm -f "$STATE_DIR/packages.before" "$STATE_DIR/accounts.before" "$STATE_DIR/debs.before"
    log "installed $(wc -l <"$INSTALLED") packages: $(tr '\n' ' ' <"$INSTALLED")"
    if ((rc != 0)); then
        tail -n 20 "$STATE_DIR/apt.log" >&2
        env_skip "apt-get install slurm-wlm munge failed"
    fi
}

# Refuse before anything is installed or written: a slurm.conf or gres.conf that this script
# did not write belongs to a real Slurm setup, which it must neither replace nor take apart.
refuse_foreign_config() {
    local f
    for f in "$CONF" "$GRES_CONF"; do
        if [[ -f $f ]] && ! ours "$f"; then
            env_skip "$f exists and was not written by this script:" \
                "refusing to replace a real Slurm setup"
        fi
    done
}

# A configuration file this script wrote: its marker on the first line, or (gres.conf of
# versions before the marker) a device in our state directory.
ours() {
    [[ -f $1 ]] && { head -n1 "$1" | grep -q "$MARKER" || grep -q "File=$STATE_DIR/dev/" "$1"; }
}

write_config() {
    local cpus mem_mb gres_node=""
    # At least 4 CPUs and 16 GB, whatever the machine has: SlurmdParameters=config_overrides
    # makes Slurm trust these numbers (nothing enforces them without cgroups), so a small CI
    # runner still accepts a test job that asks for a few GB or threads.
    cpus="$(nproc)"
    ((cpus < 4)) && cpus=4
    mem_mb="$(awk '/^MemTotal:/ {m = $2 / 1024 * 0.9; if (m < 16000) m = 16000; printf "%d", m}' \
        /proc/meminfo)"
    # Never clobber a real cluster's configuration: only replace a file this script wrote.
    refuse_foreign_config
    mkdir -p /etc/slurm "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
    if ((FAKE_GPUS > 0)); then
        # Slurm rejects plain files as GPU devices; character devices with the NVIDIA major
        # number (195) are enough for it to count and hand them out. No driver is involved.
        mkdir -p "$STATE_DIR/dev"
        printf '%s\n' "# $MARKER: the test cluster's fake GPUs." "AutoDetect=off" >"$GRES_CONF.new"
        for ((i = 0; i < FAKE_GPUS; i++)); do
            if [[ ! -c $STATE_DIR/dev/gpu$i ]] && ! mknod "$STATE_DIR/dev/gpu$i" c 195 "$i"; then
                log "WARNING: mknod not permitted here: no fake GPUs," \
                    "the GPU request path goes untested"
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
# MinJobAge seconds (the plugin wants >= 3 x its first status-check delay). An hour, not the
# default 5 minutes: the tests read each job with scontrol show job after the whole run,
# which on a loaded 2-core machine takes longer than 5 minutes.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
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

stop_daemons() {
    if alive "$CTLD_PID"; then
        log "stopping slurmctld + slurmd"
        scontrol shutdown >/dev/null 2>&1 || true
    fi
    local pidf pid
    for pidf in "$SLURMD_PID" "$CTLD_PID" "$MUNGE_PID"; do
        # a daemon that `scontrol shutdown` stops removes its pid file at any moment
        pid="$(cat "$pidf" 2>/dev/null || true)"
        if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                kill "$pid" 2>/dev/null || true
                sleep 0.2
            done
            kill -0 "$pid" 2>/dev/null && { kill -9 "$pid" 2>/dev/null || true; }
        fi
        rm -f "$pidf"
    done
}

# Purge the packages `start` installed that are still there. apt-get purge would also remove
# whatever depends on them; where that includes a package that was there before (installed
# since, say), purge nothing and fail: the machine's own packages come first.
purge_packages() {
    [[ -s $INSTALLED ]] || return 0
    local pkgs=() pkg extra
    while read -r pkg; do
        [[ -n $pkg ]] && dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null \
            | grep -q '^.[^n]' && pkgs+=("$pkg")
    done < <(LC_ALL=C sort -u "$INSTALLED")
    ((${#pkgs[@]} == 0)) && return 0
    export DEBIAN_FRONTEND=noninteractive
    extra="$(apt-get -s purge "${pkgs[@]}" 2>/dev/null \
        | awk '$1 == "Purg" || $1 == "Remv" {print $2}' | sed 's/:.*//' \
        | grep -vxF -f <(sed -e 's/:.*//' -e '/^$/d' "$INSTALLED") || true)"
    if [[ -n $extra ]]; then
        log "NOT purging ${pkgs[*]}: apt would also remove ${extra//$'\n'/ }," \
            "which start did not install"
        return 1
    fi
    log "purging the ${#pkgs[@]} packages start installed: ${pkgs[*]}"
    if ! apt-get purge -y -qq "${pkgs[@]}" >"$STATE_DIR/apt-purge.log" 2>&1; then
        tail -n 20 "$STATE_DIR/apt-purge.log" >&2
        log "apt-get purge failed"
        return 1
    fi
}

remove_accounts() {
    [[ -s $ACCOUNTS ]] || return 0
    local kind name
    # users first: userdel may take the user's group along
    while read -r kind name; do
        [[ $kind == user ]] && getent passwd "$name" >/dev/null \
            && { userdel "$name" || log "WARNING: userdel $name failed"; }
    done <"$ACCOUNTS"
    while read -r kind name; do
        [[ $kind == group ]] && getent group "$name" >/dev/null \
            && { groupdel "$name" || log "WARNING: groupdel $name failed"; }
    done <"$ACCOUNTS"
    return 0
}

remove_created_paths() {
    [[ -s $CREATED ]] || return 0
    local i path
    for ((i = ${#OWN_PATHS[@]} - 1; i >= 0; i--)); do
        path="${OWN_PATHS[i]}"
        grep -qxF -- "$path" "$CREATED" && rm -rf -- "$path"
    done
    return 0
}

remove_downloaded_debs() {
    [[ -s $DEBS ]] || return 0
    local deb
    while read -r deb; do
        [[ $deb == *.deb && $deb != */* ]] && rm -f -- "$ARCHIVES/$deb"
    done <"$DEBS"
    return 0
}

stop() {
    if [[ $(id -u) != 0 ]]; then
        # Where `start` could not run (not root), nothing is there to undo.
        [[ -e $STATE_DIR ]] || ours "$CONF" || ours "$GRES_CONF" || return 0
        log "must run as root to stop the test cluster"
        exit 1
    fi
    local f had_state=0
    [[ -d $STATE_DIR ]] && had_state=1
    stop_daemons
    for f in "$CONF" "$GRES_CONF"; do
        if ours "$f"; then rm -f "$f" "$f.new"; log "removed $f"; fi
    done
    if ! purge_packages; then
        # The record stays, and with it what the packages still installed need (munge's key,
        # the spool directories): a later `stop` can finish the job once the cause is gone.
        log "stopped; packages left installed, record kept in $STATE_DIR"
        exit 1
    fi
    remove_accounts
    remove_created_paths
    remove_downloaded_debs
    rm -rf "$STATE_DIR"
    if ((had_state)); then log "stopped; the machine is as it was before start"; else
        log "nothing started: nothing to undo"
    fi
}

start() {
    [[ $(id -u) == 0 ]] || env_skip "must run as root to install and start Slurm daemons"
    refuse_foreign_config
    mkdir -p "$STATE_DIR"
    record_absent_paths
    install_packages
    local changed=0
    write_config && changed=1
    if ((changed == 0)) && alive "$CTLD_PID" && alive "$SLURMD_PID" \
        && [[ $(sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null) == idle ]]; then
        log "already running and idle"
        return 0
    fi
    alive "$CTLD_PID" || alive "$SLURMD_PID" && stop_daemons
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
