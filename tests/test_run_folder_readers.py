"""A run folder is read only when it is complete and its own (``fedmgda.results.open_run``): the
trainer seals it with a manifest (the config hash, each result file's sha256 and row count); a
cut, changed or unreadable file, or another run's folder at its path, is one line naming the
folder or file, from every reader; a folder without a manifest (the committed archives) is
checked by its row counts and run.yaml."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedmgda import results
from fedmgda.cli import main
from fedmgda.config import config_hash
from fedmgda.errors import RunFolderError
from fedmgda.results import (
    MANIFEST,
    METRICS,
    PER_USER,
    PER_USER_FINAL,
    SUMMARY,
    open_run,
)
from fedmgda.specs import Row, TableSpec, spec_to_json
from fedmgda.tables import write_table

FEDAVG = dict(dataset="synthetic", algorithm="fedavg", rounds=5, per_user_every=2, device="cpu")
OTHER = dict(FEDAVG, algorithm="fedmgda_plus", hparams={"eta": 1.0, "decay": 0.5}, rounds=7)
USERS, STORED = 30, (1, 3, 5)  # the synthetic dataset's users; the rounds FEDAVG stores
COLUMNS = {"Average": "protocol.mean_acc", "Std": "protocol.std_acc", "Final": "final.mean_acc"}


def train(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(folder / "run.yaml"), "--out", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trained")
    return {"fedavg": train(root / "fedavg", FEDAVG), "other": train(root / "other", OTHER)}


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the FedAvg run's folder, to break."""
    return Path(shutil.copytree(trained["fedavg"], tmp_path / "runs" / "s" / "fedavg" / "seed1"))


def refused(run_dir: Path, expected: str | None = None) -> str:
    with pytest.raises(RunFolderError) as err:
        open_run(run_dir, expected)
    message = str(err.value)
    assert "\n" not in message
    return message


def keep_lines(path: Path, n: int) -> None:
    """``path`` cut to its first ``n`` lines (the header and n - 1 rows)."""
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:n]))


def test_the_trainer_seals_its_folder_and_a_complete_folder_passes(run):
    summary = json.loads((run / SUMMARY).read_text())
    manifest = summary[MANIFEST]
    assert manifest["config_sha256"] == config_hash(FEDAVG) == config_hash(summary["config"])
    assert {name: entry["rows"] for name, entry in manifest["files"].items()} == {
        METRICS: FEDAVG["rounds"], PER_USER: USERS * len(STORED), PER_USER_FINAL: USERS}
    folder = open_run(run, config_hash(FEDAVG))
    assert len(folder.per_user_final) == USERS
    assert sorted(set(folder.per_user["round"])) == list(STORED)


def test_the_config_hash_leaves_out_what_does_not_change_a_run():
    same = dict(FEDAVG, device="cuda", checkpoint_every=3, partition_file="p/seed1.npz",
                raw_dir="raw", local_lr=0.01, attack={"kind": "none"})  # 0.01: the default lr
    assert config_hash(same) == config_hash(FEDAVG)
    assert config_hash(dict(FEDAVG, rounds=6)) != config_hash(FEDAVG)
    assert config_hash(dict(FEDAVG, local_lr=0.02)) != config_hash(FEDAVG)


@pytest.mark.parametrize("name,lines,says", [
    (PER_USER_FINAL, 1 + USERS // 2,
     f"per_user_final.csv has {USERS // 2} rows, the run has {USERS} users"),
    (PER_USER, 1 + USERS + 7, f"per_user.csv has 7 rows at round 3, the run has {USERS} users"),
    (PER_USER, 1 + USERS, f"the run has {USERS} users x 3 stored rounds (round(s) 3, 5 missing)"),
    (METRICS, 2, "metrics.csv has 1 rows, the run has 5 rounds"),
])
def test_a_cut_result_file_is_one_line_naming_the_folder_and_what_differs(run, name, lines, says):
    keep_lines(run / name, lines)
    message = refused(run, config_hash(FEDAVG))
    assert message.startswith(f"{run}: ") and says in message, message
    assert message.endswith("delete the folder, the workflow retrains it")


