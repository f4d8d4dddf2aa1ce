"""pyproject.toml is the one list of dependencies; every other list follows it (no network; the
files are only parsed).

- requirements/lock.txt (what `make setup` installs, made by `make lock` with pip-compile):
  [project] dependencies + the `workflow` and `dev` extras resolved to every package, exact version
  and hash. Its header records a digest of those requirements and requirements/constraints.txt, so
  editing them without `make lock` fails here (CI); under `make test` (FEDMGDA_LOCK_CHECK=1) the
  installed packages are checked against it too.
- environment.yml (the conda environment to run everything in): the same packages as pyproject,
  each pinned to the lock's version.
- workflow/envs/fedmgda.yaml (each rule's environment under `--software-deployment-method
  conda`): what a job may run, i.e. [project] dependencies + the `workflow` extra less Snakemake
  and its executor plugin, which run the jobs rather than inside them; pinned as environment.yml.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
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

_spec = importlib.util.spec_from_file_location("lockfile", REPO / "scripts" / "lockfile.py")
lockfile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lockfile)
LOCK_TEXT = lockfile.LOCK.read_text()


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _requirements(*extras: str, conda: bool = True) -> dict[str, SpecifierSet]:
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    out = {}
    for text in reqs:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        out[CONDA_NAMES.get(name, name) if conda else name] = req.specifier
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


def _outside(requirements: dict[str, SpecifierSet], pins: dict[str, str]) -> list[str]:
    """The requirements the pins leave out or pin outside their specifiers."""
    return [f"{name}{spec}: locked {pins.get(name, 'nothing')}"
            for name, spec in requirements.items()
            if name not in pins or pins[name] not in spec]


def test_lock_is_made_from_the_current_pyproject():
    assert lockfile.recorded_digest(LOCK_TEXT) == lockfile.input_digest(), (
        "pyproject.toml's dependencies or requirements/constraints.txt changed since "
        "requirements/lock.txt was made: run `make lock` and commit both")


def test_lock_digest_follows_the_requirements_and_only_them(tmp_path):
    pyproject, constraints = tmp_path / "pyproject.toml", tmp_path / "constraints.txt"
    shutil.copy(REPO / "pyproject.toml", pyproject)
    shutil.copy(lockfile.CONSTRAINTS, constraints)
    digest = lambda: lockfile.input_digest(pyproject, constraints)  # noqa: E731
    before, text = digest(), pyproject.read_text()
    pyproject.write_text(re.sub(r'^version = ".*"', 'version = "99.0"', text, count=1, flags=re.M))
    assert pyproject.read_text() != text and digest() == before  # not a dependency
    project = _pyproject()["project"]
    first, last_dev = project["dependencies"][0], project["optional-dependencies"]["dev"][-1]
    # a specifier changed, a package added
    for edit in (f'"{first}"', f'"{first},<99"'), (f'"{last_dev}"', f'"{last_dev}", "mypy"'):
        assert text.count(edit[0]) == 1
        pyproject.write_text(text.replace(*edit))
        assert digest() != before, edit
    pyproject.write_text(text)
    constraints.write_text(constraints.read_text() + "numpy<99\n")
    assert digest() != before


def test_lock_pins_every_requirement_within_its_specifier():
    pins = lockfile.pins(LOCK_TEXT)
    assert _outside(_requirements("workflow", "dev", conda=False), pins) == []
    constraints = [Requirement(line) for line in lockfile.CONSTRAINTS.read_text().splitlines()
                   if line.strip() and not line.startswith("#")]
    assert _outside({c.name: c.specifier for c in constraints}, pins) == []
    # and the check can fail: a pin below pyproject's floor, a requirement the lock lacks
    assert _outside({"numpy": SpecifierSet(">=1.24")}, {**pins, "numpy": "1.23.5"}) != []
    assert _outside({"mypy": SpecifierSet()}, pins) != []


def test_every_locked_package_has_its_hashes():
    pins = lockfile.pins(LOCK_TEXT)
    assert len(pins) > 100 and {"torch", "numpy", "snakemake", "setuptools"} <= set(pins)
    assert lockfile.unhashed(LOCK_TEXT) == []
    assert lockfile.unhashed(LOCK_TEXT + "mypy==1.0.0\n    # via fedmgda\n") == ["mypy"]


def test_installed_differences_name_missing_other_and_extra_packages():
    locked = {"numpy": "2.4.6", "torch": "2.14.1"}
    assert lockfile.differences(locked, {**locked, "pip": "23.2.1", "fedmgda": "0.1.0"},
                                exact=True) == []
    found = {"numpy": "2.4.5", "hypothesis": "6.1"}
    assert lockfile.differences(locked, found, exact=False) == [
        "numpy: locked 2.4.6, installed 2.4.5", "torch: locked 2.14.1, installed nothing"]
    assert lockfile.differences(locked, found,
                                exact=True)[-1] == "hypothesis 6.1: installed, not in the lock"


@pytest.mark.skipif(os.environ.get("FEDMGDA_LOCK_CHECK") != "1",
                    reason="checks the environment `make setup` installed: runs under make test / "
                    "test-fast")
def test_installed_packages_are_the_locked_versions():
    exact = Path(sys.prefix).resolve() == (REPO / ".venv").resolve()  # an active env may hold more
    assert lockfile.differences(lockfile.pins(LOCK_TEXT), lockfile.installed(), exact) == []


def test_environment_yml_pins_the_pyproject_requirements_to_the_locked_versions():
    packages, _, pip = _conda_env("environment.yml")
    assert set(packages) == set(_requirements("workflow", "dev"))
    assert {name: str(spec)
            for name, spec in packages.items()} == {name: _conda_pins()[name] for name in packages}
    assert pip == ["-e ."]  # the package itself, editable, without re-resolving its dependencies


def _conda_pins() -> dict[str, str]:
    """The lock's versions under their conda names, as conda specifiers."""
    return {CONDA_NAMES.get(name, name): f"=={version}"
            for name, version in lockfile.pins(LOCK_TEXT).items()}


def test_rule_environment_has_every_requirement_a_job_runs():
    packages, _, pip = _conda_env("workflow/envs/fedmgda.yaml")
    expected = {k for k in _requirements("workflow") if k not in NOT_IN_RULE_ENV}
    assert {"papermill", "nbconvert", "ipykernel"} <= expected  # the report rules call them
    assert set(packages) == expected
    assert {name: str(spec)
            for name, spec in packages.items()} == {name: _conda_pins()[name] for name in packages}
    # rules import the package from src/ (PYTHONPATH set by workflow/rules/common.smk)
    assert pip == []


def test_both_environments_pin_one_python_the_package_supports():
    pins = {path: _conda_env(path)[1] for path in ("environment.yml", "workflow/envs/fedmgda.yaml")}
    assert len(set(pins.values())) == 1, pins
    supported = SpecifierSet(_pyproject()["project"]["requires-python"])
    assert next(iter(pins.values())) in supported


def test_both_environments_use_the_same_channels():
    channels = [yaml.safe_load((REPO / p).read_text())["channels"]
                for p in ("environment.yml", "workflow/envs/fedmgda.yaml")]
    assert channels[0] == channels[1]
