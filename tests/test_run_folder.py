"""A run folder the trainer cannot use as it is stops the run with one line naming the file and
what to do: an unreadable or crafted checkpoint, another trainer writing the folder,
a full disk, a folder it cannot write. Nothing runs code from a checkpoint, nothing resumes
into a different run."""

import errno
import os
import pickle
import subprocess
import sys
import time

import pytest
import torch
import yaml

from fedmgda.checkpoints import CHECKPOINT
from fedmgda.cli import main
from fedmgda.runfolder import LOCK

CONFIG = dict(dataset="synthetic", algorithm="fedavg", rounds=3, device="cpu", checkpoint_every=1)


class SideEffect:
    """Unpickled, it creates the file ``marker`` (what a malicious checkpoint would do,
    harmlessly)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def cli(tmp_path, *extra, config=CONFIG):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["--config", str(path), "--out", str(tmp_path / "out"), *extra]


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def a_checkpoint_that(form: str, path, marker) -> None:
    """Write at ``path`` a file that must not be resumed from."""
    valid = {"config": {}, "next_round": 1, "w": torch.zeros(5), "iterate_sum": torch.zeros(5),
             "algorithm": {},
             "client_states": {}, "rows": [], "per_user_rows": [], "elapsed": 0.0}
    if form == "is empty":
        path.write_bytes(b"")
    elif form == "is random bytes":
        path.write_bytes(bytes(range(256)) * 8)
    elif form == "is truncated":
        torch.save(valid, path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif form == "is another torch file":
        torch.save(torch.nn.Linear(3, 2).state_dict(), path)
    elif form == "is a tensor":
        torch.save(torch.zeros(3), path)
    elif form == "has a wrong type":
        torch.save({**valid, "w": [0.0] * 5}, path)
    elif form == "runs code (torch file)":
        torch.save({**valid, "client_states": {0: SideEffect(marker)}}, path)
    elif form == "runs code (plain pickle)":
        # torch's legacy format is a pickle
        path.write_bytes(pickle.dumps(SideEffect(marker), protocol=2))


FORMS = {  # what the file is -> what the one line says about it
    "is empty": "is empty",
    "is random bytes": "is not a readable checkpoint",
    "is truncated": "is not a readable checkpoint (truncated or corrupt",
    "is another torch file": "is a torch file but not a fedmgda checkpoint (it holds keys weight, "
    "bias)",
    "is a tensor": "is a torch file but not a fedmgda checkpoint (it holds a Tensor)",
    "has a wrong type": "wrong type of w",
    "runs code (torch file)": "holds objects other than tensors and plain data",
    "runs code (plain pickle)": "holds objects other than tensors and plain data",
}


@pytest.mark.parametrize("form", FORMS)
def test_a_checkpoint_that_cannot_be_resumed_from_stops_the_run_in_one_line(tmp_path, capsys, form):
    out, marker = tmp_path / "out", tmp_path / "marker"
    out.mkdir()
    a_checkpoint_that(form, out / CHECKPOINT, marker)
    assert main(["train", *cli(tmp_path)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"fedmgda: {out / CHECKPOINT} ") and FORMS[form] in line, line
    assert line.endswith(f"delete it to start this run afresh (rm {out / CHECKPOINT}), or rerun "
                         "with --fresh-if-unreadable (FEDMGDA_FRESH_IF_UNREADABLE=1 under "
                         "Snakemake) to set it aside and restart from round 0")
    assert not marker.exists()  # a crafted file ran nothing
    assert sorted(p.name for p in out.iterdir()) == [CHECKPOINT]  # nothing trained, nothing written


def outputs(folder) -> dict[str, bytes]:
    """A finished run's outputs that do not hold its run time."""
    return {name: (folder / name).read_bytes()
            for name in ("metrics.csv", "per_user.csv", "per_user_final.csv")}


@pytest.mark.parametrize("form",
                         ["is truncated", "runs code (torch file)", "is another torch file"])
