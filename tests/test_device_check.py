"""scripts/device_check.py (make device-check): its dry mode runs every part on the CPU, so the
one-shot GPU check cannot rot between the rare sessions that have a GPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "device_check.py"
PARTS = ("env", "same_results", "pytest_cuda", "bench_rounds", "fairness")


@pytest.mark.slow
def test_the_dry_mode_runs_every_part(tmp_path):
    """Every part listed in summary.md with a status, all ok; the fairness runs packed as the
    workflow's run folders. An empty --raw-dir: the offline digits data stand in for F-MNIST (the
    same wherever the test runs, and quick)."""
    out, raw = tmp_path / "out", tmp_path / "raw"
    raw.mkdir()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--out", str(out), "--work", str(tmp_path / "work"),
                           "--raw-dir", str(raw)], cwd=REPO, capture_output=True, text=True, timeout=600)
    summary = (out / "summary.md").read_text()
    status = {}
    for part in PARTS:
        row = re.search(rf"^\| \d {part} \| (\w+) \|", summary, re.M)
        assert row, f"summary.md lacks part {part}:\n{summary}"
        status[part] = row.group(1)
    assert status == dict.fromkeys(PARTS, "ok"), f"{summary}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0
    bench = (out / "bench_rounds.txt").read_text()  # issue 42: the round's lower bound and its profile
    assert "within 3x of the bound:" in bench and "adult_b10: round " in bench
    limit = float(re.search(r"^\| \d bench_rounds \| \w+ \| \d+ \| (\d+) \|", summary, re.M).group(1))
    given = re.search(r"^\$ .*bench_rounds\.py .* --time-limit (\d+)$", bench, re.M)  # the part's limit less the LSTM's time and BENCH_MARGIN
    lstm_wall = float(re.search(r"^\[device_check\] .*? after ([\d.]+) s", bench, re.M).group(1))  # bench_lstm's, first
    assert given and abs(int(given.group(1)) - max(1.0, limit - lstm_wall - 15)) <= 1  # both printed rounded
    assert "speed-up of the written-out backward:" in bench
    assert re.search(r"^\| \d bench_rounds \| ok \|.* of 1 within 3x of their lower bound", summary, re.M)
    assert "with deterministic=false:" in bench and "work floor: float32 products" in bench and re.search(r"counted work \(\d+ PFLOP\) takes [\d.]+ h at the measured", summary)
    stamp = re.search(r"^environment stamp \(cpu\): (.*)$", (out / "same_results.txt").read_text(), re.M)
    assert stamp and json.loads(stamp.group(1))["device"] == "cpu"  # this machine's stamp, for the other machine's comparison
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(re.fullmatch(r"[\w.-]+", f) for f in files), files  # what the device gives back
    rows = (out / "round_times_rows.csv").read_text().splitlines()  # part 3's rows for the committed table
    assert rows[0] == (REPO / "src/fedmgda/reference/round_times.csv").read_text().splitlines()[0]
    assert [r.split(",")[6] for r in rows[1:]] == ["1", "2", "3", "1"] and all(",bench_rounds.txt," in r for r in rows[1:])
    assert [r.split(",")[-1] for r in rows[1:]] == ["", "", "", "deterministic=false"]  # the --also row
    with tarfile.open(out / "fairness_runs.tar.gz") as tar:
        names = tar.getnames()
    plan = json.loads((tmp_path / "work" / "plan.json").read_text())
    assert len(plan["runs"]) == 4  # fmnist_core's four algorithms, one seed
    for run in plan["runs"]:
        for name in ("run.yaml", "metrics.csv", "per_user.csv", "per_user_final.csv", "summary.json", "train.log"):
            assert f"runs/{run['run']}/{name}" in names


def test_the_real_mode_refuses_a_machine_without_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device" in proc.stderr
    assert not (tmp_path / "out").exists()


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_several_experiments_share_their_runs_and_train_apart_what_cannot_pack(tmp_path):
    """--experiment a,b: the runs both show are planned once, in the grids' order; FedProx and
    MGDA-Prox (a proximal term) get packs of their own, every other run of a seed one pack."""
    import argparse

    check = load_script()
    assert check.experiment_names(" fmnist_table8, fmnist_fig6 ,") == ["fmnist_table8", "fmnist_fig6"]
    raw = tmp_path / "raw"
    raw.mkdir()
    args = argparse.Namespace(config="config/fmnist.yaml", experiment="fmnist_table8,fmnist_fig6", rounds=2, seeds=[1, 5000],
                              device="cpu", raw_dir=str(raw), dry=True)
    registry, by_seed, _ = check.fairness_registry(args)
    keys = by_seed[1]
    assert len(keys) == len(set(keys)) == 7 + 4  # Figure 6's epsilon = 1 is Table 8's FedMGDA, planned once
    assert not set(keys) & set(by_seed[5000])
    groups = check.pack_groups(keys, registry)
    alone = sorted(key.split("/")[1] for group in groups if len(group) == 1 for key in group)
    assert alone == ["fedprox", "mgda_prox"] and len(groups) == 3 and sum(map(len, groups)) == len(keys)
    with pytest.raises(SystemExit, match="has no experiment nope"):
        check.fairness_registry(argparse.Namespace(**{**vars(args), "experiment": "fmnist_core,nope"}))


def test_projection_note_gives_back_to_back_and_the_plan():
    module = load_script()
    text = ("projected wall time of the paper DAG (1599 training runs, batched path, one device, runs back to back): 133.2 h\n"
            "plan: the paper DAG's training jobs on 1 GPU(s) and 16 CPU cores (snakemake --cores 16 --resources gpu=1), ...\n"
            "dataset       runs  jobs  device  back to back h  plan alone h  ends in plan h\n"
            "adult          630    11     cpu            18.8          0.04            0.04\n"
            "all           1519   163                   133.2         92.18           92.18\n")
    assert module.projection_note(text) == ("; paper DAG (1599 runs) projected 133.2 h back to back, "
                                            "92.18 h as planned on 1 GPU(s) and 16 cores (1519 runs)")
    assert module.projection_note(text.split("plan:")[0]) == "; paper DAG (1599 runs) projected 133.2 h back to back"
    assert module.projection_note("") == "; no projection"


# ----------------------------------------------------------------- each part, its subprocess stood in for
@pytest.fixture
def check(tmp_path):
    """A dry check on tmp_path, built as ``prepare`` builds it."""
    import argparse

    module = load_script()
    out = tmp_path / "out"
    out.mkdir()
    args = argparse.Namespace(raw_dir="resources/raw", pytest_k=None, bench_args=None, config="config/fmnist.yaml",
                              experiment="fmnist_core")
    return module, module.Check(args, list(PARTS), out, tmp_path / "work", None, True, budget=600.0, rounds=2, seeds=[1],
                                summary=module.Summary(out, "dry"), env={})


def standing_in(module, monkeypatch, *answers):
    """``run_logged`` answering (exit code, output) in turn, each output written to the part's log."""
    calls, answers = [], list(answers)

    def run_logged(argv, limit, log, env=None):
        calls.append(argv)
        rc, text = answers.pop(0)
        with open(log, "a") as fh:
            fh.write(text)
        return rc, 1.0, text

    monkeypatch.setattr(module, "run_logged", run_logged)
    return calls


