"""A user's bad day, probe by probe: each bad input below stops ``fedmgda train`` and,
where it is an option of the registry, ``snakemake -n`` on config/test.yaml, with ONE line naming
the option or file (and what to do), no traceback, and nothing written under results/.

``PROBES`` is the list a reviewer reads to see what is covered. A probe is what it changes in a
run config (``run``; None: a registry option only), or in its run folder or raw-data folder
(``prepare``), the override of config/test.yaml it is through Snakemake (``registry``, a
``--config`` value; None: no registry form), and what the one line must name (``says``).
"""

from __future__ import annotations

import contextlib
import gzip
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_run_folder import FORMS, a_checkpoint_that

from fedmgda.checkpoints import CHECKPOINT
from fedmgda.cli import main
from fedmgda.runfolder import holding

from .conftest import copy_workflow

RUN = dict(dataset="digits", algorithm="fedavg", rounds=2, participation=0.2, device="cpu")
FMNIST_IMAGES = "train-images-idx3-ubyte.gz"  # the first of F-MNIST's raw files the trainer checks


@dataclass
class Probe:
    run: dict[str, Any] | None  # keys of the run config replaced (None as a value: the key removed)
    registry: str | None  # `snakemake --config` override of config/test.yaml
    says: str  # the one line names it
    # may return a context held during the run
    prepare: Callable[[Path], Any] = field(default=lambda tmp: None)


def checkpoint(form: str) -> Callable[[Path], None]:
    """The run folder holds a checkpoint.pt that ``form`` (tests/test_run_folder.py)."""
    def prepare(tmp: Path) -> None:
        (tmp / "results/run").mkdir(parents=True)
        a_checkpoint_that(form, tmp / "results/run" / CHECKPOINT, tmp / "marker")
    return prepare