@pytest.mark.parametrize("name", [METRICS, PER_USER, PER_USER_FINAL])
def test_a_changed_result_file_is_refused_by_its_sha256(run, name):
    text = (run / name).read_text()
    last = text.rstrip("\n").rsplit(",", 1)
    digit = last[1][-1]
    (run / name).write_text(last[0] + "," + last[1][:-1] + ("1" if digit != "1" else "2") + "\n")
    assert f"{name} is not the file the run wrote (its sha256 differs" in refused(run)


def test_another_runs_folder_at_a_runs_path_is_refused(trained, run):
    shutil.rmtree(run)
    shutil.copytree(trained["other"], run)
    open_run(run)  # complete in itself
    message = refused(run, config_hash(FEDAVG))
    assert message.startswith(f"{run}: trained with another run config than its run key's in "
                              "the registry")
    assert f"config sha256 {config_hash(OTHER)[:12]} in summary.json's manifest" in message


def test_a_run_yaml_of_another_config_beside_a_manifest_is_refused(run):
    (run / "run.yaml").write_text(yaml.safe_dump(dict(FEDAVG, rounds=6)))
    assert "its run.yaml is not the config the run was trained with" in refused(run)


@pytest.mark.parametrize("content,says", [
    (None, "unreadable (truncated or not JSON"),
    ("[1, 2]", "not a JSON object"),
])
def test_an_unreadable_summary_names_the_file(run, content, says):
    path = run / SUMMARY
    path.write_text(content if content is not None else path.read_text()[:200])
    message = refused(run)
    assert message.startswith(f"{path}: {says}"), message


def test_an_unreadable_csv_names_the_file(run):
    (run / METRICS).write_bytes(b"")
    assert refused(run).startswith(f"{run / METRICS}: unreadable CSV")
    (run / METRICS).write_text("a,b\n1,2\n")
    assert refused(run).startswith(f"{run / METRICS}: no column round")


def test_a_file_the_manifest_names_may_not_be_missing(run):
    (run / PER_USER_FINAL).unlink()
    assert refused(run) == (f"{run / PER_USER_FINAL}: missing, the run wrote it; "
                            "delete the folder, the workflow retrains it")


def unsealed(run: Path) -> None:
    summary = json.loads((run / SUMMARY).read_text())
    del summary[MANIFEST]
    (run / SUMMARY).write_text(json.dumps(summary))


def test_a_folder_without_manifest_is_checked_by_its_rows_and_its_run_yaml(run):
    unsealed(run)
    open_run(run, config_hash(FEDAVG))  # complete: read as before
    (run / "run.yaml").write_text(yaml.safe_dump(dict(FEDAVG, rounds=6)))
    message = refused(run, config_hash(FEDAVG))
    assert "another run config" in message and "in run.yaml" in message
    (run / "run.yaml").unlink()  # no run.yaml: summary.json's config
    open_run(run, config_hash(FEDAVG))
    assert "in summary.json, the registry's" in refused(run, config_hash(dict(FEDAVG, rounds=6)))
    keep_lines(run / PER_USER_FINAL, 11)
    assert f"per_user_final.csv has 10 rows, the run has {USERS} users" in refused(run)


def test_seal_gives_a_verified_folder_its_manifest(run):
    before = (run / SUMMARY).read_text()
    unsealed(run)
    assert main(["seal", str(run)]) == 0
    assert json.loads((run / SUMMARY).read_text()) == json.loads(before)
    keep_lines(run / METRICS, 3)
    unsealed(run)
    assert main(["seal", str(run)]) == 2 and MANIFEST not in json.loads((run / SUMMARY).read_text())


def table_spec(runs: list[str], hashes: list[str]) -> TableSpec:
    seeds = list(range(1, len(runs) + 1))
    row = Row("e", "fedavg", "FedAvg", "fedavg", {}, {"kind": "none"}, seeds, runs,
              config_hashes=hashes)
    return TableSpec(name="t", experiments=["e"], columns=COLUMNS, rows=[row])


def test_a_table_reads_each_folder_once(trained, run, tmp_path, monkeypatch):
    other = shutil.copytree(trained["fedavg"], run.with_name("seed2"))
    opened = []
    original = results.open_run
    monkeypatch.setattr(results, "open_run",
                        lambda d, c=None: opened.append(Path(d)) or original(d, c))
    spec = table_spec(["s/fedavg/seed1", "s/fedavg/seed2"], [config_hash(FEDAVG)] * 2)
    df = write_table(spec, run.parents[2], tmp_path / "t.csv", tmp_path / "t.md")
    assert opened == [run, other] and df.loc[0, "status"] == "ok"  # three columns, and the footer