def test_part_env_reads_the_gpu_and_what_is_missing(check, monkeypatch):
    module, c = check
    text = "torch 2.11.0; CUDA 12.8; cuDNN 91000; CUDA available: True\nGPU: NVIDIA H100, 79.2 GiB\nMISSING for part fairness: cvxopt\n"
    calls = standing_in(module, monkeypatch, (1, text))
    module.part_env(c)
    part = c.summary.parts["env"]
    assert calls[0][-2:] == ["--child", "env"] and part.limit == 30 and part.files == ["env.txt"]
    assert (part.status, part.note) == ("failed", "NVIDIA H100; torch 2.11.0, CUDA 12.8; missing for fairness: cvxopt")
    standing_in(module, monkeypatch, (None, ""))
    module.part_env(c)
    assert (part.status, part.note) == ("timeout", "no GPU") and (c.out / "env.txt").read_text() == ""  # the log begun afresh


def test_part_same_results_reads_the_tally_and_the_stamp(check, monkeypatch):
    module, c = check
    stamp = {"cpu": "Xeon", "isa": "x86-64-v4", "numpy": "2.4.6", "torch": "2.11.0", "device": "cpu"}
    text = f"environment stamp (cpu): {json.dumps(stamp)}\n===== 5 passed, 1 skipped in 12.3s =====\n"
    calls = standing_in(module, monkeypatch, (0, text))
    module.part_same_results(c)
    assert calls[0][-4:] == ["--child", "same_results", "--raw-dir", "resources/raw"]
    part = c.summary.parts["same_results"]
    assert (part.status, part.note) == ("ok", "5 passed, 1 skipped; Xeon (x86-64-v4), numpy 2.4.6, torch 2.11.0")