def truncated_fmnist(tmp: Path) -> None:
    """F-MNIST's training images cut short (a download stopped halfway)."""
    (tmp / "raw/fmnist").mkdir(parents=True)
    whole = gzip.compress(bytes(range(256)) * 1000)
    (tmp / "raw/fmnist" / FMNIST_IMAGES).write_bytes(whole[: len(whole) // 2])


def truncated_partition(tmp: Path) -> None:
    """The run's partition file cut short (a job killed as it wrote it, a full disk)."""
    whole = b"PK\x03\x04" + bytes(range(256)) * 4
    (tmp / "partition.npz").write_bytes(whole[: len(whole) // 2])


def another_trainer(tmp: Path):
    """Another trainer holds the run folder's lock (this process, as a trainer would)."""
    return holding([tmp / "results/run"])


def override(key: str, value: Any) -> str:
    """``key=value`` for ``snakemake --config``, the value in YAML."""
    return f"{key}={yaml.safe_dump(value, default_flow_style=True, width=1000).strip()}"


def run_option(says: str, **change) -> Probe:
    """A run config's option, and the same as the registry's ``run_overrides`` (every run)."""
    return Probe(change, override("run_overrides", change), says)


def attack(value: float) -> Probe:
    """A bias attack worth ``value``, and the same as the tiny experiment's attacks."""
    change = {"kind": "bias", "user": 0, "value": value}
    return Probe({"attack": change},
                 override("experiment_overrides", {"tiny": {"attacks": [change]}}),
                 "attack.value must be a finite number")


PROBES = {
    "unknown key": Probe({"typo_key": 1}, "typo_key=1", "typo_key"),
    "missing algorithm": Probe({"algorithm": None}, None, "missing run config key(s): algorithm"),
    "lr = -1": run_option("local_lr", local_lr=-1),
    "num_users bogus": run_option("num_users", dataset_options={"num_users": "bogus"}),
    "num_users 0": run_option("num_users", dataset_options={"num_users": 0}),
    "num_users -3": run_option("num_users", dataset_options={"num_users": -3}),
    "num_users 5000 (more than digits' samples)": run_option("num_users x "
                                                             "shards_per_user = 5000 x 2",
                                                             dataset_options={"num_users": 5000}),
    "shards_per_user 0": run_option("shards_per_user", dataset_options={"shards_per_user": 0}),
    "shards_per_user 1000 (more shards than samples)": run_option(
        "num_users x shards_per_user = 20 x 1000", dataset_options={"shards_per_user": 1000}),
    "clients_per_round 1000 (more than digits' 20 users)": run_option(
        "clients_per_round = 1000 but digits has 20 users", clients_per_round=1000),
    "partition digits does not offer": run_option("partition: digits: unknown partition 'domain'; "
                                                  "valid: ['shards', 'iid', 'dirichlet']",
                                                  partition="domain"),
    "attack value NaN": attack(math.nan),
    "attack value inf": attack(math.inf),
    "seeds [1, 1]": Probe(None, "seeds=[1, 1]", "seeds"),
    "missing data file": Probe({"dataset": "fmnist", "raw_dir": "{tmp}/raw"}, None, FMNIST_IMAGES),
    "truncated data file": Probe({"dataset": "fmnist", "raw_dir": "{tmp}/raw"}, None, FMNIST_IMAGES,
                                 truncated_fmnist),
    "partition file cut short": Probe({"partition_file": "{tmp}/partition.npz"}, None,
                                      "delete it; the workflow remakes it", truncated_partition),
    "checkpoint cut in half": Probe({}, None, FORMS["is truncated"], checkpoint("is truncated")),
    "checkpoint of random bytes": Probe({}, None, FORMS["is random bytes"],
                                        checkpoint("is random bytes")),
    "empty checkpoint": Probe({}, None, FORMS["is empty"], checkpoint("is empty")),
    "torch file that is not a checkpoint": Probe({}, None, FORMS["is another torch file"],
                                                 checkpoint("is another torch file")),
    "checkpoint: a pickle with a side effect": Probe({}, None, FORMS["runs code (torch file)"],
                                                     checkpoint("runs code (torch file)")),
    "second trainer on a locked folder": Probe({}, None, "is being written by another trainer",
                                               another_trainer),
}


def written(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def through_the_trainer(probe: Probe, tmp: Path, capsys) -> None:
    config = {**RUN,
              **{k: v.format(tmp=tmp) if isinstance(v, str) else v for k, v in probe.run.items()}}
    (tmp / "run.yaml").write_text(yaml.safe_dump({k: v for k, v in config.items()
                                                  if v is not None}))
    results = tmp / "results"
    with probe.prepare(tmp) or contextlib.nullcontext():
        before = written(results) if results.exists() else None
        status = main(["train", "--config", str(tmp / "run.yaml"), "--out", str(results / "run")])
        err = capsys.readouterr().err
        assert status != 0
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err and probe.says in lines[0], err
        # nothing written under results/
        assert (written(results) if results.exists() else None) == before
    assert not (tmp / "marker").exists()  # a crafted checkpoint ran nothing


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("wf"))


def through_snakemake(probe: Probe, workdir: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile",
                           "config/test.yaml",
                           "--config", probe.registry], cwd=workdir, capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out and "Job stats" not in out, out
    # Snakemake frames a WorkflowError with the file and line of the Snakefile that raised it
    said = [line for line in out.strip().splitlines()
            if not line.startswith(("WorkflowError in file ", "  File "))]
    assert len(said) == 1 and probe.says in said[0], out
    assert not (workdir / "results").exists()


ROUTES = [pytest.param(name, "trainer", id=f"{name} | fedmgda train")
          for name, probe in PROBES.items() if probe.run is not None] + [
    pytest.param(name, "snakemake", id=f"{name} | snakemake -n", marks=pytest.mark.slow)
    for name, probe in PROBES.items() if probe.registry]


@pytest.mark.parametrize("name, route", ROUTES)
def test_a_bad_input_stops_with_one_line_and_writes_nothing(name, route, tmp_path, capsys, request):
    probe = PROBES[name]
    if route == "trainer":
        through_the_trainer(probe, tmp_path, capsys)
    else:
        through_snakemake(probe, request.getfixturevalue("workdir"))
