"""benchmarks/bench_planning.py: the synthetic grid has the runs asked for, packed or not."""

import importlib.util
import sys
from pathlib import Path

import pytest

from fedmgda.experiments import expand
from fedmgda.packs import assign_packs
from fedmgda.schema import with_defaults

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_planning",
                                                  ROOT / "benchmarks" / "bench_planning.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_planning"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mode", ["packed", "single"])
def test_grid_config_has_the_runs_asked_for(bench, mode):
    config = bench.grid_config(40, bench.MODES[mode])
    config.update(with_defaults(config))
    runs = expand(config).runs
    assert len(runs) == 40
    packed = sum(len(keys) for keys in assign_packs(runs).values())
    assert packed == (40 if mode == "packed" else 0)


def test_grid_config_refuses_a_count_the_grid_does_not_divide(bench):
    with pytest.raises(SystemExit, match="not a multiple of the grid's 2 entries"):
        bench.grid_config(41, 1)
