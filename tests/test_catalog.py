"""The catalog is the one list of algorithm and dataset names: every other place agrees with it,
and no other source file writes the lists out again."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from fedmgda import catalog
from fedmgda.algorithms import Algorithm
from fedmgda.algorithms.qfedavg import QFedAvg
from fedmgda.catalog import (
    ALGORITHM_OPTIONS,
    BUILTIN_ALGORITHMS,
    DATASETS,
    MODELS,
    PARTITIONS,
    make_algorithm,
)
from fedmgda.config import CHOICES, RunConfig
from fedmgda.partitioners import PARTITIONERS, Partitioner
from fedmgda.schema import SCHEMA_PATH

REPO = Path(__file__).resolve().parents[1]


def test_schema_lists_are_the_catalogs():
    """The schema Snakemake validates the registry with lists exactly the catalog's datasets,
    partitions and models, and the run options' values (those the algorithms own declared on
    their classes), with the run config's defaults."""
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    run = schema["$defs"]["runfields"]["properties"]
    assert run["dataset"]["enum"] == list(DATASETS)
    assert run["partition"]["enum"] == [*PARTITIONS, None]
    assert run["model"]["enum"] == [None, *MODELS]
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert (set(ALGORITHM_OPTIONS) <= set(CHOICES)
            and CHOICES["qffl_loss"] == QFedAvg.own_options["qffl_loss"])
    for name, values in CHOICES.items():
        assert run[name]["enum"] == list(values), name
        assert run[name]["default"] == defaults[name] == values[0], name


def test_dataset_registry_is_the_catalog():
    from fedmgda.data.registry import DATASET_SPECS

    assert list(DATASET_SPECS) == list(DATASETS)
    for name, spec in DATASET_SPECS.items():
        info = DATASETS[name]
        assert (spec.model, spec.default_partition,
                spec.partitions) == (info.model, info.default_partition, info.partitions)
        assert (info.default_partition in info.partitions
                and set(info.partitions) <= set(PARTITIONERS))
        assert info.offline == (spec.raw_files == ()), name  # offline = nothing to download
        # the folder the workflow downloads
        assert {rf.dataset for rf in spec.raw_files} <= {info.raw_folder}, name


def test_partitions_are_the_partitioners_registry():
    """The partition names a config can give are the registry's (one entry per partitioner, as
    fedmgda.metrics.STATISTICS); each entry's facts are coherent, and every dataset's defaults are
    options its partitions take."""
    assert PARTITIONS == tuple(PARTITIONERS)
    for name, partitioner in PARTITIONERS.items():
        assert isinstance(partitioner, Partitioner) and partitioner.name == name
        assert partitioner.seeded in (True, False) or partitioner.seeded in partitioner.reads, name
        assert set(partitioner.owns) <= set(partitioner.reads), name
    for info in DATASETS.values():
        for partition in info.partitions:
            assert info.size_error(partition, {}) is None, (info.name, partition)


@pytest.mark.parametrize("name", list(BUILTIN_ALGORITHMS))
def test_every_builtin_builds_and_its_flags_match_its_hparams(name):
    info = BUILTIN_ALGORITHMS[name]
    assert issubclass(info.cls, Algorithm) and info.cls.name == name
    # the declared defaults are valid
    assert isinstance(make_algorithm(name, {}, rounds=100, num_users=4), info.cls)
    assert info.proximal == ("mu" in info.hparams)
    assert info.min_norm_qp == ("epsilon" in info.hparams)
    assert set(info.implied) <= set(info.hparams) and info.display and info.summary


def test_name_lists_are_written_once():
    """No source file but the catalog writes three or more algorithm (or dataset) names on one
    line: a list kept by hand elsewhere would drift from the catalog. The schema's dataset enum is
    the one copy, checked equal above."""
    sources = [*REPO.glob("src/fedmgda/**/*.py"), *REPO.glob("workflow/**/*.smk"),
               REPO / "Snakefile",
               *REPO.glob("workflow/scripts/*.py"), SCHEMA_PATH]
    offenders = []
    for path in sources:
        if path.name == "catalog.py":
            continue
        # Python literals are quoted; YAML flow lists are not
        word = r"""["']{}["']""" if path.suffix != ".yaml" else r"\b{}\b"
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for names in (BUILTIN_ALGORITHMS, DATASETS):
                if (names is DATASETS and path.suffix == ".yaml"
                    and line.strip().startswith("enum:")):
                    continue  # the schema's dataset enum
                found = sorted(n for n in names if re.search(word.format(n), line))
                if len(found) >= 3:
                    offenders.append(f"{path.relative_to(REPO)}:{i}: {found}")
    assert not offenders, "name lists outside fedmgda/catalog.py:\n" + "\n".join(offenders)


def test_unknown_names_are_clear_errors():
    with pytest.raises(catalog.ConfigError, match="unknown algorithm 'fedsgd'.*plugins"):
        catalog.get_algorithm("fedsgd")
    with pytest.raises(catalog.ConfigError, match="unknown dataset 'mnist'"):
        catalog.get_dataset("mnist")
