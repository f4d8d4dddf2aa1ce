"""The recipes for a new partitioner and a new dataset (docs/datasets.md §6, the docstrings of
fedmgda.partitioners and fedmgda.data.registry), followed step by step: a toy partitioner (the pool
dealt to the users in turn) and a toy dataset (one CSV file in a temporary raw folder).

The partitioner alone is added in this process and taken out again; both are then added to a
copy of src/ by the edits the recipes name, where a script builds their partitions, validates run
and registry configs (refusing bad partitions before anything is built) and trains two rounds."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from fedmgda import partitioners
from fedmgda.data import DataError
from fedmgda.data.partition import RawData, build_partition

REPO = Path(__file__).resolve().parents[2]

# partitioner recipe, step 1: a subclass of Partitioner in src/fedmgda/partitioners.py
TOY_PARTITIONER = '''

class RoundRobin(Partitioner):
    """The pool dealt to the users in turn, in a seeded random order or in the pool's order."""

    name = "round_robin"
    seeded = True
    reads = ("num_users", "order")

    def check(self, options):
        order = options.get("order", "seeded")
        if order in ("seeded", "pool"):
            return None
        return f"order must be 'seeded' or 'pool', not {order!r}"

    def size_error(self, dataset, samples, options):
        users = options["num_users"]
        if samples // users < MIN_USER_SAMPLES:
            return (f"{dataset}: num_users = {users} leaves a user fewer than "
                    f"{MIN_USER_SAMPLES} of its {samples} samples")
        return None

    def build(self, raw, seed, options):
        n, users = len(raw.labels), int(options["num_users"])
        seeded = options.get("order", "seeded") == "seeded"
        order = np.random.RandomState(seed).permutation(n) if seeded else np.arange(n)
        return split_users([order[u::users] for u in range(users)])