def test_the_table_command_stops_at_a_broken_folder_with_one_line(run, tmp_path):
    keep_lines(run / PER_USER_FINAL, 11)
    spec = spec_to_json(table_spec(["s/fedavg/seed1"], [config_hash(FEDAVG)]))
    argv = [sys.executable, "-m", "fedmgda", "table", "--spec", spec, "--runs-dir",
            str(run.parents[2]), "--csv", str(tmp_path / "t.csv"), "--md", str(tmp_path / "t.md")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"fedmgda: {run}: per_user_final.csv has 10 rows, the run has "
                                   f"{USERS} users; delete the folder, the workflow retrains it")
    assert not (tmp_path / "t.csv").exists()


def test_the_folders_kept_in_memory_are_bounded_their_summaries_are_not(trained, run, monkeypatch):
    shutil.copytree(trained["fedavg"], run.with_name("seed2"))
    opened = []
    original = results.open_run
    monkeypatch.setattr(results, "open_run",
                        lambda d, c=None: opened.append(Path(d).name) or original(d, c))
    monkeypatch.setattr(results.RunFolders, "KEEP", 1)
    folders = results.RunFolders(run.parents[2])
    for key in ("s/fedavg/seed1", "s/fedavg/seed2", "s/fedavg/seed1"):
        folders.open(key)
    assert folders.summary("s/fedavg/seed2")["status"] == "ok"
    assert opened == ["seed1", "seed2", "seed1"]


def every_reader(runs_dir: Path, key: str, expected: str, out: Path) -> dict:
    """Each reader of run folders, on the one run ``key`` (the registry's config hash of it:
    ``expected``)."""
    from fedmgda.claims import evaluate
    from fedmgda.figures import make_figure
    from fedmgda.report import statistics_table
    from fedmgda.specs import ClaimSpec, FigureSpec

    row = table_spec([key], [expected]).rows[0]
    claim = ClaimSpec(id="c", source="§", paper="p", quantity="metrics.train_loss",
                      compare="at_least", seeds="mean", scale=1.0, tolerance=0.0, a=row,
                      threshold=0.0)
    registry = json.dumps({key: {"experiments": ["e"], "dataset": "synthetic",
                                 "algorithm": "fedavg", "seed": 1, "config_hash": expected}})
    return {
        "table": lambda: write_table(table_spec([key], [expected]), runs_dir, out / "t.csv",
                                     out / "t.md"),
        "figure": lambda: make_figure(FigureSpec(name="f", kind="curves", experiments=["e"],
                                                 metric="mean_acc", rows=[row]),
                                      runs_dir, out / "f.pdf", out / "f.png"),
        "claims": lambda: evaluate([claim], runs_dir),
        "report": lambda: statistics_table(runs_dir, {"FedAvg": [key]}),
        "runs index": lambda: results_of_runs_index(runs_dir, registry, out / "index.csv"),
    }


def results_of_runs_index(runs_dir: Path, registry: str, out: Path) -> None:
    from fedmgda.workflow_cli import cmd_runs_index

    cmd_runs_index(argparse.Namespace(runs_dir=str(runs_dir), registry=registry, out=str(out)))


@pytest.mark.parametrize("reader", ["table", "figure", "claims", "report", "runs index"])
def test_every_reader_verifies_the_folders_it_reads(run, tmp_path, reader):
    runs_dir, key = run.parents[2], "s/fedavg/seed1"
    every_reader(runs_dir, key, config_hash(FEDAVG), tmp_path)[reader]()  # a complete folder
    keep_lines(run / METRICS, 3)
    with pytest.raises(RunFolderError, match=r"metrics.csv has 2 rows, the run has 5 rounds"):
        every_reader(runs_dir, key, config_hash(FEDAVG), tmp_path)[reader]()


@pytest.mark.parametrize("reader", ["table", "figure", "claims", "runs index"])
def test_every_reader_given_the_registry_refuses_another_runs_folder(run, tmp_path, reader):
    runs_dir, key = run.parents[2], "s/fedavg/seed1"
    with pytest.raises(RunFolderError, match=r"trained with another run config than its run key's"):
        every_reader(runs_dir, key, config_hash(OTHER), tmp_path)[reader]()
