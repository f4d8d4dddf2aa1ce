"""requirements/lock.txt, the locked pip environment (made by `make lock` with pip-compile).

    python scripts/lockfile.py stamp
        record the lock's inputs digest in its header (make lock)
    python scripts/lockfile.py check [--exact]
        this Python's installed packages are the lock's versions; --exact: and nothing else
        (make setup)

The digest covers what the lock is made from, pyproject.toml's dependencies and the locked extras
plus requirements/constraints.txt, so tests/test_dependencies.py fails when one of them changes
without `make lock`. Standard library only: `make lock` runs it outside the project's environment.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "lock.txt"
CONSTRAINTS = REPO / "requirements" / "constraints.txt"
EXTRAS = ("workflow", "dev")  # the extras `make lock` locks
# installed but not in the lock, and rightly: the installer and the project itself
NOT_LOCKED = {"pip", "fedmgda"}
DIGEST_LINE = "# inputs digest: "
HEADER = (
    "# Resolved for CPython 3.11 on Linux x86_64 (CI and the project's machines); on another\n"
    "# platform run `make lock` there. torch is PyPI's Linux wheel (the CUDA build, which runs on\n"
    "# CPU-only machines too). Upgrade: docs/running.md, \"Environment\".\n"
)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)


def canonical(name: str) -> str:
    """PEP 503's normalized name (as packaging.utils.canonicalize_name)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def input_digest(pyproject: Path = REPO / "pyproject.toml", constraints: Path = CONSTRAINTS) -> str:
    """sha256 of the requirement strings the lock is resolved from."""
    project = tomllib.loads(pyproject.read_text())["project"]
    inputs = {
        "dependencies": project["dependencies"],
        "extras": {e: project["optional-dependencies"][e] for e in EXTRAS},
        "constraints": [line.split("#")[0].strip() for line in constraints.read_text().splitlines()
                        if line.split("#")[0].strip()],
    }
    return "sha256:" + hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def recorded_digest(lock_text: str) -> str | None:
    for line in lock_text.splitlines():
        if line.startswith(DIGEST_LINE):
            return line[len(DIGEST_LINE):].strip()
    return None


def pins(lock_text: str) -> dict[str, str]:
    """The lock's packages: normalized name -> version."""
    return {canonical(name): version for name, version in PIN.findall(lock_text)}


def unhashed(lock_text: str) -> list[str]:
    """Pinned packages without a --hash (pip's hash-checking mode would refuse the file)."""
    blocks = re.split(r"\n(?=[A-Za-z0-9])", lock_text)
    return [m.group(1) for b in blocks if (m := PIN.match(b)) and "--hash=sha256:" not in b]


def stamp(lock: Path = LOCK) -> None:
    """Put the header note and the inputs digest after pip-compile's header (replacing old ones)."""
    text = re.sub(rf"^{HEADER[:15]}.*?^{DIGEST_LINE}.*?\n", "", lock.read_text(), flags=re.M | re.S)
    lines = text.splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    lines[end:end] = [HEADER, f"{DIGEST_LINE}{input_digest()}\n"]
    lock.write_text("".join(lines))


def installed() -> dict[str, str]:
    """This Python's distributions: normalized name -> version (the first on sys.path wins, as for
    imports)."""
    from importlib.metadata import distributions

    out: dict[str, str] = {}
    for dist in distributions():
        out.setdefault(canonical(dist.metadata["Name"]), dist.version)
    return out


def differences(locked: dict[str, str], found: dict[str, str], exact: bool) -> list[str]:
    """What keeps `found` (installed versions) from being the lock: missing or other versions, and
    with exact=True, packages the lock does not name."""
    out = [f"{name}: locked {version}, installed {found.get(name, 'nothing')}"
           for name, version in sorted(locked.items()) if found.get(name) != version]
    if exact:
        out += [f"{name} {version}: installed, not in the lock"
                for name, version in sorted(found.items()) if name not in locked
                and name not in NOT_LOCKED]
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["stamp"]:
        stamp()
        return 0
    if argv[:1] == ["check"]:
        if recorded_digest(LOCK.read_text()) != input_digest():
            print(f"warning: {LOCK.relative_to(REPO)} is older than pyproject.toml's requirements "
                  "or the constraints: `make lock` (tests/test_dependencies.py fails until then)",
                  file=sys.stderr)
        problems = differences(pins(LOCK.read_text()), installed(), exact="--exact" in argv)
        if problems:
            print(f"{sys.prefix} is not {LOCK.relative_to(REPO)}:\n  " + "\n  ".join(problems)
                  + "\n(a .venv from before? `rm -rf .venv && make setup`)", file=sys.stderr)
            return 1
        print(f"{sys.prefix}: the {len(pins(LOCK.read_text()))} packages of "
              f"{LOCK.relative_to(REPO)}, "
              "at their locked versions")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