'''


def toy_partitioner() -> partitioners.Partitioner:
    namespace = dict(vars(partitioners))
    exec(TOY_PARTITIONER, namespace)
    return namespace["RoundRobin"]()


def test_a_partitioner_added_as_the_recipe_says_is_built_by_the_dispatch(monkeypatch):
    raw = RawData(name="pool", x=torch.zeros(50, 2), y=torch.arange(50) % 5)
    with monkeypatch.context() as patch:
        # its instance in PARTITIONERS
        patch.setitem(partitioners.PARTITIONERS, "round_robin", toy_partitioner())
        part = build_partition(raw, "round_robin", 3,
                               {"num_users": 4, "order": "seeded", "sort": "stable"})
        assert (part.scheme == "round_robin" and part.num_users == 4
                and part.options["sort"] == "stable")
        assert sorted(np.concatenate([part.user_indices(u)
                                      for u in range(4)]).tolist()) == list(range(50))
        assert [len(t) for t in part.train] == [10, 10, 9, 9]  # 13, 13, 12, 12 samples cut 80/10/10
        same, other = (build_partition(raw, "round_robin", s, {"num_users": 4}) for s in (3, 4))
        assert same.content_hash() == part.content_hash() != other.content_hash()
        pool = build_partition(raw, "round_robin", 3, {"num_users": 4, "order": "pool"})
        assert pool.user_indices(1).tolist() == [1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49]
        with pytest.raises(DataError, match="pool: order must be 'seeded' or 'pool', not 'sorted'"):
            build_partition(raw, "round_robin", 3, {"num_users": 4, "order": "sorted"})
    assert "round_robin" not in partitioners.PARTITIONERS  # the registry as it was
    with pytest.raises(DataError, match="unknown partition scheme 'round_robin'"):
        build_partition(raw, "round_robin", 3, {"num_users": 4})


# dataset recipe, step 1: src/fedmgda/data/toy.py
TOY_MODULE = '''"""A toy dataset: one CSV file, a row per sample, its label first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.data.download import RawFile
from fedmgda.data.partition import RawData

RAW_FILES = (RawFile("toy", "toy.csv", "https://example.org/toy.csv", "sha256:{digest}"),)


def load(raw_dir: Path, options: dict[str, Any]) -> RawData:
    table = np.loadtxt(RAW_FILES[0].path(raw_dir), delimiter=",", ndmin=2)
    x = torch.from_numpy(table[:, 1:].astype(np.float32))
    y = torch.from_numpy(table[:, 0].astype(np.int64))
    return RawData(name="toy", x=x, y=y, global_test={{"all": (x, y)}})
'''
TOY_DATASET = '''    Dataset("toy", "logreg", "round_robin", ("round_robin", "iid"),
            description="a toy CSV dealt round robin", options={"num_users": 4, "order": "seeded"},
            option_values={"order": ("seeded", "pool")}, samples=60),
'''
TOY_SPEC = '''    DatasetSpec("toy", num_classes=2, input_shape=(3,), raw_files=toy.RAW_FILES,
                load=toy.load, global_tests=("all",)),
'''


def edit(path: Path, anchor: str, new: str, before: bool = False) -> None:
    """Insert ``new`` after (or before) the one place ``anchor`` stands in ``path``."""
    text = path.read_text()
    assert text.count(anchor) == 1, f"{path.name}: the recipe's anchor {anchor!r} moved"
    path.write_text(text.replace(anchor, new + anchor if before else anchor + new))


def follow_the_recipes(src: Path, digest: str) -> None:
    """The files a new partitioner and a new dataset touch, edited as the recipes say."""
    fed = src / "fedmgda"
    # the partitioner: 1. its class and its entry; 2. the schema's enum
    edit(fed / "partitioners.py", "# Every partition a run config can name",
         TOY_PARTITIONER.lstrip("\n"), before=True)
    edit(fed / "partitioners.py", "Domain()", ", RoundRobin()")
    edit(fed / "config.schema.yaml", "enum: [shards, iid, natural, domain", ", round_robin")
    # the dataset: 1. its module; 2. its catalog entry (offering the partitioner: its step 3);
    # 3. its spec in the registry; 4. the schema's enum
    (fed / "data" / "toy.py").write_text(TOY_MODULE.format(digest=digest))
    edit(fed / "catalog.py", "MappingProxyType({d.name: d for d in (\n", TOY_DATASET)
    edit(fed / "data" / "registry.py", "shakespeare, synthetic", ", toy")
    edit(fed / "data" / "registry.py", "{spec.name: spec for spec in (\n", TOY_SPEC)
    edit(fed / "config.schema.yaml", "cifar10, fmnist, fmnist3", "toy, ", before=True)


CHECKS = '''
import json, sys
from pathlib import Path

import yaml

from fedmgda import catalog
from fedmgda.cli import main
from fedmgda.config import ConfigError, RunConfig
from fedmgda.data import DATASET_SPECS, load_federated, make_partition
from fedmgda.errors import RegistryError
from fedmgda.experiments import expand, validate_runs
from fedmgda.schema import SCHEMA_PATH, config_error

raw, registry, out = map(Path, sys.argv[1:4])

# the lists agree as tests/test_catalog.py checks them
run_fields = yaml.safe_load(SCHEMA_PATH.read_text())["$defs"]["runfields"]["properties"]
assert run_fields["dataset"]["enum"] == list(catalog.DATASETS) == list(DATASET_SPECS)
assert run_fields["partition"]["enum"] == [*catalog.PARTITIONS, None]
assert "round_robin" in catalog.PARTITIONS

# partitions of the toy dataset, from its raw file (checksum pinned)
part = make_partition("toy", raw, None, 1)
assert part.scheme == "round_robin" and part.num_users == 4 and part.seed == 1
assert make_partition("toy", raw, "round_robin", 2).content_hash() != part.content_hash()
assert make_partition("toy", raw, "iid", 1, {"num_users": 3}).num_users == 3
pooled = make_partition("toy", raw, "round_robin", 1, {"order": "pool"})
assert pooled.train[0][:3].tolist() == [0, 4, 8]
assert load_federated("toy", raw, seed=1).num_classes == 2

# run configs: a valid one; a bad partition or options refused, one line, before anything is built
run = dict(dataset="toy", algorithm="fedavg", rounds=2, participation=0.5, batch_size=5,
           device="cpu", raw_dir=str(raw))
RunConfig.from_dict(run)
for change, says in [({"partition": "domain"},
                      "partition: toy: unknown partition 'domain'; valid: ['round_robin', 'iid']"),
                     ({"dataset_options": {"num_users": 40}},
                      "dataset_options: toy: num_users = 40 leaves a user fewer than 2"),
                     ({"dataset_options": {"order": "sorted"}},
                      "dataset_options: toy: option order='sorted' not in")]:
    try:
        RunConfig.from_dict({**run, **change})
        raise AssertionError(f"accepted {change}")
    except ConfigError as err:
        assert says in str(err) and "\\n" not in str(err), err

# a registry of the toy setting: schema-valid, expanded, every run validated, seeded partitions
config = yaml.safe_load(registry.read_text())
config["raw_dir"] = str(raw)
config["settings"] = {"toy_rr": {"dataset": "toy", "partition": "round_robin", "batch_size": 5,
                                 "local_lr": 0.05, "participation": 0.5, "rounds": 2}}
config["experiments"]["tiny"]["setting"] = "toy_rr"
assert config_error(config) is None, config_error(config)
reg = expand(config)
validate_runs(reg)
assert sorted(reg.partitions) == ["toy-round_robin/seed1", "toy-round_robin/seed2"], \
    sorted(reg.partitions)
config["settings"]["toy_rr"]["partition"] = "bogus"
assert config_error(config).startswith("settings.toy_rr.partition: 'bogus' is not one of"), \
    config_error(config)
config["settings"]["toy_rr"]["partition"] = "domain"
try:
    validate_runs(expand(config))
    raise AssertionError("accepted partition domain")
except RegistryError as err:
    assert "partition: toy: unknown partition 'domain'" in str(err), err

# two rounds of training
(out / "run.yaml").write_text(yaml.safe_dump(run))
assert main(["train", "--config", str(out / "run.yaml"), "--out", str(out / "run")]) == 0
assert json.loads((out / "run" / "summary.json").read_text())["rounds_completed"] == 2
print("recipes followed")
'''


def test_a_dataset_and_a_partitioner_added_as_the_recipes_say_build_validate_and_train(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    raw = tmp_path / "raw"
    (raw / "toy").mkdir(parents=True)
    rng = np.random.RandomState(0)
    rows = [f"{i % 2},{rng.rand():.4f},{rng.rand():.4f},{(i % 2) + rng.rand():.4f}"
            for i in range(60)]
    (raw / "toy" / "toy.csv").write_text("\n".join(rows) + "\n")
    follow_the_recipes(src, hashlib.sha256((raw / "toy" / "toy.csv").read_bytes()).hexdigest())
    (tmp_path / "checks.py").write_text(textwrap.dedent(CHECKS))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1",
           "FEDMGDA_OFFLINE": "1",
           "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(tmp_path / "checks.py"), str(raw),
                           str(REPO / "config/test.yaml"),
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert (done.returncode == 0
            and "recipes followed" in done.stdout), (done.stdout + done.stderr)[-4000:]
    # the checkout untouched
    assert re.search(r"\btoy\b", (REPO / "src/fedmgda/config.schema.yaml").read_text()) is None
