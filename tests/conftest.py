"""Session-wide test order: the Slurm tests run last.

tests/slurm/cluster.sh installs Slurm's client tools and stops its one-node cluster afterwards.
From then on, every Snakemake start imports the Slurm executor plugin, which runs
``scontrol show config`` at import and waits for the stopped controller until its 10 s timeout
(snakemake_executor_plugin_slurm.job_status_query.get_min_job_age): on a fresh CI machine,
running the Slurm tests first made every later ``snakemake`` call in the suite about 9 s slower.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slurm") is not None)  # stable: the rest keep their order