def test_fresh_if_unreadable_sets_the_checkpoint_aside_and_restarts_from_round_0(tmp_path, capsys,
                                                                                 form):
    out, marker = tmp_path / "out", tmp_path / "marker"
    out.mkdir()
    a_checkpoint_that(form, out / CHECKPOINT, marker)
    refused = (out / CHECKPOINT).read_bytes()
    assert main(["train", *cli(tmp_path, "--fresh-if-unreadable")]) == 0
    said = capsys.readouterr().out
    assert f"{out}: {CHECKPOINT} {FORMS[form]}" in said
    assert (f"set aside as {CHECKPOINT}.unreadable (--fresh-if-unreadable); this run restarts "
            "from round 0" in said)
    # kept, never run
    assert (out / f"{CHECKPOINT}.unreadable").read_bytes() == refused and not marker.exists()
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out",
                 str(tmp_path / "fresh")]) == 0
    # the run of a folder that never held the file
    assert outputs(out) == outputs(tmp_path / "fresh")


def test_fresh_if_unreadable_comes_from_the_environment_and_still_resumes_a_good_checkpoint(
        tmp_path, monkeypatch):
    """Under Snakemake the option is FEDMGDA_FRESH_IF_UNREADABLE=1 (the training jobs inherit it); a
    checkpoint the run can resume from is resumed, with the option or without."""
    from toy_federated import killed_at

    config = dict(CONFIG, rounds=4)
    out = tmp_path / "out"
    killed_at(lambda: main(["train", *cli(tmp_path, config=config)]), out, monkeypatch, 2)
    monkeypatch.setenv("FEDMGDA_FRESH_IF_UNREADABLE", "1")
    result = subprocess.run([sys.executable, "-m", "fedmgda", "train",
                             *cli(tmp_path, config=config)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"{out}: resuming from its checkpoint (round 2 of 4 done)" in result.stdout
    (out / "summary.json").unlink()
    (out / CHECKPOINT).write_bytes(b"")
    result = subprocess.run([sys.executable, "-m", "fedmgda", "train",
                             *cli(tmp_path, config=config)], capture_output=True, text=True,
                            timeout=300)
    assert (result.returncode == 0
            and "is empty (the run was stopped while writing it?): set aside as"
            in result.stdout), result.stdout
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out",
                 str(tmp_path / "fresh")]) == 0
    assert outputs(out) == outputs(tmp_path / "fresh")


