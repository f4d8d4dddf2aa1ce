"""Every result is stamped with where it was made: a run folder's summary.json and
checkpoints carry the environment stamp, a checkpoint resumed under another environment says so in
one line, and the stamp is no part of a run's identity."""

import json
import platform

import numpy as np
import pytest
import torch
import yaml

import fedmgda
from fedmgda import provenance
from fedmgda.checkpoints import CHECKPOINT
from fedmgda.cli import main
from fedmgda.config import RunConfig
from fedmgda.data import make_partition
from fedmgda.packs import trained_runs

CONFIG = dict(dataset="synthetic", algorithm="fedavg", rounds=4, device="cpu", checkpoint_every=1)
STAMP_KEYS = {"fedmgda", "commit", "dirty", "python", "torch", "numpy", "cvxopt", "device", "cuda",
              "gpu", "cpu",
              "isa", "torch_isa", "threads", "partition_hash", "qp"}


def train(out, config=CONFIG) -> list[str]:
    """Train ``config`` into ``out`` (its run.yaml written there, as the workflow does)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.yaml").write_text(yaml.safe_dump(config))
    return ["train", "--config", str(out / "run.yaml"), "--out", str(out)]


def test_a_run_folder_carries_the_environment_stamp(tmp_path):
    out = tmp_path / "run"
    assert main(train(out)) == 0
    stamp = json.loads((out / "summary.json").read_text())["environment"]
    assert set(stamp) == STAMP_KEYS
    cfg = RunConfig.from_dict(CONFIG)
    partition = make_partition(cfg.dataset, cfg.raw_dir, cfg.partition, cfg.seed,
                               cfg.dataset_options)
    assert stamp["partition_hash"] == partition.content_hash()
    assert (stamp["fedmgda"], stamp["numpy"],
            stamp["torch"]) == (fedmgda.__version__, np.__version__, torch.__version__)
    assert (stamp["python"] == platform.python_version() and stamp["device"] == "cpu"
            and stamp["gpu"] is None)
    assert stamp["threads"] == torch.get_num_threads() and stamp["cpu"] and stamp["isa"]
    assert stamp["commit"] is None or len(stamp["commit"]) == 40
    assert stamp["qp"] == provenance.QP == "exact"


def test_the_stamp_is_no_part_of_a_runs_identity(tmp_path):
    """run.yaml stays the config the workflow wrote, so a run finished under another environment
    is still a trained run (``fedmgda.packs.trained_runs``): nothing retrains it."""
    out = tmp_path / "runs" / "key"
    assert main(train(out)) == 0
    text = yaml.safe_dump(CONFIG)
    assert (out / "run.yaml").read_text() == text
    summary = json.loads((out / "summary.json").read_text())
    assert "environment" not in summary["config"]
    summary["environment"] = {**summary["environment"], "numpy": "1.0.0", "device": "cuda:0",
                              "cpu": "elsewhere"}
    (out / "summary.json").write_text(json.dumps(summary))
    assert trained_runs(tmp_path / "runs", {"key": text}) == {"key"}


def resumed_lines(out, capsys) -> list[str]:
    """What a rerun of the run in ``out`` says about its checkpoint's environment."""
    capsys.readouterr()
    assert main(["train", "--config", str(out / "run.yaml"), "--out", str(out)]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if "environment" in line]


def checkpoint_of_a_killed_run(out, monkeypatch) -> dict:
    from toy_federated import killed_at

    killed_at(lambda: main(train(out)), out, monkeypatch, 2)
    return torch.load(out / CHECKPOINT, weights_only=True)


def test_resuming_a_checkpoint_of_another_environment_says_so_in_one_line(tmp_path, monkeypatch,
                                                                          capsys):
    out = tmp_path / "run"
    payload = checkpoint_of_a_killed_run(out, monkeypatch)
    assert payload["environment"] == json.loads(json.dumps(payload["environment"]))  # plain data
    payload["environment"].update(numpy="1.0.0", device="cuda")
    torch.save(payload, out / CHECKPOINT)
    assert resumed_lines(out, capsys) == [f"{out}: resuming a checkpoint made under another "
                                          f"environment: numpy 1.0.0 -> {np.__version__}, device "
                                          "cuda -> cpu"]


