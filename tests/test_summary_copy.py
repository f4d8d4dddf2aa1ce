"""A finished run's summary.json is remade from its copy (``summary.copy.json``, which no Snakemake
rule declares) where it is gone, e.g. removed by Snakemake's cleanup of a failed job after another
trainer finished the run: the next trainer of the folder restores it, byte for byte, without
training, once the folder passes every reader's check through the copy; a copy that does not
match its folder or its config is not used, and the run is trained."""

from __future__ import annotations

import pytest
import yaml

from fedmgda.cli import main
from fedmgda.config import config_hash
from fedmgda.results import PER_USER, SUMMARY, SUMMARY_COPY, restore_summary

CONFIG = dict(dataset="synthetic", algorithm="fedavg", rounds=3, per_user_every=1, device="cpu")


def train(folder, config=CONFIG) -> int:
    path = folder.parent / f"{folder.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return main(["train", "--config", str(path), "--out", str(folder)])


@pytest.fixture
def finished(tmp_path):
    folder = tmp_path / "run"
    assert train(folder) == 0
    return folder


def stamps(folder) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def test_the_trainer_writes_the_copy_beside_summary_json(finished):
    assert (finished / SUMMARY_COPY).read_bytes() == (finished / SUMMARY).read_bytes()


def test_a_removed_summary_is_restored_from_its_copy_and_nothing_is_trained(finished, capsys):
    written = (finished / SUMMARY).read_bytes()
    (finished / SUMMARY).unlink()  # what Snakemake's cleanup of a failed job does
    before = stamps(finished)
    capsys.readouterr()
    assert train(finished) == 0
    said = capsys.readouterr().out
    assert f"{finished}: finished before; summary.json restored from {SUMMARY_COPY}" in said
    assert "done," not in said  # no training
    assert (finished / SUMMARY).read_bytes() == written
    after = stamps(finished)
    assert {name: after[name] for name in before} == before  # every other file as it was


def test_a_copy_that_does_not_match_its_folder_is_not_used_and_the_run_is_trained(finished,
                                                                                 capsys):
    (finished / SUMMARY).unlink()
    per_user = finished / PER_USER
    rows = per_user.read_text()
    per_user.write_text(rows + rows.splitlines()[-1] + "\n")  # a row more than the run wrote
    assert not restore_summary(finished, config_hash(CONFIG))
    assert not (finished / SUMMARY).exists()
    capsys.readouterr()
    assert train(finished) == 0
    assert f"{finished}: done, 3 rounds" in capsys.readouterr().out
    assert (finished / SUMMARY_COPY).read_bytes() == (finished / SUMMARY).read_bytes()


def test_a_copy_of_another_config_is_not_used(finished, capsys):
    (finished / SUMMARY).unlink()
    other = dict(CONFIG, rounds=4)
    assert not restore_summary(finished, config_hash(other))
    capsys.readouterr()
    assert train(finished, other) == 0
    assert f"{finished}: done, 4 rounds" in capsys.readouterr().out


def test_a_summary_present_is_never_overwritten_and_a_copy_without_manifest_never_used(finished):
    summary = finished / SUMMARY
    assert not restore_summary(finished, config_hash(CONFIG))
    summary.unlink()
    copy = finished / SUMMARY_COPY
    copy.write_text(copy.read_text().replace('"manifest"', '"unsealed"'))
    assert not restore_summary(finished, config_hash(CONFIG))
    assert not summary.exists()


def test_a_trainer_that_only_looks_at_a_folder_restores_nothing(finished):
    """A folder another trainer holds is looked at, never written (``fedmgda.cli``)."""
    from fedmgda.cli import already_trained

    (finished / SUMMARY).unlink()
    assert already_trained(str(finished), dict(CONFIG), restore=False) is None
    assert not (finished / SUMMARY).exists()
    assert "restored" in already_trained(str(finished), dict(CONFIG))
    assert (finished / SUMMARY).read_bytes() == (finished / SUMMARY_COPY).read_bytes()
