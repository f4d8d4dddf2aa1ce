"""benchmarks/makespan.py: list scheduling of training jobs on CPU cores and GPUs, hand-computed
cases."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from makespan import Job, makespan_by_dataset, pack_round_seconds, schedule  # noqa: E402


def cpu(name, s, threads=1, dataset="d"):
    return Job(name, dataset, "cpu", s, threads)


def gpu(name, s, dataset="d"):
    return Job(name, dataset, "cuda", s)


def test_three_cpu_jobs_on_two_cores():
    # longest first: 3 on one core, 2 on the other, the second 2 after it: 4 s, not 7 back to back
    s = schedule([cpu("a", 2), cpu("b", 3), cpu("c", 2)], cores=2, gpus=0)
    assert s.makespan == 4
    assert s.start == {"b": 0, "a": 0, "c": 2}


def test_longest_first():
    # 1, 1, 2 on 2 cores: the 2-second job starts first (2 s), not after a short one (3 s)
    assert schedule([cpu("a", 1), cpu("b", 1), cpu("c", 2)], cores=2, gpus=0).makespan == 2


def test_gpu_queue_beside_cpu_cores():
    # the GPU runs its jobs one after another (10 s) while the CPU jobs use the cores it leaves free
    jobs = [gpu("g1", 5), gpu("g2", 5), cpu("c1", 4), cpu("c2", 4)]
    s = schedule(jobs, cores=3, gpus=1)
    assert s.makespan == 10
    assert s.start["c1"] == s.start["c2"] == 0
    assert sorted([s.start["g1"], s.start["g2"]]) == [0, 5]


def test_a_gpu_job_holds_a_core():
    # one core: the GPU job's core is the only one, so the CPU job waits for it
    assert schedule([gpu("g", 5), cpu("c", 4)], cores=1, gpus=1).makespan == 9
    assert schedule([gpu("g", 5), cpu("c", 4)], cores=2, gpus=1).makespan == 5


def test_two_gpus():
    assert schedule([gpu("a", 3), gpu("b", 3), gpu("c", 3)], cores=4, gpus=2).makespan == 6


def test_threads():
    # a 2-thread job waits for both cores; the 1-thread jobs fill them before and after
    s = schedule([cpu("wide", 3, threads=2), cpu("x", 1), cpu("y", 1)], cores=2, gpus=0)
    assert s.start["wide"] == 0 and s.start["x"] == s.start["y"] == 3
    assert s.makespan == 4


def test_impossible_jobs():
    with pytest.raises(ValueError, match="cores"):
        schedule([cpu("a", 1, threads=4)], cores=2)
    with pytest.raises(ValueError, match="GPU"):
        schedule([gpu("a", 1)], cores=2, gpus=0)
    with pytest.raises(ValueError, match="unique"):
        schedule([cpu("a", 1), cpu("a", 2)], cores=2)


def test_by_dataset_and_together():
    jobs = [gpu("g1", 6, "cifar10"), gpu("g2", 6, "cifar10"), cpu("a1", 5, dataset="adult"),
            cpu("a2", 5, dataset="adult"),
            cpu("a3", 5, dataset="adult")]
    result = makespan_by_dataset(jobs, cores=3, gpus=1)
    # cifar10 alone: its 2 GPU jobs in a row; adult alone: 3 jobs on 3 cores; together: the GPU job
    # holds a core, so 2 adult jobs start at 0 and the third at 5
    assert result == {"adult": 5, "cifar10": 12, "all": 12}
    s = schedule(jobs, cores=3, gpus=1)
    assert s.finish([j for j in jobs if j.dataset == "adult"]) == 10
    assert makespan_by_dataset([], cores=2) == {"all": 0.0}


def test_pack_round_seconds():
    measured = {1: 0.2, 8: 0.9}  # 0.1 s per further run
    assert pack_round_seconds(measured, 1) == 0.2
    assert pack_round_seconds(measured, 8) == 0.9
    assert pack_round_seconds(measured, 4) == pytest.approx(0.5)
    assert pack_round_seconds(measured, 12) == pytest.approx(1.3)  # past 8: the same marginal cost
    assert pack_round_seconds({115: 0.23}, 23) == pytest.approx(0.046)  # one size: in proportion
    assert pack_round_seconds({1: 1.0, 4: 2.5, 8: 4.5}, 6) == pytest.approx(3.5)
    with pytest.raises(ValueError):
        pack_round_seconds({}, 2)