def test_a_crafted_checkpoint_runs_no_code_through_the_command_line(tmp_path):
    out, marker = tmp_path / "out", tmp_path / "marker"
    out.mkdir()
    a_checkpoint_that("runs code (torch file)", out / CHECKPOINT, marker)
    # the file is really harmful when loaded as a pickle ...
    torch.load(out / CHECKPOINT, weights_only=False)
    assert marker.exists()
    marker.unlink()
    result = subprocess.run([sys.executable, "-m", "fedmgda", "train", *cli(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert (result.returncode == 2
            and "holds objects other than tensors and plain data" in one_line(result.stderr))
    assert not marker.exists()  # ... and resuming from it ran nothing


def test_a_checkpoint_of_another_model_size_is_refused(tmp_path, capsys):
    """A checkpoint of this very config whose model does not fit (edited, or from older code)."""
    config = dict(CONFIG, rounds=2)
    out = tmp_path / "out"
    assert main(["train", *cli(tmp_path, config=config)]) == 0
    from fedmgda.config import RunConfig

    state = {"config": RunConfig.from_dict(config).to_dict(), "next_round": 1, "w": torch.zeros(5),
             "iterate_sum": torch.zeros(5),
             "algorithm": {}, "client_states": {}, "rows": [], "per_user_rows": [], "elapsed": 0.0}
    torch.save(state, out / CHECKPOINT)
    capsys.readouterr()
    assert main(["train", *cli(tmp_path, config=config)]) == 2
    assert "holds a model of 5 weights; this run's has" in one_line(capsys.readouterr().err)


# ---------------------------------------------------------------------- one writer per run folder
def wait_for_lock(out, pid, process, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if (out / LOCK).exists() and (out / LOCK).read_text().strip() == str(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"the first trainer never held {out / LOCK}: {process.poll()}")


def test_a_second_trainer_on_a_folder_refuses_and_a_killed_ones_lock_is_taken_over(tmp_path,
                                                                                   capsys):
    out = tmp_path / "out"
    long_run = tmp_path / "long.yaml"
    long_run.write_text(yaml.safe_dump(dict(CONFIG, rounds=100_000, checkpoint_every=0)))
    first = subprocess.Popen([sys.executable, "-m", "fedmgda", "train", "--config", str(long_run),
                              "--out", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lock(out, first.pid, first)
        assert main(["train", *cli(tmp_path, config=dict(CONFIG, rounds=1))]) == 2
        line = one_line(capsys.readouterr().err)
        assert line == (f"fedmgda: {out} is being written by another trainer (process "
                        f"{first.pid}); wait for it to end or stop it (kill {first.pid}), "
                        "then rerun")
        assert first.poll() is None  # the first goes on, its folder untouched by the second
    finally:
        first.kill()
        first.wait(timeout=60)
    # a killed trainer leaves its lock file ...
    assert (out / LOCK).read_text().strip() == str(first.pid)
    # ... which the next one takes over
    assert main(["train", *cli(tmp_path, config=dict(CONFIG, rounds=1))]) == 0
    said = capsys.readouterr().out
    assert (f"{out}: took over the lock left by process {first.pid}, which no longer holds it"
            in said)
    assert (out / "summary.json").exists() and not (out / LOCK).exists()


def test_a_stale_lock_file_of_a_dead_process_is_taken_over_and_said(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text(dead.stdout)
    assert main(["train", *cli(tmp_path, config=dict(CONFIG, rounds=1))]) == 0
    assert f"took over the lock left by process {dead.stdout.strip()}" in capsys.readouterr().out
    assert not (out / LOCK).exists()


def test_one_folder_twice_in_a_pack_is_refused(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    assert main(["train", "--config", str(path), str(path), "--out", str(tmp_path / "a"),
                 str(tmp_path / "a")]) == 2
    assert "more than once" in one_line(capsys.readouterr().err) and not (tmp_path / "a").exists()


def test_a_folder_that_cannot_be_written_fails_before_training(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main(["train", "--config", cli(tmp_path)[1], "--out",
                 str(tmp_path / "file" / "run")]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"fedmgda: {tmp_path / 'file' / 'run'}: cannot write the run folder (")
    assert "[progress]" not in capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_fails_before_training(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert main(["train", *cli(tmp_path)]) == 2
    finally:
        out.chmod(0o755)
    assert "cannot write the run folder (Permission denied)" in one_line(capsys.readouterr().err)


def test_a_run_that_fails_before_training_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "new" / "run"
    config = dict(CONFIG, dataset="adult", raw_dir=str(tmp_path / "raw"))
    # a data error: no raw files
    assert main(["train", *cli(tmp_path, config=config)[:2], "--out", str(out)]) == 3
    assert "adult.data" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------------- a full disk
def test_a_full_disk_during_a_checkpoint_says_so_and_leaves_no_tmp(tmp_path, monkeypatch):
    from toy_federated import make_toy_federated, toy_config

    from fedmgda.errors import RunFolderError
    from fedmgda.scheduler import run

    def full(payload, file):
        file.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(RunFolderError,
                       match=f"^{tmp_path / CHECKPOINT}: no space left on device; free some space"):
        run(toy_config(rounds=3, checkpoint_every=1), tmp_path, data=make_toy_federated(),
            model_name="logreg")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("file,checkpoint_every",
                         [(CHECKPOINT, 1), ("summary.json", 0), ("metrics.csv", 0)])
def test_a_full_disk_through_the_command_line_is_one_line(tmp_path, capsys, file, checkpoint_every):
    """``<file>.tmp`` links to /dev/full, where every write fails with ENOSPC: a real full disk."""
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{file}.tmp").symlink_to("/dev/full")
    assert main(["train",
                 *cli(tmp_path, config=dict(CONFIG, checkpoint_every=checkpoint_every))]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"fedmgda: {out / file}: no space left on device; "), line
    assert not any(p.name.endswith(".tmp")
                   for p in out.iterdir()) and not (out / "summary.json").exists()
