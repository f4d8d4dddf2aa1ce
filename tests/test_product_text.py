"""The repository's text speaks of the package: what it computes, measures and where its files
are. Words of how it was developed (when and on which machine someone worked, for how long, under
which ticket, which run came first) have no place in the docs, the code or the tests; nor has a
path outside the checkout, which only the CI entry point (.ci/run) may read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docnumbers import strip_markers

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("README.md", "CHANGELOG.md", "Makefile", "pyproject.toml", "Snakefile", "docs", "src",
           "workflow", "tests", "scripts", "benchmarks")
# this file names the words it looks for (measurement files keep their provenance -- machine,
# date, commit, command -- in words of the package too)
NOT_SCANNED = ("tests/test_product_text.py",)
SUFFIXES = {".md", ".py", ".smk", ".yaml", ".yml", ".toml", ".txt", ".rst", ".cfg", ".ipynb", ".sh"}

PROCESS_WORDS = {
    "sitting": r"\bsessions?\b",
    "ticket number": r"\bissues? #?\d+\b|(?<![\w&#/\"'])#\d{2,}\b",
    "borrowed machine": r"\b(?:lent|borrowed)\b|\bdevice[ -]minutes?\b",
    "chronology": r"\b(?:first|second|third) run\b|\brerun of the day\b"
                  r"|\b(?:earlier|later) today\b",
    "outside the checkout": r"\.\./shared\b",
}
PATTERNS = {name: re.compile(regex, re.I) for name, regex in PROCESS_WORDS.items()}
# the same words in their other meanings, removed from a line before it is searched
OTHER_MEANINGS = re.compile(
    r"\b(?:pytest|snakemake|http|requests)[ .]sessions?\b|\bsession: pytest\.Session\b"
    r"|\bsession[- ](?:wide|scoped?)\b|\bscope=[\"']session[\"']", re.I)


def scanned_files(root: Path) -> list[Path]:
    files = []
    for name in SCANNED:
        top = root / name
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(NOT_SCANNED) or "__pycache__" in rel or not path.is_file():
                continue
            if path.suffix in SUFFIXES or path.name in ("Makefile", "Snakefile"):
                files.append(path)
    return files


def process_words(path: Path, root: Path) -> list[str]:
    """``file:line: kind: "text"`` for each process word of a file (docs markers left out: their
    ``#k`` picks a number, it names no ticket)."""
    found = []
    for number, line in enumerate(path.read_text(errors="ignore").splitlines(), 1):
        text = OTHER_MEANINGS.sub(" ", strip_markers(line))
        for kind, pattern in PATTERNS.items():
            found += [f"{path.relative_to(root)}:{number}: {kind}: {m.group(0)!r}"
                      for m in pattern.finditer(text)]
    return found


def all_process_words(root: Path) -> list[str]:
    return [hit for path in scanned_files(root) for hit in process_words(path, root)]


def test_the_repository_speaks_of_the_package_only():
    assert not all_process_words(REPO)


PLANTED = [
    "timed in the second " + "session",
    "fixed in " + "issue 42",
    "see #" + "32 for the plan",
    "on the " + "lent GPU",
    "12 of the 15 device " + "minutes",
    "the first " + "run gave 3 min",
    "the raw files in .." + "/shared/data",
]


@pytest.mark.parametrize("line", PLANTED)
def test_a_planted_process_word_is_found(tmp_path, line):
    (tmp_path / "README.md").write_text(f"# A page\n\nSome text.\n{line}\n")
    hits = all_process_words(tmp_path)
    assert len(hits) == 1 and hits[0].startswith("README.md:4: ")


@pytest.mark.parametrize("line", [
    "make test runs two pytest " + "sessions", "def hook(session: pytest." + "Session):",
    "a session-scoped fixture", "<!-- n a.md \"key\" #12 -->3<!-- /n -->", "client #1",
])
def test_the_other_meanings_pass(tmp_path, line):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mod.py").write_text(f"# {line}\n")
    assert all_process_words(tmp_path) == []


def test_measurement_files_are_read_too(tmp_path):
    folder = tmp_path / "benchmarks" / "measurements"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("Measured in the second " + "session.\n")
    hits = all_process_words(tmp_path)
    assert [hit.split(": ")[:2] for hit in hits] == [["benchmarks/measurements/README.md:1",
                                                     "sitting"]]
