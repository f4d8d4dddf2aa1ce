"""device: auto per run (fedmgda.devices): the measured round-time table, the device choice and the
training job's gpu resource."""

from pathlib import Path

import pytest

from fedmgda.config import NON_IDENTITY_FIELDS
from fedmgda.devices import (
    choose_device,
    job_gpu,
    measured_pack,
    parse_round_times,
    round_times,
    run_device,
    split_variants,
)

ROOT = Path(__file__).resolve().parents[1]
HEADER = "setting,dataset,model,device,machine,threads,runs,s_per_round,eval_s,source\n"


def table(*rows: str):
    return parse_round_times(HEADER + "".join(r + "\n" for r in rows))


def test_committed_table_names_existing_measurement_files():
    rows = round_times()
    assert rows and {r.device for r in rows} == {"cpu", "cuda"}
    for r in rows:
        assert (ROOT / r.source).is_file(), r.source
        assert r.runs >= 1 and r.s_per_round > 0 and r.eval_s >= 0 and r.threads >= 1


def test_committed_round_times_are_those_of_the_measurement_files():
    """Each number of the table is printed in the file it names (a copy, no typo)."""
    for r in round_times():
        text = (ROOT / r.source).read_text()
        assert f"{r.s_per_round:.3f}" in text, (r.setting, r.device, r.runs)
        if r.eval_s:
            assert f"{r.eval_s:.3f}" in text, (r.setting, r.device)


@pytest.mark.parametrize("dataset",
                         ["cifar10", "fmnist", "femnist", "shakespeare", "adult", "fmnist3",
                          "synthetic", "digits"])
def test_no_cuda_always_cpu(dataset):
    assert choose_device(dataset, cuda_available=False) == "cpu"
    assert run_device({"dataset": dataset, "device": "auto"}, cuda_available=False) == "cpu"


def test_with_cuda_the_measured_faster_device():
    expected = {"cifar10": "cuda", "fmnist": "cuda", "femnist": "cuda", "shakespeare": "cuda",
                "adult": "cpu",
                "fmnist3": "cpu", "synthetic": "cpu", "digits": "cpu"}
    assert {d: choose_device(d, cuda_available=True) for d in expected} == expected


def test_choice_follows_the_table_and_model_kind():
    rows = table("s,adult,logreg,cuda,G,1,8,0.08,0,f", "s,adult,logreg,cpu,C,1,100,2.0,0,f")
    # 0.01 s a run-round on the GPU, 0.02 on a core
    assert choose_device("adult", "logreg", True, rows) == "cuda"
    rows = table("s,adult,logreg,cuda,G,1,8,0.32,0,f", "s,adult,logreg,cpu,C,1,100,2.0,0,f")
    assert choose_device("adult", "logreg", True, rows) == "cpu"
    rows = table("s,adult,logreg,cuda,G,1,1,0.01,0.5,f", "s,adult,logreg,cpu,C,1,1,0.2,0,f")
    assert choose_device("adult", "logreg", True, rows) == "cpu"  # evaluation counted
    # measured on one device only, or not at all: by the model
    only_gpu = table("s,fmnist,cnn_fmnist,cuda,G,1,1,9.0,0,f")
    assert choose_device("fmnist", "cnn_fmnist", True, only_gpu) == "cuda"
    # another model: not this row
    assert choose_device("fmnist", "mlp_fmnist", True, only_gpu) == "cpu"
    assert choose_device("shakespeare", None, True, []) == "cuda"
    assert choose_device("synthetic", None, True, []) == "cpu"


def test_explicit_device_is_kept():
    assert run_device({"dataset": "adult", "device": "cuda:1"}, cuda_available=True) == "cuda:1"
    assert run_device({"dataset": "cifar10", "device": "cpu"}, cuda_available=True) == "cpu"
    assert run_device({"dataset": "cifar10"}, cuda_available=True) == "cuda"  # no device: auto


def test_job_gpu():
    assert job_gpu({"dataset": "cifar10", "device": "auto"}, {"gpu": 1}) == 1
    # a CPU profile asks for none
    assert job_gpu({"dataset": "cifar10", "device": "auto"}, {"gpu": 0}) == 0
    assert job_gpu({"dataset": "adult", "device": "auto"}, {"gpu": 1}) == 0
    assert job_gpu({"dataset": "digits"}, {"gpu": 1}) == 0
    # an explicit device keeps the config's resources (tests/slurm: device: cpu runs asking for a
    # GPU)
    assert job_gpu({"dataset": "digits", "device": "cpu"}, {"gpu": 1}) == 1
    assert job_gpu({"dataset": "adult", "device": "cuda"}, {"gpu": 0}) == 0


def test_device_is_not_part_of_the_run_identity():
    assert "device" in NON_IDENTITY_FIELDS


