"""benchmarks/bench_rounds.py --plan: the paper DAG's makespan from the committed round times,
beside today's back-to-back projection."""

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from fedmgda.devices import parse_round_times, round_times

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "config/config.yaml")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_rounds", ROOT / "benchmarks" / "bench_rounds.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_rounds"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_back_to_back_is_the_committed_h200_projection(bench):
    """The table's single-run H200 times give back the projection printed with them (133.2 h,
    benchmarks/measurements/h200_device-check_2026-11-26/bench_rounds.txt)."""
    singles = {r.setting: (r.s_per_round, r.eval_s) for r in round_times() if r.device == "cuda" and r.runs == 1}
    seconds, runs, _ = bench.project_paper(singles, CONFIG)
    assert runs == 1599
    assert round(sum(seconds.values()) / 3600, 1) == 133.2


def test_plan_jobs_devices_and_makespan(bench):
    from fedmgda.makespan import makespan_by_dataset

    jobs, runs, notes = bench.plan_jobs(round_times(), gpus=1, config=CONFIG)
    devices = {j.dataset: j.device for j in jobs}
    assert devices == {"adult": "cpu", "cifar10": "cuda", "femnist": "cuda", "fmnist": "cuda", "shakespeare": "cuda"}
    assert runs["adult"] == 630 and sum(runs.values()) == 1599 - 80  # fmnist3 and synthetic: no CPU time measured
    assert any("fmnist3" in n for n in notes) and any("synthetic" in n for n in notes)
    plan = makespan_by_dataset(jobs, cores=16, gpus=1)
    gpu_busy = sum(j.seconds for j in jobs if j.device == "cuda")
    assert plan["all"] == pytest.approx(gpu_busy)  # one GPU queue; Adult's CPU packs run beside it
    assert plan["adult"] < 0.01 * plan["all"]


def test_plan_job_length_is_rounds_times_pack_round(bench, tmp_path):
    """One pack of 3 runs: rounds x the pack's interpolated round time + each run's evaluations."""
    rows = parse_round_times("setting,dataset,model,device,machine,threads,runs,s_per_round,eval_s,source\n"
                             "adult_b10,adult,logreg,cuda,G,1,1,0.2,0.01,f\n"
                             "adult_b10,adult,logreg,cuda,G,1,8,0.9,0.01,f\n")
    cfg = tmp_path / "c.yaml"
    import yaml

    base = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    base.update(device="cuda", settings={"a": {"dataset": "adult", "batch_size": 10, "local_lr": 0.01, "clients_per_round": 2, "rounds": 100}},
                grids={"g": [{"algorithm": "fedavg"}]}, experiments={"t": {"setting": "a", "grid": "g", "seeds": [1, 2, 3]}},
                resources={"default": {"gpu": 1}, "adult": {"pack": 8}}, tables={}, figures={}, claims={})
    cfg.write_text(yaml.safe_dump(base))
    jobs, runs, _ = bench.plan_jobs(rows, gpus=1, config=str(cfg))
    assert runs == {"adult": 3} and len(jobs) == 1
    assert jobs[0].device == "cuda"  # device: cuda in the config
    assert jobs[0].seconds == pytest.approx(100 * (0.2 + 2 * 0.1) + 3 * 100 * 0.01)
    # device: auto with only GPU rows: a linear model goes to a CPU core, where nothing is measured
    base["device"] = "auto"
    cfg.write_text(yaml.safe_dump(base))
    jobs, runs, notes = bench.plan_jobs(rows, gpus=1, config=str(cfg))
    assert jobs == [] and notes == ["3 adult runs (cpu) left out: no cpu round time measured for adult"]


def test_a_gpu_measurement_gives_the_plan_its_gpu_rows(bench, capsys):
    """After measuring on a GPU, the plan uses that run's GPU times and the committed CPU times: the
    H200's numbers given back as a measurement print the same plan as --plan."""
    committed = round_times()
    measured = {r.setting: (r.s_per_round, r.eval_s) for r in committed if r.device == "cuda" and r.runs == 1}
    packed = {r.setting: {8: r.s_per_round} for r in committed if r.device == "cuda" and r.runs == 8}
    rows = bench.measured_rows(measured, packed, "NVIDIA H200")
    key = sorted((r.setting, r.device, r.runs, r.s_per_round, r.eval_s) for r in rows)
    assert key == sorted((r.setting, r.device, r.runs, r.s_per_round, r.eval_s) for r in committed)
    bench.print_plan(rows, 16, 1, CONFIG)
    live = capsys.readouterr().out
    bench.print_plan(committed, 16, 1, CONFIG)
    assert capsys.readouterr().out == live
    assert "\nall " in live and "snakemake --cores 16 --resources gpu=1" in live


def test_plan_command_prints_choices_and_makespan():
    import subprocess

    proc = subprocess.run([sys.executable, "benchmarks/bench_rounds.py", "--plan", "--cores", "16", "--gpus", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "adult_b10" in out and out.count("  cuda         cuda") == 7 and "  cuda         cpu" in out
    all_line = next(line for line in out.splitlines() if line.startswith("all "))
    runs, jobs, back, alone, ends = all_line.split()[1:]
    assert int(runs) == 1519 and float(back) == 133.2 and float(alone) == float(ends) < float(back)


def test_a_run_writes_rows_of_the_committed_table(bench, tmp_path):
    """--csv: the rows a measurement adds to src/fedmgda/reference/round_times.csv, read back as written."""
    from fedmgda.devices import RoundTime

    rows = bench.run_rows({"adult_b10": (0.2134, 0.001), "fmnist_b10_p0.1": (1.8444, 0.307)}, {"adult_b10": {8: 0.257, 4: 0.2}},
                          "cpu", "CPU (2 threads)", 2, "benchmarks/measurements/x.txt")
    assert rows[:3] == [RoundTime("adult_b10", "adult", "logreg", "cpu", "CPU (2 threads)", 2, 1, 0.2134, 0.001, "benchmarks/measurements/x.txt"),
                        RoundTime("adult_b10", "adult", "logreg", "cpu", "CPU (2 threads)", 2, 4, 0.2, 0.001, "benchmarks/measurements/x.txt"),
                        RoundTime("adult_b10", "adult", "logreg", "cpu", "CPU (2 threads)", 2, 8, 0.257, 0.001, "benchmarks/measurements/x.txt")]
    assert rows[3].model == "cnn_fmnist" and len(rows) == 4
    bench.write_rows(rows, tmp_path / "t.csv")
    text = (tmp_path / "t.csv").read_text()
    assert text.splitlines()[0] == (ROOT / "src/fedmgda/reference/round_times.csv").read_text().splitlines()[0]
    back = parse_round_times(text)
    assert back == [dataclasses.replace(rows[0], s_per_round=0.213), *rows[1:3], dataclasses.replace(rows[3], s_per_round=1.844)]
