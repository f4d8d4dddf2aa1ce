"""benchmarks/bench_rounds.py: --plan, the paper DAG's makespan from the committed round times,
beside the back-to-back projection; --sizes, the settings' clients; --bound and --profile,
each setting's round beside a lower bound of the same steps, and one line on
where a profiled round's time goes."""

import dataclasses
import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch

from fedmgda.devices import parse_round_times, round_times

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "config/config.yaml")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_rounds",
                                                  ROOT / "benchmarks" / "bench_rounds.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_rounds"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_back_to_back_is_the_committed_h200_projection(bench):
    """The table's single-run H200 times of bench_rounds.txt give back the projection it
    printed from them (benchmarks/measurements/h200_device-check_2026-11-27/bench_rounds.txt: the
    6 settings measured before its part 3's time-out, 53.7 h; the other datasets' runs left out)."""
    source = "benchmarks/measurements/h200_device-check_2026-11-27/bench_rounds.txt"
    singles = {r.setting: (r.s_per_round, r.eval_s) for r in round_times() if r.device == "cuda"
               and r.runs == 1 and r.source == source}
    assert len(singles) == 6
    seconds, runs, _ = bench.project_paper(singles, CONFIG)
    printed = (ROOT / source).read_text()
    wall_time = printed.split("projected wall time of the paper DAG")[1].splitlines()[0]
    assert f"{sum(seconds.values()) / 3600:.1f} h" in wall_time
    by_dataset = ", ".join(f"{d} {v / 3600:.1f} h"
                           for d, v in sorted(seconds.items(), key=lambda kv: -kv[1]))
    assert f"by dataset: {by_dataset}" in printed


def test_plan_jobs_devices_and_makespan(bench):
    from makespan import makespan_by_dataset  # beside bench_rounds.py, which puts it on sys.path

    jobs, runs, notes = bench.plan_jobs(round_times(), gpus=1, config=CONFIG)
    devices = {j.dataset: j.device for j in jobs}
    assert devices == {"adult": "cpu", "cifar10": "cuda", "femnist": "cuda", "fmnist": "cuda",
                       "shakespeare": "cuda",
                       "fmnist3": "cpu", "synthetic": "cpu"}
    assert runs["adult"] == 630 and sum(runs.values()) == 1600  # every run has a round time
    assert not any("left out" in n for n in notes)
    plan = makespan_by_dataset(jobs, cores=16, gpus=1)
    gpu_busy = sum(j.seconds for j in jobs if j.device == "cuda")
    assert plan["all"] == pytest.approx(gpu_busy)  # one GPU queue; Adult's CPU packs run beside it
    assert plan["adult"] < 0.01 * plan["all"]


def test_plan_job_length_is_rounds_times_pack_round(bench, tmp_path):
    """One pack of 3 runs: rounds x the pack's interpolated round time + each run's evaluations."""
    rows = parse_round_times("setting,dataset,model,device,machine,threads,runs,s_per_round,"
                             "eval_s,source\n"
                             "adult_b10,adult,logreg,cuda,G,1,1,0.2,0.01,f\n"
                             "adult_b10,adult,logreg,cuda,G,1,8,0.9,0.01,f\n")
    cfg = tmp_path / "c.yaml"
    import yaml

    base = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    base.update(device="cuda",
                settings={"a": {"dataset": "adult", "batch_size": 10, "local_lr": 0.01,
                                "clients_per_round": 2, "rounds": 100}},
                grids={"g": [{"algorithm": "fedavg"}]},
                experiments={"t": {"setting": "a", "grid": "g", "seeds": [1, 2, 3]}},
                resources={"default": {"gpu": 1}, "adult": {"pack": 8}}, tables={}, figures={},
                claims={})
    cfg.write_text(yaml.safe_dump(base))
    jobs, runs, _ = bench.plan_jobs(rows, gpus=1, config=str(cfg))
    assert runs == {"adult": 3} and len(jobs) == 1
    assert jobs[0].device == "cuda"  # device: cuda in the config
    assert jobs[0].seconds == pytest.approx(100 * (0.2 + 2 * 0.1) + 3 * 100 * 0.01)
    # device: auto with only GPU rows: a linear model goes to a CPU core, where nothing is measured
    base["device"] = "auto"
    cfg.write_text(yaml.safe_dump(base))
    jobs, runs, notes = bench.plan_jobs(rows, gpus=1, config=str(cfg))
    assert jobs == [] and notes == ["3 adult runs (cpu) left out: no cpu round time measured for "
                                    "adult"]