def test_simulation_auto_resolves_per_dataset(monkeypatch):
    torch = pytest.importorskip("torch")
    from fedmgda.simulator import resolve_device

    assert resolve_device("auto", "cifar10",
                          "cnn_cifar") == torch.device("cuda" if torch.cuda.is_available()
                                                       else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto", "adult", "logreg") == torch.device("cpu")
    assert resolve_device("auto", "cifar10", "cnn_cifar") == torch.device("cuda")
    assert resolve_device("auto") == torch.device("cuda")


def test_paper_config_asks_a_gpu_exactly_for_the_runs_that_train_on_one():
    """config/config.yaml: every run's job asks for the GPU its device choice uses (Adult, Synthetic
    and q-FFL's F-MNIST on CPU cores, the CNNs and the LSTM on the GPU), so the declared gpu
    resources of today's DAG are unchanged."""
    from fedmgda.experiments import expand, load_config

    reg = expand(load_config(str(ROOT / "config/config.yaml")))
    for spec in reg.runs.values():
        assert job_gpu(spec.config, spec.resources) == spec.resources["gpu"], spec.key
        assert (run_device(spec.config,
                           cuda_available=True) == "cuda") == (spec.resources["gpu"] == 1), spec.key


def test_best_pack_size_is_the_smallest_within_tolerance_of_the_best():
    from fedmgda.devices import best_pack_size

    assert best_pack_size({}) == 1  # nothing measured
    # per run: 1 -> 0.100, 8 -> 0.075, 16 -> 0.07375; 8 is within 5 % of 16's, and smaller
    assert best_pack_size({1: 0.10, 8: 0.60, 16: 1.18}) == 8
    assert best_pack_size({1: 0.10, 8: 0.60, 16: 1.18}, tolerance=0.0) == 16
    # packing that does not pay (CIFAR-10, 20 clients, H200)
    assert best_pack_size({1: 0.162, 8: 1.334}) == 1


def test_measured_pack_averages_each_settings_ratio_to_its_single_run():
    """Two settings of one dataset, one fast and one slow: each pack size scored by the mean of its
    settings' per-run ratio to their own single run; other devices and datasets ignored."""
    from fedmgda.devices import measured_pack

    # 8: 0.5 per run
    rows = table("a,cifar10,cnn_cifar,cuda,G,1,1,0.100,0,x",
                 "a,cifar10,cnn_cifar,cuda,G,1,8,0.400,0,x",
                 # 8: 1.1
                 "b,cifar10,cnn_cifar,cuda,G,1,1,10.0,0,x",
                 "b,cifar10,cnn_cifar,cuda,G,1,8,88.0,0,x",
                 "b,cifar10,cnn_cifar,cuda,G,1,4,36.0,0,x",  # 4 (only b): 0.9
                 "a,cifar10,cnn_cifar,cpu,C,1,1,1.0,0,x", "a,cifar10,cnn_cifar,cpu,C,1,8,1.0,0,x",
                 "c,fmnist,cnn_fmnist,cuda,G,1,1,1.0,0,x",
                 "c,fmnist,cnn_fmnist,cuda,G,1,16,1.0,0,x")
    # mean(0.5, 1.1) = 0.8 < 0.9 (4) < 1 (1)
    assert measured_pack("cifar10", "cuda", table=rows) == 8
    assert measured_pack("cifar10", "cpu", table=rows) == 8
    assert measured_pack("fmnist", "cuda", table=rows) == 16
    assert measured_pack("femnist", "cuda", table=rows) == 1  # not measured: one run per job
    slow_b = [r for r in rows if not (r.setting == "b" and r.runs == 8)]
    # a alone at 8 (0.5) beats b at 4 (0.9)
    assert measured_pack("cifar10", "cuda", table=slow_b) == 8


def test_the_committed_table_packs_the_gpu_datasets_as_measured():
    """config/config.yaml's pack: auto from the H200 rows: CIFAR-10 (1, 4, 8, 16 runs measured on
    2026-11-27) is best by 4 (per run-round, the mean of its settings' ratios to one run: 0.89 for
    4, 0.92 for 8, 1.04 for 16); F-MNIST by 8 (within 5 % of 16's); Shakespeare (1 and 8,
    2026-11-26) by 8."""
    from fedmgda.devices import measured_pack

    assert ({d: measured_pack(d, "cuda") for d in ("cifar10", "fmnist", "shakespeare")}
            == {"cifar10": 4, "fmnist": 8, "shakespeare": 8})


def test_also_rows_choose_no_device_and_no_pack():
    """A setting timed with a run-config field changed (``also``, e.g. TF32) is faster on the GPU
    here, but only the rows of the benchmark's own config decide the device and the pack size."""
    rows = parse_round_times("setting,dataset,model,device,machine,threads,runs,s_per_round,"
                             "eval_s,source,also\n"
                             "a,adult,linear,cpu,m,1,1,0.010,0,f,\n"
                             "a,adult,linear,cuda,m,1,1,0.020,0,f,\n"
                             "a,adult,linear,cuda,m,1,1,0.001,0,f,tf32=true\n"
                             "a,adult,linear,cuda,m,1,4,0.060,0,f,\n"
                             "a,adult,linear,cuda,m,1,8,0.004,0,f,tf32=true\n")
    defaults, variants = split_variants(rows)
    assert [r.also for r in variants] == ["tf32=true"] * 2 and len(defaults) == 3
    assert choose_device("adult", "linear", cuda_available=True, table=rows) == "cpu"
    assert measured_pack("adult", "cuda", "linear", table=rows) == 4


def test_the_pack_sizes_the_docs_state_are_the_measured_ones():
    """docs/workflow.md and config/config.yaml state what `pack: auto` gives on the GPU; a device
    check that changes round_times.csv must change them too."""
    import re

    page = " ".join((ROOT / "docs" / "workflow.md").read_text().split())
    m = re.search(r"CIFAR-10 by (\d+) and F-MNIST by (\d+); Shakespeare, measured .*?, by (\d+)\.",
                  page)
    assert m, "docs/workflow.md no longer states the measured pack sizes; update this test"
    assert [int(x)
            for x in m.groups()] == [measured_pack(d, "cuda")
                                     for d in ("cifar10", "fmnist", "shakespeare")]
    config = " ".join(line.lstrip("# ")
                      for line in (ROOT / "config" / "config.yaml").read_text().splitlines())
    m = re.search(r"CIFAR-10 (\d+), F-MNIST (\d+) from .*? Shakespeare (\d+) from", config)
    assert m, ("config/config.yaml's comment no longer states the measured pack sizes; "
               "update this test")
    assert [int(x)
            for x in m.groups()] == [measured_pack(d, "cuda")
                                     for d in ("cifar10", "fmnist", "shakespeare")]
