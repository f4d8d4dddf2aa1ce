"""Session-wide test order: the longest test first, the Slurm tests last.

tests/slurm/cluster.sh installs Slurm's client tools (where missing) and writes
/etc/slurm/slurm.conf for its one-node cluster. While they are there, every Snakemake start
imports the Slurm executor plugin, which runs ``scontrol show config`` at import and, once the
controller is stopped, waits for it until its 10 s timeout
(snakemake_executor_plugin_slurm.job_status_query.get_min_job_age): left installed, they made
every later ``snakemake`` call in the suite about 9 s slower. ``cluster.sh stop`` (the Slurm
tests' teardown) purges what ``start`` installed and removes what it wrote, and
tests/slurm/test_cluster_cleanup.py checks that; the Slurm tests still run last, and
``make test`` runs them in a pytest session of their own, after the others, so that no other
test starts Snakemake while the cluster is up (nor where Slurm was installed before and stays).

Under pytest-xdist (``make test``: one worker per core) a long test that starts late finishes
alone on one worker; Table 7 on the real Adult files (several minutes) therefore starts first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the maintainer tools (tools/docnumbers.py) import as top-level modules, as they run
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

LONGEST = "test_table7_real.py"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    # stable: the rest keep their order
    items.sort(key=lambda item: (item.get_closest_marker("slurm") is not None,
                                 item.path.name != LONGEST))