def test_plan_times_untracked_runs_by_their_also_row(bench, tmp_path):
    """Runs without track_improvement: their pack's round time x the ratio of the setting's
    --also track_improvement=false row to its single run; without such a row, the tracked time and a
    note."""
    import yaml

    header = "setting,dataset,model,device,machine,threads,runs,s_per_round,eval_s,source,also\n"
    rows = parse_round_times(header + "adult_b10,adult,logreg,cuda,G,1,1,0.2,0.01,f,\n"
                                      "adult_b10,adult,logreg,cuda,G,1,8,0.9,0.01,f,\n"
                                      "adult_b10,adult,logreg,cuda,G,1,1,0.15,0.01,f,"
                                      "track_improvement=false\n"
                                      "adult_b10,adult,logreg,cuda,G,1,1,0.1,0.01,f,tf32=true\n")
    base = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    base.update(device="cuda",
                settings={"a": {"dataset": "adult", "batch_size": 10, "local_lr": 0.01,
                                "clients_per_round": 2, "rounds": 100}},
                grids={"g": [{"algorithm": "fedavg"}]},
                experiments={"t": {"setting": "a", "grid": "g", "seeds": [1, 2, 3],
                                   "run": {"track_improvement": False}}},
                resources={"default": {"gpu": 1}, "adult": {"pack": 8}}, tables={}, figures={},
                claims={})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(base))
    jobs, _, notes = bench.plan_jobs(rows, gpus=1, config=str(cfg))
    # tf32 is not the runs'
    assert jobs[0].seconds == pytest.approx(100 * (0.2 + 2 * 0.1) * 0.15 / 0.2 + 3 * 100 * 0.01)
    assert not any("not measured without" in n for n in notes)
    jobs, _, notes = bench.plan_jobs([r for r in rows if r.also != "track_improvement=false"],
                                     gpus=1, config=str(cfg))
    assert jobs[0].seconds == pytest.approx(100 * (0.2 + 2 * 0.1) + 3 * 100 * 0.01)
    assert any(n.startswith("3 runs do not record the improved fraction") for n in notes)
    assert [r.also for r in rows] == ["", "", "track_improvement=false", "tf32=true"]


def test_a_gpu_measurement_gives_the_plan_its_gpu_rows(bench, capsys):
    """After measuring on a GPU, the plan uses that run's GPU times and the committed CPU times: the
    H200's numbers given back as a measurement print the same plan as --plan."""
    committed = round_times()
    measured = {r.setting: (r.s_per_round, r.eval_s) for r in committed if r.device == "cuda"
                and r.runs == 1}
    packed: dict[str, dict[int, float]] = {}
    for r in (r for r in committed if r.device == "cuda" and r.runs > 1):
        packed.setdefault(r.setting, {})[r.runs] = r.s_per_round
    rows = bench.measured_rows(measured, packed, "NVIDIA H200")
    key = sorted((r.setting, r.device, r.runs, r.s_per_round, r.eval_s) for r in rows)
    assert key == sorted((r.setting, r.device, r.runs, r.s_per_round, r.eval_s) for r in committed)
    bench.print_plan(rows, 16, 1, CONFIG)
    live = capsys.readouterr().out
    bench.print_plan(committed, 16, 1, CONFIG)
    assert capsys.readouterr().out == live
    assert "\nall " in live and "snakemake --cores 16 --resources gpu=1" in live


