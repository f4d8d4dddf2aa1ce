"""One home per algorithm (fedmgda/algorithms/): each built-in is one module declaring one class,
read by the catalog exactly as a plug-in is; the examples/ plug-ins, written against
fedmgda.algorithms, load and train."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch
from toy_federated import make_toy_federated, toy_config

from fedmgda.algorithms import Algorithm
from fedmgda.catalog import (
    BUILTIN_ALGORITHMS,
    BUILTIN_CLASSES,
    describe,
    load_plugins,
)
from fedmgda.scheduler import run

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))


@pytest.mark.parametrize("cls", BUILTIN_CLASSES, ids=lambda c: c.name)
def test_each_builtin_is_one_module_with_one_algorithm_that_cites_its_sources(cls):
    module = importlib.import_module(cls.__module__)
    # the module is named as the algorithm
    assert module.__name__ == f"fedmgda.algorithms.{cls.name}"
    declared = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Algorithm)
                and c.__module__ == module.__name__]
    assert declared == [cls]
    # its update rule and its source
    assert "docs/protocol.md §" in module.__doc__ and "<-" in module.__doc__
    assert BUILTIN_ALGORITHMS[cls.name] == describe(cls)  # read as a plug-in is read


def plugin_classes(path: Path) -> list[str]:
    """The classes a plug-in file declares on ``Algorithm`` (read from its source)."""
    tree = ast.parse(path.read_text())
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)
            and any(getattr(b, "id", None) == "Algorithm" for b in node.bases)]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_import_fedmgda_algorithms_and_train(path):
    source = path.read_text()
    assert "from fedmgda.algorithms import Algorithm" in source and plugin_classes(path)
    for name in plugin_classes(path):
        [info] = load_plugins([f"{path}:{name}"])
        cfg = toy_config(algorithm=info.name, plugin=f"{path}:{name}", rounds=2, momentum=0.0)
        result = run(cfg, data=make_toy_federated(), model_name="logreg")
        assert result.summary["status"] == "ok" and torch.isfinite(result.final_weights).all()