def junit(path: Path, cases: dict[str, str]) -> None:
    """A pytest JUnit report: {test name: passed | skipped | failure}."""
    body = "".join(f'<testcase classname="tests.test_batched" name="{name}">' + ("" if kind == "passed" else f"<{kind}/>")
                   + "</testcase>" for name, kind in cases.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')


def test_part_pytest_cuda_requires_the_cuda_tests_to_run_on_a_gpu(check, monkeypatch):
    module, c = check
    report = c.work / "pytest_cuda.xml"

    def pytest_writing(cases, rc):
        def run_logged(argv, limit, log, env=None):
            assert f"--junitxml={report}" in argv and argv[argv.index("-k") + 1] == ("cuda" if c.dry else "cuda or dropout")
            junit(report, cases)
            return rc, 1.0, ""
        monkeypatch.setattr(module, "run_logged", run_logged)

    part = c.summary.parts["pytest_cuda"]
    pytest_writing({"test_cuda_graphs": "skipped", "test_cpu": "passed"}, 0)
    module.part_pytest_cuda(c)  # dry: the CUDA tests collected, skipped on the CPU
    assert part.status == "ok" and "1 CUDA tests collected" in part.note
    c.dry = False
    module.part_pytest_cuda(c)  # on a GPU a skipped CUDA test fails the part
    assert part.status == "failed" and "1 CUDA tests skipped on a CUDA machine" in part.note
    pytest_writing({"test_cuda_graphs": "passed"}, 1)
    module.part_pytest_cuda(c)
    assert part.status == "failed" and part.note.startswith("pytest exit 1; 1 passed")
    pytest_writing({"test_cuda_graphs": "failure"}, 1)
    module.part_pytest_cuda(c)
    assert part.status == "failed" and part.note.endswith("failed: test_cuda_graphs")


def test_part_bench_rounds_projects_from_what_was_measured_before_a_time_out(check, monkeypatch):
    module, c = check
    lstm = ("version       ms a step  operations  CUDA kernels\nautograd         294.46        5532             -\n"
            "written-out      199.24        2438             -\nbound             85.92          56             -\n"
            "speed-up of the written-out backward: 1.48x\nwritten-out step / bound: 2.32x\n")
    measured = ("name  clients  ...\nfmnist_b10_p0.1  10  all  0.500  0.100  5.0x  0.2  0.050\n"
                "  8 runs packed: 0.300 s per round\n")
    projected = "projected wall time of the paper DAG (1599 training runs, from 1 settings): 12.5 h\n"
    calls = standing_in(module, monkeypatch, (0, lstm), (None, measured), (0, projected))
    module.part_bench_rounds(c)
    assert calls[0][1:4] == ["benchmarks/bench_lstm.py", "--device", "cpu"]
    assert calls[1][1:4] == ["benchmarks/bench_rounds.py", "--device", "cpu"] and calls[2][-3:-1] == ["project", "--measured"]
    assert json.loads(calls[2][-1]) == {"fmnist_b10_p0.1": {"batched": 0.1, "eval": 0.05, "pack": {"8": 0.3}}}
    part = c.summary.parts["bench_rounds"]
    assert part.status == "timeout" and part.note == ("1 settings measured; paper DAG (1599 runs) projected 12.5 h back to back; "
                                                      "F-MNIST s/round: 1 run 0.100, 8 packed 0.300; "
                                                      "LSTM step: written-out backward 199.24 ms, autograd 294.46 ms (1.48x), "
                                                      "bound 85.92 ms (2.32x)")
    assert part.wall == 2.0  # both benchmarks' (1 s each here)
    given = calls[1][calls[1].index("--time-limit") + 1]
    assert float(given) == round(part.limit - 1.0 - module.BENCH_MARGIN)  # the part's limit less the LSTM's time


def test_lstm_note_says_when_the_step_was_not_timed():
    module = load_script()
    assert module.lstm_note("autograd   12.0  100  -\n") == "; LSTM step not timed"


def test_lstm_note_gives_the_wavefront_candidates_time_and_its_speed_up_at_each_width():
    module = load_script()
    text = ("autograd         294.46        5532             -\nwritten-out      199.24        2438             -\n"
            "wavefront        150.00        1336             -\nbound             85.92          56             -\n"
            "speed-up of the written-out backward: 1.48x\nspeed-up of the wavefront over the written-out: 1.33x\n"
            "written-out step / bound: 2.32x\n"
            "1 clients: written-out 90.00 ms, wavefront 50.00 ms, bound 20.00 ms; wavefront speed-up 1.80x\n"
            "248 clients: written-out 900.00 ms, wavefront 1200.00 ms, bound 99.00 ms; wavefront speed-up 0.75x\n")
    assert module.lstm_note(text) == ("; LSTM step: written-out backward 199.24 ms, autograd 294.46 ms (1.48x), bound 85.92 ms "
                                      "(2.32x), wavefront 150.00 ms; wavefront speed-up at 1 clients 1.80x, 248 clients 0.75x")


def test_bench_measurements_read_untimed_sequential_columns_and_every_pack_size(check):
    """--no-sequential prints '-' for the sequential path and its speed-up; every --pack size is read."""
    module, _ = check
    text = ("cifar10_b10_p0.1            10          all                   -            0.093         -            10.726   0.057\n"
            "                       4 runs packed: 0.300 s per round of all 4 (throughput 1.24x that of the runs one after another)\n"
            "                       16 runs packed: 1.100 s per round of all 16 (throughput 1.35x that of the runs one after another)\n"
            "shakespeare_b10             31  0.01 (x1/f)            1000.753           12.760    78.43x             0.078   0.140\n")
    assert module.bench_measurements(text) == {"cifar10_b10_p0.1": {"batched": 0.093, "eval": 0.057, "pack": {4: 0.3, 16: 1.1}},
                                               "shakespeare_b10": {"batched": 12.76, "eval": 0.14, "pack": {}}}
    floor = "the paper DAG's counted work (2062 PFLOP, 1600 runs) at that rate: 8.60 h\n"
    note = module.bench_note(module.bench_measurements(text), text + "within 3x of the bound: 1 of 2 settings (cifar10_b10_p0.1)\n" + floor)
    assert note == ("2 settings measured; no projection; 1 of 2 within 3x of their lower bound; "
                    "the paper's counted work (2062 PFLOP) takes 8.60 h at the measured float32 product rate")


def test_part_fairness_packs_the_run_folders_and_says_which_finished(check, monkeypatch):
    module, c = check
    keys = ["s/fedavg/default/clean/seed1", "s/fedmgda/default/clean/seed1"]

    def fairness_child(argv, limit, log, env=None):
        assert argv[argv.index("--child") + 1] == "fairness" and "--dry" in argv
        c.work.mkdir(parents=True, exist_ok=True)
        (c.work / "plan.json").write_text(json.dumps({"note": "digits", "runs": [{"seed": 1, "run": k} for k in keys]}))
        done = c.work / "runs" / keys[0]
        done.mkdir(parents=True)
        (done / "summary.json").write_text(json.dumps({"status": "ok", "rounds_completed": 2, "runtime_s": 3.0,
                                                       "protocol": {"mean_acc": 0.5, "std_acc": 0.1, "worst5_acc": 0.0}}))
        (c.work / "runs" / keys[1]).mkdir(parents=True)
        (c.work / "runs" / keys[1] / "run.yaml").write_text("seed: 1\n")
        return 0, 1.0, ""

    monkeypatch.setattr(module, "run_logged", fairness_child)
    module.part_fairness(c)
    part = c.summary.parts["fairness"]
    assert part.status == "partial" and part.files == ["fairness.txt", "fairness_runs.tar.gz"]
    assert part.note.startswith("1 of 2 runs finished (seeds none); not finished: seed 1 fedmgda at round 0; tar ")
    assert "| 1 | fedavg | finished, ok | 2 | 3 | 50.00 | 10.00 | 0.00 |" in (c.out / "fairness.txt").read_text()
    c.budget = 0.0  # nothing left: not started
    module.part_fairness(c)
    assert part.status == "skipped" and part.files == []


def test_seeds_per_pack_fits_the_time_left():
    module = load_script()
    assert module.seeds_per_pack(4, 3, rate=0.1, bench_text="", rounds=100, left=200) == 3  # 0.1 * 12 * 100 + 30 = 150
    assert module.seeds_per_pack(4, 3, rate=0.1, bench_text="", rounds=100, left=100) == 1  # 2 seeds: 110 s
    assert module.seeds_per_pack(4, 3, rate=0.1, bench_text="", rounds=100, left=60) == 0  # 1 seed: 70 s; none started
    assert module.seeds_per_pack(4, 3, rate=None, bench_text="", rounds=100, left=1e9) == 1  # no measurement: one seed
    assert module.fairness_status(None, []) == "timeout" and module.fairness_status(3, []) == "failed"
    assert module.fairness_status(0, [{"state": "finished, ok"}]) == "ok"


def test_seeds_per_pack_stay_within_the_best_measured_pack_size():
    """Part 3 measured F-MNIST packs of 4, 8 and 16 runs: 8 is best (per run-round), so packs of 4
    algorithms hold 2 seeds, however much time is left; without packed rows, the time alone decides."""
    module = load_script()
    bench = ("fmnist_b10_p0.1             10          all                   -            0.043         -            23.506   0.006\n"
             "                       4 runs packed: 0.100 s per round of all 4 (throughput 1.72x)\n"
             "                       8 runs packed: 0.143 s per round of all 8 (throughput 2.41x)\n"
             "                       16 runs packed: 0.400 s per round of all 16 (throughput 1.72x)\n")
    assert module.measured_pack_runs(bench) == 8
    assert module.seeds_per_pack(4, 4, rate=None, bench_text=bench, rounds=100, left=1e9) == 2
    assert module.seeds_per_pack(4, 4, rate=0.001, bench_text=bench, rounds=100, left=1e9) == 2
    assert module.seeds_per_pack(4, 4, rate=0.001, bench_text="", rounds=100, left=1e9) == 4
    # the H200 of 2026-11-27: 4 runs of 2000 rounds estimated at 304 s with 160 s left: not started
    h200 = ("fmnist_b10_p0.1             10          all                   -            0.037         -            27.100   0.001\n"
            "                       16 runs packed: 0.307 s per round of all 16 (throughput 1.92x)\n")
    assert round(module.round_estimate(h200, 4, 2000)) == 304
    assert module.seeds_per_pack(4, 4, rate=None, bench_text=h200, rounds=2000, left=160) == 0
    assert module.measured_pack_runs("") is None


def test_main_refuses_unknown_parts_in_one_line(tmp_path, monkeypatch, capsys):
    module = load_script()
    monkeypatch.chdir(tmp_path)  # main works from the repository root; the test's folder is restored after
    assert module.main(["--dry", "--parts", "env,nope", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == "device_check: unknown part(s) nope; known: " + ", ".join(PARTS)
    assert not (tmp_path / "out").exists()


def test_following_prints_a_pack_log_as_it_grows(tmp_path, capsys):
    import time

    module = load_script()
    log = tmp_path / "pack.log"
    with module.following(log):
        time.sleep(0.2)  # not there yet
        log.write_text("pack of 2 runs: ...\n")
        time.sleep(1.5)
        with open(log, "a") as fh:
            fh.write("[progress] round 1/2\n")
    assert capsys.readouterr().out == "pack of 2 runs: ...\n[progress] round 1/2\n"


def test_the_docs_show_part_3s_arguments():
    """docs/performance.md's table of parts names bench_rounds' GPU arguments as the script runs them."""
    module = load_script()
    page = (REPO / "docs" / "performance.md").read_text()
    assert f"`benchmarks/bench_rounds.py {module.BENCH_ARGS[0]}`" in page
    assert f"`benchmarks/bench_lstm.py {module.LSTM_ARGS[0]}`" in page


def test_device_wheels_fetch_the_locks_cvxopt_for_the_gpu_images_python(tmp_path):
    """`make device-wheels` asks pip for the lock's cvxopt, as a CPython 3.12 wheel (the GPU image's
    Python); run here with a stand-in pip that records its arguments."""
    lock = (REPO / "requirements/lock.txt").read_text()
    version = re.search(r"^cvxopt==([^ \\]+)", lock, re.M).group(1)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'args'}\n")
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    subprocess.run(["make", "--no-print-directory", "device-wheels"], cwd=REPO, env=env, check=True, capture_output=True, timeout=60)
    args = (tmp_path / "args").read_text().split()
    assert args[:3] == ["-m", "pip", "download"] and f"cvxopt=={version}" in args
    assert args[args.index("--python-version") + 1] == "3.12" and args[args.index("-d") + 1] == ".whl"


def test_device_check_installs_the_wheels_where_cvxopt_is_missing(tmp_path):
    """`make device-check` on a Python without cvxopt (the GPU image) first pip-installs the
    wheels of DEVICE_WHEELS into a folder of its own and puts it on the check's path; with cvxopt it
    installs nothing; where DEVICE_CARRY exists (make device-carry), it first unpacks it (the raw
    files, the wheels). A stand-in Python records what it is asked."""
    wheels, log, packed = tmp_path / "wheels", tmp_path / "log", tmp_path / "carry"
    wheels.mkdir()
    (wheels / "cvxopt-0-cp312-cp312-manylinux_2_28_x86_64.whl").write_text("")
    python = tmp_path / "python"
    for has_cvxopt in (False, True, None):  # None: with cvxopt and raw files to unpack
        if has_cvxopt is None:
            packed.mkdir()
        python.write_text("#!/bin/sh\n"
                          f'if [ "$1" = -c ]; then exit {0 if has_cvxopt is not False else 1}; fi\n'
                          f'echo "$PYTHONPATH | $@" >> {log}\n')
        python.chmod(0o755)
        log.write_text("")
        subprocess.run(["make", "--no-print-directory", "device-check", f"DEVICE_PY={python}", f"DEVICE_WHEELS={wheels}",
                        f"DEVICE_CARRY={packed}", "DEVICE_CHECK_ARGS=--dry"], cwd=REPO,
                       env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": ""}, check=True, capture_output=True, timeout=60)
        calls = log.read_text().splitlines()
        site = str(tmp_path / "fedmgda-device-site")
        if has_cvxopt is None:
            assert calls == [f" | scripts/device_carry.py unpack --packed {packed} --wheels {wheels}", "src | scripts/device_check.py --dry"]
        elif has_cvxopt:
            assert calls == ["src | scripts/device_check.py --dry"]
        else:
            assert calls[0].split(" | ")[1].split()[:6] == ["-m", "pip", "install", "-q", "--no-index", "--no-deps"]
            assert f"--target {site} {wheels}/cvxopt-0-cp312" in calls[0]
            assert calls[1] == f"src:{site} | scripts/device_check.py --dry"


def test_device_carry_packs_small_and_unpacks_the_same_content(tmp_path):
    """scripts/device_carry.py: the raw files and the wheels travel as xz (a GPU call carries at
    most 64 MiB) and come back as the files the package and pip read: the same bytes, ``.gz``
    gzipped again, a wheel with the same members; files already there are left alone; the size
    check counts the tracked files too."""
    import gzip
    import importlib.util
    import zipfile

    spec = importlib.util.spec_from_file_location("device_carry", REPO / "scripts" / "device_carry.py")
    carry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(carry)
    raw, wheels, packed, there = tmp_path / "raw", tmp_path / "whl", tmp_path / "carry", tmp_path / "there"
    (raw / "fmnist").mkdir(parents=True)
    (raw / "adult").mkdir()
    wheels.mkdir()
    images = bytes(range(256)) * 400
    with gzip.open(raw / "fmnist" / "train-images-idx3-ubyte.gz", "wb") as fh:
        fh.write(images)
    (raw / "adult" / "adult.data").write_text("39, State-gov, 77516\n" * 500)
    members = {"pkg/__init__.py": b"x = 1\n" * 300, "pkg-0.dist-info/RECORD": b"pkg/__init__.py,sha256=...,1800\n"}
    with zipfile.ZipFile(wheels / "pkg-0-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    written = carry.pack(raw, wheels, packed)
    assert sorted(p.relative_to(packed).as_posix() for p in written) == [
        "raw/adult/adult.data.xz", "raw/fmnist/train-images-idx3-ubyte.gz.xz", "wheels/pkg-0-py3-none-any.whl.tar.xz"]
    assert (packed / "raw" / "adult" / "adult.data.xz").stat().st_size < (raw / "adult" / "adult.data").stat().st_size / 10
    (there / "adult").mkdir(parents=True)
    (there / "adult" / "adult.data").write_text("kept")
    back = there / "whl"
    assert [p.relative_to(there).as_posix() for p in carry.unpack(packed, there, back)] == [
        "fmnist/train-images-idx3-ubyte.gz", "whl/pkg-0-py3-none-any.whl"]
    with gzip.open(there / "fmnist" / "train-images-idx3-ubyte.gz", "rb") as fh:
        assert fh.read() == images
    with zipfile.ZipFile(back / "pkg-0-py3-none-any.whl") as zf:
        assert {name: zf.read(name) for name in zf.namelist()} == members
    assert (there / "adult" / "adult.data").read_text() == "kept"
    assert carry.unpack(packed, there, back) == []  # nothing left to do
    tracked = carry.travel_bytes([])
    assert carry.travel_bytes([packed]) == tracked + sum(p.stat().st_size for p in packed.rglob("*.xz"))