def test_resuming_a_checkpoint_of_this_environment_says_nothing_of_it(tmp_path, monkeypatch,
                                                                      capsys):
    out = tmp_path / "run"
    checkpoint_of_a_killed_run(out, monkeypatch)
    assert resumed_lines(out, capsys) == []


def test_resuming_a_checkpoint_without_a_stamp_says_its_environment_is_unknown(tmp_path,
                                                                               monkeypatch, capsys):
    out = tmp_path / "run"
    payload = checkpoint_of_a_killed_run(out, monkeypatch)
    del payload["environment"]  # as written before checkpoints were stamped
    torch.save(payload, out / CHECKPOINT)
    assert resumed_lines(out, capsys) == [f"{out}: resuming a checkpoint made under an unknown "
                                          "environment (written before checkpoints were stamped)"]


def test_a_package_outside_a_git_checkout_has_no_commit_and_does_not_fail(tmp_path, monkeypatch):
    copy = tmp_path / "site-packages" / "fedmgda"
    copy.mkdir(parents=True)
    monkeypatch.setattr(provenance, "PACKAGE_DIR", copy)
    assert provenance.source_commit.__wrapped__() == {"commit": None, "dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert provenance.source_commit.__wrapped__() == {"commit": None, "dirty": None}


STAMP = {"fedmgda": "0.1.0", "commit": "abc1234def", "dirty": False, "python": "3.11.7",
         "torch": "2.14.1",
         "numpy": "2.4.6", "cvxopt": "1.3.2", "device": "cpu", "cuda": None, "gpu": None,
         "cpu": "AMD EPYC",
         "isa": "x86-64-v4", "torch_isa": "AVX512", "threads": 2, "partition_hash": "a" * 64}


def test_the_footer_lists_each_environment_with_its_runs_and_the_unstamped_runs():
    other = {**STAMP, "numpy": "2.2.6", "partition_hash": "b" * 64}
    text = provenance.footer([STAMP, STAMP, other, None])
    assert "Made in 2 environments:" in text
    assert ("- fedmgda 0.1.0 (abc1234), Python 3.11.7, torch 2.14.1, numpy 2.4.6, cvxopt 1.3.2 on "
            "cpu, AMD EPYC (x86-64-v4), 2 torch threads (2 runs)") in text
    assert "numpy 2.2.6, cvxopt 1.3.2 on cpu, AMD EPYC (x86-64-v4), 2 torch threads (1 run)" in text
    assert "Partitions (sha256): 2 distinct: aaaaaaaaaaaa, bbbbbbbbbbbb." in text
    assert "1 run carries no environment stamp (trained before stamping)." in text
    assert provenance.footer([STAMP]).startswith("Made with fedmgda 0.1.0 (abc1234), Python 3.11.7")
    assert "stamp" not in provenance.footer([STAMP])


@pytest.mark.parametrize(("change", "said"), [
    ({}, None),
    # these do not change a run's numbers
    ({"threads": 16, "commit": "fff", "partition_hash": None}, None),
    ({"torch": "2.5.0", "isa": "x86-64-v3"}, "torch 2.5.0 -> 2.14.1, isa x86-64-v3 -> x86-64-v4"),
])
def test_the_resume_note_names_what_changed(change, said):
    note = provenance.resume_note({**STAMP, **change}, STAMP)
    assert note == (None if said is None
                    else f"resuming a checkpoint made under another environment: {said}")


def test_a_run_trained_elsewhere_is_trained_and_a_changed_config_is_not(tmp_path):
    """The trained-run check compares identities (``config_hash``): a run trained on a GPU, on a
    partition saved at another path, is the workflow's run; one with another step size is not."""
    out = tmp_path / "runs" / "key"
    assert main(train(out)) == 0
    wanted = {**CONFIG, "device": "cpu"}
    elsewhere = {**CONFIG, "device": "cuda", "partition_file": "/elsewhere/seed1.npz"}
    (out / "run.yaml").write_text(yaml.safe_dump(elsewhere))
    assert trained_runs(tmp_path / "runs", {"key": yaml.safe_dump(wanted)}) == {"key"}
    changed = {**wanted, "local_lr": 0.123}
    assert trained_runs(tmp_path / "runs", {"key": yaml.safe_dump(changed)}) == set()
    (out / "run.yaml").write_text("[not, a, mapping]")
    assert trained_runs(tmp_path / "runs", {"key": yaml.safe_dump(wanted)}) == set()


# ---- which min-norm QP a run used
def _history(*commits: str) -> None:
    """Skip unless this package is a git checkout holding ``commits`` (not a wheel, a shallow
    clone or an archive)."""
    if not provenance._in_checkout():
        pytest.skip("the package is not in a git checkout")
    for commit in commits:
        found = provenance._git(provenance.PACKAGE_DIR, "cat-file", "-e", f"{commit}^{{commit}}")
        if found is None:
            pytest.skip(f"{commit[:7]} is not in this checkout's history")


def test_the_exact_qp_commit_is_the_one_that_finished_cvxopts_answer():
    _history(provenance.EXACT_QP_COMMIT, provenance.EXACT_QP_COMMIT + "^")
    where = provenance.PACKAGE_DIR
    diff = provenance._git(where, "show", "--format=", provenance.EXACT_QP_COMMIT, "--",
                           ":(top)src/fedmgda/qp.py")
    before = provenance._git(where, "show", f"{provenance.EXACT_QP_COMMIT}^:src/fedmgda/qp.py")
    added = "\n".join(line for line in diff.splitlines() if line.startswith("+"))
    assert "active set" in added and "active set" not in before


def test_a_runs_qp_comes_from_its_stamp_else_from_its_commit():
    exact = provenance.EXACT_QP_COMMIT
    _history(exact, exact + "^")
    assert provenance.min_norm_qp({**STAMP, "qp": "exact", "commit": None}) == "exact"
    assert provenance.min_norm_qp({**STAMP, "commit": exact}) == "exact"
    head = provenance._git(provenance.PACKAGE_DIR, "rev-parse", "HEAD")
    assert provenance.min_norm_qp({**STAMP, "commit": head}) == "exact"
    parent = provenance._git(provenance.PACKAGE_DIR, "rev-parse", exact + "^")
    assert provenance.min_norm_qp({**STAMP, "commit": parent}) == "pre-exact"
    assert provenance.min_norm_qp({**STAMP, "commit": "0" * 40}) == "unknown"  # not in this history
    assert provenance.min_norm_qp({**STAMP, "commit": None}) == "unknown"
    assert provenance.min_norm_qp(None) == "pre-exact"  # trained before stamping


def test_outside_a_checkout_a_stamp_without_qp_is_unknown(tmp_path, monkeypatch):
    copy = tmp_path / "site-packages" / "fedmgda"
    copy.mkdir(parents=True)
    monkeypatch.setattr(provenance, "PACKAGE_DIR", copy)
    assert provenance._qp_at_commit.__wrapped__(provenance.EXACT_QP_COMMIT) == "unknown"
    assert provenance.min_norm_qp({**STAMP, "qp": "exact"}) == "exact"


def test_the_footer_says_which_qp_the_runs_that_solve_one_used(monkeypatch):
    monkeypatch.setattr(provenance, "_qp_at_commit",
                        lambda commit: {"new": "exact", "old": "pre-exact"}.get(commit, "unknown"))
    new, old = {**STAMP, "commit": "new"}, {**STAMP, "commit": "old"}
    exact = provenance.EXACT_QP_COMMIT[:7]
    assert "min-norm QP" not in provenance.footer([new, old])
    text = provenance.footer([new, new, {**STAMP, "commit": "fedavg"}], [new, new])
    assert text.endswith("\n\nThe min-norm QP of its 2 runs that solve one: exact (cvxopt's answer "
                         f"finished on its active set: trained at {exact} or later).")
    text = provenance.footer([new, old, None, {**STAMP, "commit": None}],
                             [new, old, None, {**STAMP, "commit": None}])
    assert text.endswith(f"The min-norm QP of its 4 runs that solve one: 1 run exact (cvxopt's "
                         f"answer finished on its active set: trained at {exact} or later); 2 runs "
                         f"cvxopt's answer as it stopped (trained before {exact}, which made it "
                         "exact); 1 run unknown (the stamp names neither the QP nor a commit this "
                         "checkout holds).")
