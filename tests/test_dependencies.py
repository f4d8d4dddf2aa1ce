"""pyproject.toml is the one list of dependencies: the two conda environments repeat it exactly
(no network; the files are only parsed).

- environment.yml (the environment to run everything in): [project] dependencies + the
  `workflow` and `dev` extras.
- workflow/envs/fedmgda.yaml (each rule's environment under `--software-deployment-method
  conda`): what a job may run, i.e. [project] dependencies + the `workflow` extra less Snakemake
  and its executor plugin, which run the jobs rather than inside them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda name where they differ
NOT_IN_RULE_ENV = {"snakemake", "snakemake-executor-plugin-slurm"}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _requirements(*extras: str) -> dict[str, SpecifierSet]:
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    out = {}
    for text in reqs:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        out[CONDA_NAMES.get(name, name)] = req.specifier
    return out


def _conda_env(path: str) -> tuple[dict[str, SpecifierSet], str, list]:
    """A conda environment file's packages (name -> version specifiers), its python pin and its
    pip section."""
    env = yaml.safe_load((REPO / path).read_text())
    packages, python, pip = {}, None, []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip = dep["pip"]
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(.*)", dep)
        name, spec = canonicalize_name(m.group(1)), m.group(2).replace(" ", "")
        if name == "python":
            python = spec.lstrip("=")
        elif name != "pip":
            assert name not in packages, f"{path}: {name} listed twice"
            packages[name] = SpecifierSet(spec)
    return packages, python, pip


def test_environment_yml_has_exactly_the_pyproject_requirements():
    packages, _, pip = _conda_env("environment.yml")
    assert packages == _requirements("workflow", "dev")
    assert pip == ["-e ."]  # the package itself, editable, without re-resolving its dependencies


def test_rule_environment_has_every_requirement_a_job_runs():
    packages, _, pip = _conda_env("workflow/envs/fedmgda.yaml")
    expected = {k: v for k, v in _requirements("workflow").items() if k not in NOT_IN_RULE_ENV}
    assert {"papermill", "nbconvert", "ipykernel"} <= set(expected)  # the report rules call them
    assert packages == expected
    assert pip == []  # rules import the package from src/ (PYTHONPATH set by workflow/rules/common.smk)


def test_both_environments_pin_one_python_the_package_supports():
    pins = {path: _conda_env(path)[1] for path in ("environment.yml", "workflow/envs/fedmgda.yaml")}
    assert len(set(pins.values())) == 1, pins
    supported = SpecifierSet(_pyproject()["project"]["requires-python"])
    assert next(iter(pins.values())) in supported


def test_both_environments_use_the_same_channels():
    channels = [yaml.safe_load((REPO / p).read_text())["channels"] for p in ("environment.yml", "workflow/envs/fedmgda.yaml")]
    assert channels[0] == channels[1]
