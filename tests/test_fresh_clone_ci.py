"""scripts/fresh_clone_ci.py: .ci/run in a fresh clone, its times into test_runs.csv."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("fresh_clone_ci", REPO / "scripts" / "fresh_clone_ci.py")
fresh_clone_ci = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fresh_clone_ci)

LOG = """\
........................................................................ [ 97%]
.............                                                            [100%]
SKIPPED [7] tests/test_backends.py:99: no CUDA device
970 passed, 20 skipped, 3 warnings in 686.54s (0:11:26)
[snakemake] 12 jobs in 3.5s
============================== 2 passed in 116.12s (0:01:56) ===============================
"""


def test_each_pytest_sessions_closing_line_is_read():
    main, slurm = fresh_clone_ci.pytest_sessions(LOG)  # the Snakemake line is no session
    assert main == {"passed": 970, "skipped": 20, "warnings": 3, "seconds": 686.54}
    assert slurm == {"passed": 2, "seconds": 116.12}
    assert fresh_clone_ci.pytest_sessions("no tests ran in 0.51s\n") == [{"seconds": 0.51}]


@pytest.mark.parametrize(("seconds", "text"), [(36.4, "36 s"), (686.54, "11 min 27 s"), (60, "1 min 0 s"),
                                               (3723, "1 h 2 min 3 s"), (3600, "1 h 0 min 0 s")])
def test_durations_are_written_as_the_measurement_files_write_them(seconds, text):
    assert fresh_clone_ci.duration(seconds) == text


def test_the_committed_record_has_the_scripts_columns():
    with open(fresh_clone_ci.RECORD, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == fresh_clone_ci.COLUMNS
    assert all(len(r) == len(rows[0]) for r in rows)


def _repo_with_ci(tmp_path: Path, ci_script: str) -> Path:
    """A git repository whose .ci/run is ``ci_script``, one commit, and an empty record."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / ".ci" / "run").write_text(ci_script)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "ci"], check=True)
    (tmp_path / "record.csv").write_text(",".join(fresh_clone_ci.COLUMNS) + "\n")
    return repo


def test_a_passed_run_adds_its_row(tmp_path, capsys):
    # the clone sees the shared folder beside it and only committed files
    repo = _repo_with_ci(tmp_path, "test -f ../shared/marker && test ! -e untracked\n"
                                   "echo '5 passed, 1 skipped in 61.2s (0:01:01)'\necho '2 passed in 3.0s'\n")
    (repo / "untracked").write_text("")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "marker").write_text("")
    rc = fresh_clone_ci.main(["--repo", str(repo), "--shared", str(tmp_path / "shared"),
                              "--record", str(tmp_path / "record.csv"), "--conditions", "a test beside it"])
    assert rc == 0
    with open(tmp_path / "record.csv", newline="", encoding="utf-8") as fh:
        (row,) = list(csv.DictReader(fh))
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert (row["commit"], row["passed"], row["skipped"], row["pytest"], row["slurm_passed"], row["slurm"]) == \
        (commit, "5", "1", "1 min 1 s", "2", "3 s")
    assert row["conditions"].startswith("load average ") and row["conditions"].endswith("; a test beside it")
    assert " cores, " in row["machine"]
    assert "added to" in capsys.readouterr().out


def test_a_failed_run_adds_nothing_and_keeps_its_log(tmp_path, capsys):
    repo = _repo_with_ci(tmp_path, "echo '1 failed, 4 passed in 2.0s'\nexit 2\n")
    rc = fresh_clone_ci.main(["--repo", str(repo), "--shared", str(tmp_path / "none"),
                              "--record", str(tmp_path / "record.csv")])
    assert rc == 2
    assert (tmp_path / "record.csv").read_text().count("\n") == 1
    err = capsys.readouterr().err
    log = Path(err.split("its log: ")[1].strip())
    assert "1 failed" in log.read_text()
    log.unlink()
