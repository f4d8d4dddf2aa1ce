"""scripts/device_ingest.py (make device-ingest): a device check's output folder into the
repository, its round times into src/fedmgda/reference/round_times.csv, the plan files made again."""

from __future__ import annotations

import csv
import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # device_check's dataclasses look their module up
    spec.loader.exec_module(module)
    return module


HEADER = "setting,dataset,model,device,machine,threads,runs,s_per_round,eval_s,source,also\n"


def rows(text: str) -> set[tuple]:
    return {tuple(row.values()) for row in csv.DictReader(io.StringIO(text))}


def test_a_setting_measured_anew_on_a_device_replaces_its_rows_there_only():
    ingest = load("device_ingest")
    committed = HEADER + ("a,d,m,cuda,H200,1,1,0.100,0.01,old.txt,\n"
                          "a,d,m,cuda,H200,1,16,1.000,0.01,old.txt,\n"
                          "a,d,m,cuda,H200,1,1,0.080,0.01,old.txt,tf32=true\n"
                          "a,d,m,cpu,2-core,1,1,2.000,0.10,cpu.txt,\n"
                          "b,d,m,cuda,H200,1,1,0.300,0.01,old.txt,\n")
    measured = HEADER + ("a,d,m,cuda,H100,1,1,0.090,0.01,bench_rounds.txt,\n"
                         "a,d,m,cuda,H100,1,4,0.300,0.01,bench_rounds.txt,\n")
    text, replaced, added = ingest.merge_rows(committed, measured, "new/bench_rounds.txt")
    assert (replaced, added) == (2, 2)
    assert rows(text) == {
        ("a", "d", "m", "cuda", "H200", "1", "1", "0.080", "0.01", "old.txt", "tf32=true"),  # another also: kept
        ("a", "d", "m", "cpu", "2-core", "1", "1", "2.000", "0.10", "cpu.txt", ""),  # another device: kept
        ("b", "d", "m", "cuda", "H200", "1", "1", "0.300", "0.01", "old.txt", ""),  # another setting: kept
        ("a", "d", "m", "cuda", "H100", "1", "1", "0.090", "0.01", "new/bench_rounds.txt", ""),
        ("a", "d", "m", "cuda", "H100", "1", "4", "0.300", "0.01", "new/bench_rounds.txt", ""),
    }  # a's 16-run row of the old check is gone: one check's pack sizes per setting and device
    assert text.startswith(HEADER)
    with pytest.raises(ValueError, match="no rows"):
        ingest.merge_rows(committed, HEADER, "x")


def test_the_rule_gives_the_committed_table_from_the_last_checks_rows():
    """Merging the rows of 2026-11-27's check into the committed table changes nothing: the
    sessions' merge by hand followed the same rule."""
    ingest = load("device_ingest")
    committed = (REPO / ingest.ROUND_TIMES).read_text()
    folder = "benchmarks/measurements/h200_device-check_2026-11-27"
    text, replaced, added = ingest.merge_rows(committed, (REPO / folder / ingest.ROWS).read_text(), f"{folder}/bench_rounds.txt")
    assert rows(text) == rows(committed) and replaced == added > 0


def fake_output(out: Path) -> None:
    out.mkdir()
    (out / "summary.md").write_text("# Device check (CUDA)\n\n| part | status |\n|---|---|\n| env | ok |\n| bench_rounds | ok |\n")
    (out / "bench_rounds.txt").write_text("setting ...\n")
    (out / "round_times_rows.csv").write_text(HEADER + "cifar10_b10_p0.1,cifar10,cnn_cifar,cuda,NVIDIA H100,1,1,0.050,0.010,bench_rounds.txt,\n")


def test_ingest_copies_the_output_merges_its_rows_and_writes_a_readme(tmp_path, capsys):
    ingest = load("device_ingest")
    root, out = tmp_path / "repo", tmp_path / "out"
    (root / ingest.ROUND_TIMES).parent.mkdir(parents=True)
    (root / ingest.ROUND_TIMES).write_text((REPO / ingest.ROUND_TIMES).read_text())
    fake_output(out)
    ingest.main([str(out), "h100_device-check_2099-01-01", "--root", str(root), "--no-remake"])
    target = root / ingest.MEASUREMENTS / "h100_device-check_2099-01-01"
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "bench_rounds.txt", "round_times_rows.csv", "summary.md"]
    table = list(csv.DictReader(io.StringIO((root / ingest.ROUND_TIMES).read_text())))
    cifar = [row for row in table if row["setting"] == "cifar10_b10_p0.1" and row["device"] == "cuda" and not row["also"]]
    assert [(row["machine"], row["s_per_round"], row["source"]) for row in cifar] == [
        ("NVIDIA H100", "0.050", f"{ingest.MEASUREMENTS}/h100_device-check_2099-01-01/bench_rounds.txt")]
    readme = (target / "README.md").read_text()
    assert "| bench_rounds | ok |" in readme and "- `round_times_rows.csv`" in readme
    assert "rows added 1, replaced 4" in capsys.readouterr().out  # the committed 1, 4, 8 and 16 runs
    with pytest.raises(FileExistsError, match="never overwritten"):
        ingest.main([str(out), "h100_device-check_2099-01-01", "--root", str(root), "--no-remake"])


def test_a_folder_without_a_summary_or_of_a_dry_run_is_refused(tmp_path):
    ingest = load("device_ingest")
    (tmp_path / "out").mkdir()
    with pytest.raises(FileNotFoundError, match="not a device check's output"):
        ingest.copy_outputs(tmp_path / "out", tmp_path / "target")
    (tmp_path / "out" / "summary.md").write_text("# Device check (dry: CPU, tiny sizes)\n")
    with pytest.raises(ValueError, match="dry run"):
        ingest.copy_outputs(tmp_path / "out", tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_remake_writes_each_file_as_the_tests_compare_it(tmp_path):
    """Each remade file is '$ python <command>' and the command's output, the commands those
    committed files start with (tests/test_bench_plan.py compares them with the commands)."""
    ingest = load("device_ingest")
    for name, command in ingest.REMADE.items():
        assert (REPO / name).read_text().splitlines()[0] == f"$ python {command}"

    def run(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 0, stdout=f"output of {' '.join(argv[1:])}\n", stderr="")

    (tmp_path / ingest.MEASUREMENTS).mkdir(parents=True)
    assert sorted(ingest.remake(tmp_path, run)) == sorted(ingest.REMADE)
    plan = (tmp_path / ingest.MEASUREMENTS / "plan_cores16_gpus1.txt").read_text()
    assert plan == ("$ python benchmarks/bench_rounds.py --plan --cores 16 --gpus 1\n"
                    "output of benchmarks/bench_rounds.py --plan --cores 16 --gpus 1\n")
    assert ingest.remake(tmp_path, run) == []  # nothing changed


def test_the_rows_file_is_the_one_the_device_check_writes():
    assert load("device_ingest").ROWS == load("device_check").ROUND_TIME_ROWS
