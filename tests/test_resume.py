"""A run killed part-way (SIGKILL) and restarted continues from its last checkpoint and ends with
exactly the metrics of an uninterrupted run."""

import signal
import subprocess
import sys
import time

import pandas as pd
import yaml

CONFIG = dict(dataset="synthetic", algorithm="afl", hparams={"gamma_w": 1.0, "gamma_lambda": 0.2},
              rounds=100, participation=0.3, batch_size=10, local_lr=0.05, seed=2, device="cpu",
              checkpoint_every=5)


def train(cfg_path, out):
    return subprocess.Popen([sys.executable, "-m", "fedmgda", "train", "--config", str(cfg_path),
                             "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killed_run_resumes_to_identical_metrics(tmp_path):
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    reference = train(cfg_path, tmp_path / "reference")
    assert reference.wait(timeout=600) == 0, reference.stderr.read()

    out = tmp_path / "killed"
    first = train(cfg_path, out)
    deadline = time.time() + 300
    while not (out / "checkpoint.pt").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.05)
    time.sleep(0.1)  # let it get past the checkpoint, into later rounds
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert (out / "checkpoint.pt").exists() and not (out / "summary.json").exists()

    second = train(cfg_path, out)
    assert second.wait(timeout=600) == 0, second.stderr.read()
    resumed = pd.read_csv(out / "metrics.csv")
    uninterrupted = pd.read_csv(tmp_path / "reference" / "metrics.csv")
    pd.testing.assert_frame_equal(resumed, uninterrupted)
    assert ((out / "per_user.csv").read_text()
            == (tmp_path / "reference" / "per_user.csv").read_text())


def test_a_stop_request_checkpoints_at_the_round_end_and_the_rerun_matches(tmp_path):
    """``should_stop`` (the trainer's SIGINT / SIGTERM): the run checkpoints at the end of the
    round it was asked in and stops, even without checkpoint_every; resuming it gives the files
    of an uninterrupted run, byte for byte."""
    import pytest

    from fedmgda.config import RunConfig
    from fedmgda.errors import TrainingStopped
    from fedmgda.scheduler import run_packed
    from fedmgda.simulator import Simulation

    cfg = RunConfig.from_dict(dict(CONFIG, rounds=6, checkpoint_every=0))
    stopped, uninterrupted = tmp_path / "stopped", tmp_path / "uninterrupted"
    asked = []

    def at_the_second_round_end() -> bool:
        asked.append(True)
        return len(asked) == 2

    with pytest.raises(TrainingStopped) as stop:
        run_packed([Simulation(cfg)], [stopped], should_stop=at_the_second_round_end)
    assert stop.value.runs == [(str(stopped), 2)]
    assert (stopped / "checkpoint.pt").exists() and not (stopped / "summary.json").exists()
    run_packed([Simulation(cfg)], [stopped])
    run_packed([Simulation(cfg)], [uninterrupted])
    for name in ("metrics.csv", "per_user.csv", "per_user_final.csv"):
        assert (stopped / name).read_bytes() == (uninterrupted / name).read_bytes(), name