@pytest.mark.parametrize("gpus", [1, 2])
def test_plan_command_prints_the_committed_plan(gpus):
    """--plan prints what benchmarks/measurements/plan_cores16_gpus<G>.txt holds
    (docs/performance.md renders from them: a change to the config or the round times must remake
    them): the choices, and a makespan below the back-to-back total."""
    import subprocess

    argv = ["benchmarks/bench_rounds.py", "--plan", "--cores", "16", "--gpus", str(gpus)]
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    committed = (ROOT / f"benchmarks/measurements/plan_cores16_gpus{gpus}.txt").read_text()
    assert committed == f"$ python {' '.join(argv)}\n" + out, \
        "remake the file: the command's output changed"
    assert ("adult_b10" in out and out.count("  cuda         cuda") == 7
            and "  cuda         cpu" in out)
    all_line = next(line for line in out.splitlines() if line.startswith("all "))
    runs, jobs, back, alone, ends = all_line.split()[1:]
    assert float(alone) == float(ends) < float(back)


def test_a_run_writes_rows_of_the_committed_table(bench, tmp_path):
    """--csv: the rows a measurement adds to src/fedmgda/reference/round_times.csv, read back as
    written."""
    from fedmgda.devices import RoundTime

    rows = bench.run_rows({"adult_b10": (0.2134, 0.001), "fmnist_b10_p0.1": (1.8444, 0.307)},
                          {"adult_b10": {8: 0.257, 4: 0.2}},
                          "cpu", "CPU (2 threads)", 2, "benchmarks/measurements/x.txt",
                          {"fmnist_b10_p0.1": {"tf32=true": 1.5}})
    assert rows[:3] == [RoundTime("adult_b10", "adult", "logreg", "cpu", "CPU (2 threads)", 2, 1,
                                  0.2134, 0.001, "benchmarks/measurements/x.txt"),
                        RoundTime("adult_b10", "adult", "logreg", "cpu", "CPU (2 threads)", 2, 4,
                                  0.2, 0.001, "benchmarks/measurements/x.txt"),
                        RoundTime("adult_b10", "adult", "logreg", "cpu", "CPU (2 threads)", 2, 8,
                                  0.257, 0.001, "benchmarks/measurements/x.txt")]
    assert (rows[3].model == "cnn_fmnist" and len(rows) == 5
            and (rows[4].also, rows[4].runs, rows[4].s_per_round) == ("tf32=true", 1, 1.5))
    bench.write_rows(rows, tmp_path / "t.csv")
    text = (tmp_path / "t.csv").read_text()
    assert (text.splitlines()[0]
            == (ROOT / "src/fedmgda/reference/round_times.csv").read_text().splitlines()[0])
    back = parse_round_times(text)
    assert back == [dataclasses.replace(rows[0], s_per_round=0.213), *rows[1:3],
                    dataclasses.replace(rows[3], s_per_round=1.844), rows[4]]


