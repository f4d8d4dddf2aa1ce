"""`tests/slurm/cluster.sh stop` puts the machine back as `start` found it.

One whole cycle: `start` twice (the second finds the cluster up and changes nothing), `stop`
twice (the second has nothing left to do). After the first `stop`: no slurm.conf or gres.conf of
the script's, `command -v scontrol` (and the other Slurm and munge commands) as before `start`,
none of the packages `start` installed and all that were there before, the same users, groups,
Slurm and munge directories, no state directory. Skips where cluster.sh says the machine cannot
host the cluster (exit 77: no apt-get, not root, no mirror, a real Slurm setup).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from cluster_state import (
    STATE_DIR,
    finish_earlier_cleanup,
    installed_by_start,
    machine_state,
    marked_configs,
    restoration_problems,
    run_cluster,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ENVIRONMENT_SKIP = 77


def start_or_skip() -> str:
    start = run_cluster("start", timeout=900)
    if start.returncode == ENVIRONMENT_SKIP:
        pytest.skip(f"cannot host a Slurm test cluster here: {start.stderr.strip()}")
    assert start.returncode == 0, f"cluster.sh start failed:\n{start.stdout}\n{start.stderr}"
    return start.stderr


def test_stop_leaves_the_machine_as_start_found_it():
    if sys.platform != "linux":
        pytest.skip("the Slurm test cluster needs Linux")
    error = finish_earlier_cleanup()
    if error:
        pytest.fail(error, pytrace=False)
    before = machine_state()
    try:
        start_log = start_or_skip()
        installed = installed_by_start(start_log)
        # the cluster is up, and what start reports having installed was not there before
        assert shutil.which("scontrol"), start_log
        assert marked_configs(), f"start wrote no marked slurm.conf:\n{start_log}"
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
        assert "UP" in ping.stdout, ping.stdout + ping.stderr
        if before["commands"]["scontrol"] is None:
            assert "slurm-client" in installed, start_log
        if before["packages"] is not None:
            assert not set(installed) & before["packages"], (installed, start_log)
        record = (STATE_DIR / "installed-packages").read_text()

        again = run_cluster("start", timeout=900)
        assert again.returncode == 0, again.stderr
        assert "already running and idle" in again.stderr, again.stderr
        assert (STATE_DIR / "installed-packages").read_text() == record

        stop = run_cluster("stop", timeout=600)
        assert stop.returncode == 0, f"cluster.sh stop failed:\n{stop.stderr}"
        after = machine_state()
        problems = restoration_problems(before, after, installed)
        assert not problems, "cluster.sh stop left the machine changed:\n" + "\n".join(problems)
        assert not STATE_DIR.exists()

        stop_again = run_cluster("stop", timeout=600)
        assert stop_again.returncode == 0, stop_again.stderr
        assert not restoration_problems(after, machine_state(), installed)
        assert "nothing to undo" in stop_again.stderr, stop_again.stderr
    finally:
        if STATE_DIR.exists():
            run_cluster("stop", timeout=600)
