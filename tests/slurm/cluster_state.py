"""What tests/slurm/cluster.sh may change on the machine, read before `start` and after `stop`.

`stop` has to leave the machine as `start` found it: no slurm.conf or gres.conf of the script's,
the same Slurm and munge commands on PATH (a leftover `scontrol` makes every later Snakemake
start wait for a stopped controller), none of the packages `start` installed and every package
that was there before, the same munge/slurm users and groups, the same Slurm and munge
directories, and no state directory.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

CLUSTER_SCRIPT = Path(__file__).resolve().parent / "cluster.sh"
STATE_DIR = Path("/run/fedmgda-slurm-test")
MARKER = "Written by tests/slurm/cluster.sh"
CONFIGS = (Path("/etc/slurm/slurm.conf"), Path("/etc/slurm/gres.conf"))
COMMANDS = ("scontrol", "sbatch", "squeue", "sinfo", "slurmctld", "slurmd", "munged", "munge")
ACCOUNTS = ("munge", "slurm")
# Where the script and the packages' maintainer scripts write, beside the configuration files.
PATHS = tuple(
    Path(p)
    for p in (
        "/etc/slurm",
        "/etc/munge",
        "/etc/munge/munge.key",
        "/etc/default/munge",
        "/etc/default/slurmctld",
        "/etc/default/slurmd",
        "/etc/init.d/munge",
        "/etc/init.d/slurmctld",
        "/etc/init.d/slurmd",
        "/var/log/slurm",
        "/var/log/munge",
        "/var/lib/munge",
        "/var/lib/slurm",
        "/var/spool/slurmctld",
        "/var/spool/slurmd",
        "/run/munge",
        str(STATE_DIR),
    )
)
INSTALLED_LINE = re.compile(r"\[slurm-cluster\] installed \d+ packages: (.*)")


def run_cluster(action: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), action], capture_output=True, text=True, timeout=timeout
    )


def finish_earlier_cleanup() -> str | None:
    """Run `stop` where a state directory is left from an earlier `start` (a cluster started by
    hand, or a run that was killed), so that the state read next is the one before a `start`.
    Returns the error of a `stop` that failed."""
    if not STATE_DIR.exists():
        return None
    stop = run_cluster("stop", timeout=600)
    if stop.returncode != 0:
        return f"cluster.sh stop (for a state left in {STATE_DIR}) failed:\n{stop.stderr}"
    return None


def installed_packages() -> set[str] | None:
    """Packages dpkg has installed (files on disk), as `name` or `name:arch`; None without dpkg."""
    if shutil.which("dpkg-query") is None:
        return None
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${binary:Package}\\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        fields[1]
        for fields in (line.split() for line in out.splitlines())
        if len(fields) == 2 and fields[0][1] not in "nc"
    }


def account_exists(kind: str, name: str) -> bool:
    try:
        (pwd.getpwnam if kind == "user" else grp.getgrnam)(name)
    except KeyError:
        return False
    return True


def marked_configs() -> list[str]:
    """The Slurm configuration files that carry the script's marker."""
    return [
        str(path)
        for path in CONFIGS
        if path.is_file() and MARKER in path.read_text(errors="replace")
    ]


def machine_state() -> dict:
    return {
        "commands": {name: shutil.which(name) for name in COMMANDS},
        "packages": installed_packages(),
        "accounts": {
            f"{kind} {name}": account_exists(kind, name)
            for name in ACCOUNTS
            for kind in ("user", "group")
        },
        "paths": {str(path): os.path.lexists(path) for path in PATHS},
        "marked_configs": marked_configs(),
    }


def installed_by_start(start_log: str) -> list[str]:
    """The packages `cluster.sh start` reports it installed (none where nothing was missing)."""
    found = INSTALLED_LINE.findall(start_log)
    return found[-1].split() if found else []


def bare(package: str) -> str:
    return package.split(":", 1)[0]


def restoration_problems(before: dict, after: dict, installed: list[str]) -> list[str]:
    """What `stop` left different from the state before `start` (empty: nothing).

    Packages are compared by what `start` installed, so that a package another program
    installs meanwhile does not count against the script."""
    problems = []
    if after["marked_configs"]:
        problems.append(f"configuration written by cluster.sh left: {after['marked_configs']}")
    for key in ("commands", "accounts", "paths"):
        for name, was in before[key].items():
            if after[key][name] != was:
                problems.append(f"{key}: {name} was {was!r} before start, {after[key][name]!r} now")
    if before["packages"] is not None:
        now = {bare(p) for p in after["packages"]}
        left = sorted(p for p in installed if bare(p) in now)
        if left:
            problems.append(f"packages start installed are still installed: {left}")
        gone = sorted(before["packages"] - after["packages"])
        if gone:
            problems.append(f"packages that were there before start are gone: {gone}")
    return problems