def test_bound_shape_is_the_longest_clients_steps_on_the_rounds_batch(bench):
    by_name = {s.name: s for s in bench.SETTINGS}
    # 400 samples / b 10; 10 clients x 10
    assert bench.bound_shape(by_name["cifar10_b10_p0.1"]) == (40, 100, 4000)
    assert bench.bound_shape(by_name["cifar10_b10_p0.2"]) == (40, 200, 8000)
    assert bench.bound_shape(by_name["shakespeare_b10_equal"]) == (300, 310, 93000)
    # the longest role: 28 698 samples
    assert bench.bound_shape(by_name["shakespeare_b10"]) == (2870, 310, 92969)
    # a full batch: one step of every sample
    assert bench.bound_shape(by_name["cifar10_b400_p0.1"]) == (1, 4000, 4000)
    femnist = by_name["femnist_b20"]
    mean = round(sum(femnist.train_sizes) / len(femnist.train_sizes))
    assert bench.bound_shape(femnist) == (-(-max(femnist.train_sizes) // 20), 200, 10 * mean)


def test_the_bound_step_is_an_sgd_step_that_learns(bench):
    """The timed step really trains: on one fixed batch its loss falls."""
    setting = next(s for s in bench.SETTINGS if s.name == "fmnist_b10_p0.1")
    step, inputs, _ = bench.bound_step(setting, 20, torch.device("cpu"))
    losses = [step(*inputs)[0].item() for _ in range(30)]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.1  # 2.3 -> 2.0 (dropout: not monotone)


def test_round_bound_on_the_cpu_is_eager_and_steps_times_step(bench):
    setting = next(s for s in bench.SETTINGS if s.name == "adult_b10")
    bound = bench.round_bound(setting, torch.device("cpu"), reps=2)
    assert (bound.steps, bound.batch, bound.timed_as) == (2572, 20, "eager")
    assert (bound.step_s > 0 and bound.losses_s > 0
            and bound.seconds == pytest.approx(2572 * bound.step_s + bound.losses_s))


def test_a_loss_pass_covers_every_sample_in_chunks(bench):
    """10 samples in chunks of 4: the summed loss of the chunk's samples twice and of its first
    two once (the chunk's samples reused), the model in eval mode (no dropout)."""
    setting = next(s for s in bench.SETTINGS if s.name == "adult_b10")
    _, _, model = bench.bound_step(setting, 20, torch.device("cpu"))
    torch.manual_seed(3)
    total = bench.loss_pass(setting, model, 10, torch.device("cpu"), chunk=4)()
    torch.manual_seed(3)
    x, y = bench.random_batch(setting, 4, torch.device("cpu"))
    per_sample = torch.nn.functional.nll_loss(model.eval()(x), y, reduction="none")
    assert total.item() == pytest.approx((2 * per_sample.sum() + per_sample[:2].sum()).item(),
                                         rel=1e-5)


def test_print_bounds_counts_the_settings_within_3x(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "round_bound",
                        lambda setting, device: bench.Bound(10, 100, 0.009, 0.01, "CUDA graph"))
    bench.print_bounds({"cifar10_b10_p0.1": (0.25, 0.0), "fmnist_b10_p0.1": (0.35, 0.0)},
                       torch.device("cpu"))
    out = capsys.readouterr().out
    assert "cifar10_b10_p0.1" in out and "2.5x" in out and "3.5x" in out
    assert out.rstrip().endswith("within 3x of the bound: 1 of 2 settings (cifar10_b10_p0.1)")


def test_profile_shares_splits_kernels_copies_launches_and_syncs(bench):
    events = [("volta_sgemm", True, 300.0), ("void elementwise_kernel", True, 100.0),
              ("Memcpy HtoD (Pageable -> Device)", True, 50.0),
              ("cudaLaunchKernel", False, 5.0), ("cudaLaunchKernel", False, 5.0),
              ("cudaGraphLaunch", False, 20.0),
              ("cudaStreamSynchronize", False, 1000.0), ("cudaMemcpyAsync", False, 200.0),
              ("aten::mm", False, 40.0)]
    line = bench.profile_shares(events, wall=0.004)
    assert line == ("round 0.004 s (profiled): GPU kernels 0.000 s (10 %), copies 0.000 s; 2 "
                    "kernel launches, 1 graph launches; 2 host syncs or copies (0.001 s)")
    assert bench.profile_shares([("aten::mm", False, 40.0)],
                                wall=0.5) == "round 0.500 s, all on the CPU (no GPU events)"


def test_shakespeare_sizes_have_the_q_ffl_papers_statistics(bench):
    """31 roles; train + test (train / 0.8) with q-FFL Table 4's mean 3 749 and stdev 6 912 per
    device; 92 972 training samples (FedMGDA+ Table 1: 92 959)."""
    import statistics

    sizes = bench.shakespeare_sizes()
    totals = [s / 0.8 for s in sizes]
    assert len(sizes) == 31 and abs(sum(sizes) - 92_959) < 50
    assert (statistics.fmean(totals) == pytest.approx(3749, rel=1e-3)
            and statistics.pstdev(totals) == pytest.approx(6912, rel=1e-3))
    assert max(sizes) == 28_698 and min(sizes) >= 1


def test_a_stand_in_setting_is_a_labelled_lower_bound_until_the_real_one_is_measured(bench):
    """The paper's Shakespeare runs match the real-size setting when it is measured, else the
    equal-size one, whose note says the projection is a lower bound."""
    cfg = {"dataset": "shakespeare", "batch_size": 10, "participation": 1.0}
    chosen, per_round, note = bench.match_setting(cfg, {"shakespeare_b10", "shakespeare_b10_equal"})
    assert (chosen.name, per_round, note) == ("shakespeare_b10", 31, None)
    chosen, _, note = bench.match_setting(cfg, {"shakespeare_b10_equal"})
    assert (chosen.name == "shakespeare_b10_equal"
            and note.startswith("shakespeare: a lower bound, shakespeare_b10_equal stands in ("))


def test_sizes_print_the_committed_file(bench, capsys):
    """--sizes (no measurement) prints what benchmarks/measurements/setting_sizes_2026-11-27.txt
    holds, which docs/performance.md renders from: the file cannot go stale."""
    bench.print_sizes()
    out = capsys.readouterr().out
    committed = (ROOT / "benchmarks/measurements/setting_sizes_2026-11-27.txt").read_text()
    assert committed == "$ python benchmarks/bench_rounds.py --sizes\n" + out
    line = next(row for row in out.splitlines() if row.startswith("shakespeare_b10 "))
    assert line.split()[-2:] == ["2870", "5763"]  # the longest role's steps; the size groups' sum


def test_match_setting_by_users_and_sizes(bench):
    """A run's clients per round come from its dataset's users (q-FFL's 3-device F-MNIST takes
    part whole: 3, not 0.1 x 100), and Synthetic's runs are timed with their own device sizes."""
    names = {s.name for s in bench.SETTINGS}
    setting, per_round, note = bench.match_setting({"dataset": "fmnist3", "batch_size": "full",
                                                    "participation": 1.0}, names)
    assert (setting.name, per_round, note) == ("fmnist3_full", 3, None)
    for sizes, expected in (("table4", "synthetic_b10"), ("script", "synthetic_b10_script")):
        cfg = {"dataset": "synthetic", "batch_size": 10, "clients_per_round": 10,
               "dataset_options": {"sizes": sizes}}
        assert bench.match_setting(cfg, names)[0].name == expected
    script, table4 = (next(s for s in bench.SETTINGS if s.name == n)
                      for n in ("synthetic_b10_script", "synthetic_b10"))
    assert (max(script.train_sizes) > 10 * max(table4.train_sizes) // 2
            and script.sampling == table4.sampling == "size")


def test_flops_print_the_committed_file(bench, capsys):
    """--flops (no measurement) prints what benchmarks/measurements/paper_flops.txt holds, which
    docs/performance.md renders from: each setting's work and the rate its committed round times
    reach, the paper DAG's work over all 1 600 runs, and the rate 8 h would take."""
    bench.print_flops(round_times(), CONFIG)
    out = capsys.readouterr().out
    committed = (ROOT / "benchmarks/measurements/paper_flops.txt").read_text()
    assert committed == "$ python benchmarks/bench_rounds.py --flops\n" + out, \
        "remake the file: the command's output changed"
    assert "paper DAG (1600 runs of the config)" in out
    work, counted = bench.paper_work(CONFIG)
    total = sum(w.total for w in work.values())
    assert counted == 1600 and f"8 h takes {total / 8 / 3600 / 1e12:.1f} TFLOP/s" in out
    cifar = next(line for line in out.splitlines() if line.startswith("cifar10_b10_p0.1 "))
    setting = next(s for s in bench.SETTINGS if s.name == "cifar10_b10_p0.1")
    # H200, 1 run
    assert float(cifar.split()[4]) == pytest.approx(bench.bench_round_flops(setting) / 0.093 / 1e12,
                                                    abs=0.006)


def test_round_samples_by_participation_and_sampling(bench):
    setting = next(s for s in bench.SETTINGS if s.name == "synthetic_b10")
    sizes = setting.train_sizes
    assert bench.round_samples(setting) == pytest.approx(10 * sum(n * n for n in sizes)
                                                         / sum(sizes))
    uniform = dataclasses.replace(setting, sampling="uniform")
    assert bench.round_samples(uniform) == pytest.approx(10 * sum(sizes) / len(sizes))
    assert bench.round_samples(uniform) < bench.round_samples(setting)
    assert bench.round_samples(setting, per_round=100) == sum(sizes)


def test_also_takes_run_config_fields(bench):
    """--also KEY=VALUE: a run-config field and its YAML value; anything else stops the benchmark in
    one line."""
    assert bench.parse_override("deterministic=false") == ("deterministic", False)
    assert bench.parse_override("tf32=true") == ("tf32", True)
    with pytest.raises(SystemExit, match="--also takes run-config fields as KEY=VALUE"):
        bench.parse_override("bogus=1")
    with pytest.raises(SystemExit, match="got 'tf32'"):
        bench.parse_override("tf32")


def test_csv_rows_are_written_after_each_setting(bench, monkeypatch, tmp_path):
    """--csv is rewritten after every setting, so a benchmark stopped by its time limit (the device
    check's part 3) keeps the rows of the settings it measured."""
    calls = []

    def fake_time_rounds(setting, data, batched, rounds, device, pack=1, max_padding=None,
                         overrides=None, warm_up=None):
        calls.append(setting.name)
        if setting.name == "adult_b10":  # measured after F-MNIST (--only's order)
            raise KeyboardInterrupt  # stands for the kill at the time limit
        return 0.5 * pack, 0.01

    monkeypatch.setattr(bench, "time_rounds", fake_time_rounds)
    monkeypatch.setattr(bench, "random_dataset", lambda setting, fraction: None)
    csv = tmp_path / "rows.csv"
    monkeypatch.setattr(sys, "argv",
                        ["bench_rounds.py", "--device", "cpu", "--only", "fmnist_b10_p0.1",
                         "adult_b10",
                                      "--pack", "4", "--no-sequential", "--csv", str(csv),
                         "--source", "x.txt"])
    with pytest.raises(KeyboardInterrupt):
        bench.main()
    rows = parse_round_times(csv.read_text())
    assert [(r.setting, r.runs, r.s_per_round)
            for r in rows] == [("fmnist_b10_p0.1", 1, 0.5), ("fmnist_b10_p0.1", 4, 2.0)]
    assert calls[-1] == "adult_b10"


def test_time_limit_skips_the_stages_it_has_no_time_for(bench, monkeypatch, tmp_path, capsys):
    """--time-limit: a setting starts only before 60 % of the limit, a bound before 80 %, a profile
    before 95 %; what is skipped is said, and what was measured is kept (rows, projection)."""
    clock = [0.0]
    monkeypatch.setattr(bench.time, "monotonic", lambda: clock[0])

    def fake_time_rounds(setting, data, batched, rounds, device, pack=1, max_padding=None,
                         overrides=None, warm_up=None):
        clock[0] += 35.0  # each setting's timing takes 35 s of the 100
        return 0.5, 0.01

    bounds, profiles = [], []

    def fake_bound(ends_at: float):
        def round_bound(setting, device):
            bounds.append(setting.name)
            clock[0] = ends_at
            return types.SimpleNamespace(seconds=0.1, steps=1, batch=1, step_s=0.1,
                                         timed_as="graph", losses_s=0.0)
        return round_bound

    monkeypatch.setattr(bench, "time_rounds", fake_time_rounds)
    monkeypatch.setattr(bench, "random_dataset", lambda setting, fraction: None)
    monkeypatch.setattr(bench, "print_projection", lambda *a, **k: None)
    monkeypatch.setattr(bench, "print_work_floor", lambda *a, **k: None)
    monkeypatch.setattr(bench, "round_bound", fake_bound(79.0))
    monkeypatch.setattr(bench, "profile_round",
                        lambda setting, data, device: profiles.append(setting.name))
    csv = tmp_path / "rows.csv"
    monkeypatch.setattr(sys, "argv",
                        ["bench_rounds.py", "--device", "cpu", "--only", "cifar10_b10_p0.1",
                         "fmnist_b10_p0.1", "adult_b10",
                                      "--no-sequential", "--bound", "--profile", "--time-limit",
                         "100", "--csv", str(csv), "--source", "x"])
    bench.main()
    out = capsys.readouterr().out
    # settings at 0 s and 35 s start; the third, at 70 s, does not
    assert [r.setting
            for r in parse_round_times(csv.read_text())] == ["cifar10_b10_p0.1", "fmnist_b10_p0.1"]
    assert "time limit: adult_b10 and the settings after it skipped (70 s used of 100)" in out
    # the first bound starts at 70 s and ends at 79 s, before 80 s: the second starts too
    assert bounds == ["cifar10_b10_p0.1",
                      "fmnist_b10_p0.1"] and profiles == ["cifar10_b10_p0.1", "fmnist_b10_p0.1"]
    clock[0] = 0.0
    bounds.clear()
    profiles.clear()
    monkeypatch.setattr(bench, "round_bound", fake_bound(96.0))
    bench.main()
    out = capsys.readouterr().out
    assert bounds == ["cifar10_b10_p0.1"] and profiles == []
    assert "time limit: the bounds of fmnist_b10_p0.1 and the settings after it skipped" in out
    assert "time limit: the profiles of cifar10_b10_p0.1 and the settings after it skipped" in out


def test_time_limit_stops_a_setting_between_its_packs_and_variants(bench, monkeypatch, tmp_path,
                                                                   capsys):
    """Within a setting too: an --also variant starts only before 60 % of the limit, and a pack of
    k runs only when about k rounds per round (its two warm-ups and --rounds) end before it (a
    pack that overran its limit would lose the setting's rows). What was measured is kept."""
    clock = [0.0]
    monkeypatch.setattr(bench.time, "monotonic", lambda: clock[0])
    timed = []

    def fake_time_rounds(setting, data, batched, rounds, device, pack=1, max_padding=None,
                         overrides=None, warm_up=None):
        timed.append((pack, tuple(overrides or ())))
        clock[0] += 10.0 * pack  # 10 s a run: 4 rounds of 2.5 s
        return 2.5 * pack, 0.01

    monkeypatch.setattr(bench, "time_rounds", fake_time_rounds)
    monkeypatch.setattr(bench, "random_dataset", lambda setting, fraction: None)
    monkeypatch.setattr(bench, "print_projection", lambda *a, **k: None)
    csv = tmp_path / "rows.csv"
    monkeypatch.setattr(sys, "argv",
                        ["bench_rounds.py", "--device", "cpu", "--only", "fmnist_b10_p0.1",
                         "--no-sequential",
                                      "--pack", "2", "4", "--also", "tf32=true",
                         "deterministic=false", "track_improvement=false",
                                      "--time-limit", "105", "--csv", str(csv), "--source", "x"])
    bench.main()
    out = capsys.readouterr().out
    # variants at 0, 10 and 20 s, the default at 30 s; 2 packed need 2 x 2.5 x 4 = 20 s: 40 + 20 <
    # 63
    # (60 % of 105); 4 packed, at 60 s, would end at 100 s
    assert timed == [(1, ("tf32",)), (1, ("deterministic",)), (1, ("track_improvement",)), (1, ()),
                     (2, ())]
    assert "time limit: fmnist_b10_p0.1 4 runs packed skipped (60 s used of 105)" in out
    rows = parse_round_times(csv.read_text())
    assert [r.runs for r in rows if not r.also] == [1, 2] and len([r for r in rows if r.also]) == 3
    clock[0] = 0.0
    timed.clear()
    monkeypatch.setattr(sys, "argv",
                        sys.argv[:-6] + ["--time-limit", "30", "--csv", str(csv), "--source", "x"])
    bench.main()  # 60 % of 30: 18 s
    assert ("time limit: fmnist_b10_p0.1 with track_improvement=false skipped (20 s used of 30)"
            in capsys.readouterr().out)
    assert timed == [(1, ("tf32",)), (1, ("deterministic",)), (1, ())]
    # a measured warm-up counts too: 15 s (Shakespeare's captures) make 2 packed need 15 + 10 s: 40
    # + 25 > 63
    clock[0] = 0.0
    timed.clear()

    def slow_warm_up(*args, warm_up=None, **kwargs):
        if warm_up is not None:
            warm_up.append(15.0)
        return fake_time_rounds(*args, **kwargs)

    monkeypatch.setattr(bench, "time_rounds", slow_warm_up)
    monkeypatch.setattr(sys, "argv",
                        sys.argv[:-6] + ["--time-limit", "105", "--csv", str(csv), "--source", "x"])
    bench.main()
    assert ("time limit: fmnist_b10_p0.1 2 runs packed skipped (40 s used of 105)"
            in capsys.readouterr().out)


def test_only_measures_in_its_order_and_refuses_unknown_names(bench, monkeypatch, capsys):
    """--only names the settings in the order they are measured (first what a time limit must
    not skip); a name that is no setting stops the benchmark in one line."""
    assert [s.name
            for s in bench.chosen_settings(["adult_b10", "shakespeare_b10",
                                            "adult_b10"])] == ["adult_b10", "shakespeare_b10"]
    assert not any(s.stand_in for s in bench.chosen_settings(None))
    assert "shakespeare_b10_equal" in {s.name for s in bench.SETTINGS}
    monkeypatch.setattr(sys, "argv", ["bench_rounds.py", "--only", "fmnist_b10_p0.1", "shakespear"])
    with pytest.raises(SystemExit):
        bench.parse_args()
    assert ("--only: unknown setting(s) shakespear; known: cifar10_b10_p0.1"
            in capsys.readouterr().err)


def test_time_rounds_reports_its_untimed_warm_up(bench):
    """time_rounds(..., warm_up=[]) appends what the untimed warm-up rounds took (a run pays them
    once: first calls and, on a GPU, the CUDA-graph captures), which the benchmark prints per
    setting."""
    setting = next(s for s in bench.SETTINGS if s.name == "adult_b10")
    warm_up: list[float] = []
    seconds, eval_s = bench.time_rounds(setting, bench.random_dataset(setting, 0.005), batched=True,
                                        rounds=1, device="cpu", warm_up=warm_up)
    assert len(warm_up) == 1 and warm_up[0] > 0 and seconds > 0 and eval_s >= 0


def test_a_stand_in_says_how_far_below_its_dataset_it_may_be(bench):
    """Shakespeare's equal-size stand-in: the note gives the real sizes' sequential steps (size
    groups one after another) over the stand-in's, the factor if a step cost the same at any
    width."""
    settings = {s.name: s for s in bench.SETTINGS}
    real, stand_in = settings["shakespeare_b10"], settings["shakespeare_b10_equal"]
    # 3 000 samples, b = 10, one group
    assert bench.longest_steps(stand_in) == bench.grouped_steps(stand_in) == 300
    assert bench.longest_steps(real) < bench.grouped_steps(real)  # unequal sizes: several groups
    # 10 of 100 take part: the longest client's
    assert bench.grouped_steps(settings["cifar10_b10_p0.1"]) == 40
    _, _, note = bench.match_setting({"dataset": "shakespeare", "batch_size": 10,
                                      "participation": 1.0}, {"shakespeare_b10_equal"})
    ratio = bench.grouped_steps(real) / bench.grouped_steps(stand_in)
    assert (f"takes {bench.grouped_steps(real)} sequential local steps" in note
            and f"up to {ratio:.1f}x the stand-in's (not measured)" in note)
    _, _, measured = bench.match_setting({"dataset": "shakespeare", "batch_size": 10,
                                          "participation": 1.0}, {"shakespeare_b10"})
    assert measured is None  # the real setting measured: no stand-in, no note


def test_also_skips_a_change_the_setting_ignores(bench):
    """--also conv=im2col is timed for the CNN settings only; other changes for every setting."""
    timed = {s.name for s in bench.SETTINGS if bench.applies(s, "conv=im2col")}
    assert {"cifar10_b10_p0.1", "fmnist_b10_p0.1", "femnist_b20"} <= timed
    assert not timed & {"shakespeare_b10", "adult_b10", "synthetic_b10"}
    assert all(bench.applies(s, "tf32=true") for s in bench.SETTINGS)
