"""The lockstep check with the authors' CIFAR-10 code (scripts/lockstep_authors_cifar.py) against a
recording of their side, so that it runs without their code: FedAvg and FedMGDA+ at b = 10 and
b = 400 on the authors' CIFAR-10 partition of random-pixel batches in CIFAR-10's real format,
seed 1, 5 rounds of 10 participants of the 100 users (the paper's participation, so FedMGDA+'s
min-norm QP weighs 10 updates), the package's participants and minibatches fed to their
``federated_main.py``, both codes in float64. To keep the recording within minutes on a CPU, each
user keeps 100 of its 500 samples in both codes (``--samples 100``: its first 80 training, 10
validation and 10 test samples), so a round trains 8 minibatches of 10 at b = 10 and one full
batch of 80 at b = 400 per participant. Recorded by

    NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" PYTHONPATH=/tmp/authors-site \\
        python scripts/lockstep_authors_cifar.py --authors /tmp/Fed-MGDA/main \\
        --record tests/data/authors_lockstep_cifar_seed1.pt.xz

(watml/Fed-MGDA as released, numpy 2.4.6 with its SIMD sorts off, torch 2.14.1 and torchvision
0.29.1 on the CPU): of their global models after each of the 5 rounds, the values at fixed
positions of every weight tensor with the norm and largest weight; users 0-9's test accuracies
after round 5; the inputs both codes were fed and a hash of the random pixels, which the test
writes again from their seed."""

import copy
import importlib.util
import os
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from fedmgda.data import DATASET_SPECS, cifar10, make_partition

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "authors_lockstep_cifar_seed1.pt.xz"
ROUNDS, PARTICIPANTS, SAMPLES = 5, 10, 100  # what the recording holds, per setting and round
SETTINGS = ("fedavg_b10", "fedmgda_plus_b10", "fedavg_b400", "fedmgda_plus_b400")
# The package's four CIFAR-10 runs in float64 take minutes: run them with
# FEDMGDA_LOCKSTEP_CIFAR=1 (the recording's and the loader's tests below always run).
FULL = pytest.mark.skipif(os.environ.get("FEDMGDA_LOCKSTEP_CIFAR") != "1",
                          reason="the CIFAR-10 lockstep runs: set FEDMGDA_LOCKSTEP_CIFAR=1")

@pytest.fixture(scope="module")
def cifar():
    spec = importlib.util.spec_from_file_location(
        "lockstep_authors_cifar", ROOT / "scripts" / "lockstep_authors_cifar.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recorded_args(cifar, tmp_path_factory):
    """The recording's inputs and the random batches written again into a raw directory; the
    registry's CIFAR-10 checksum pinned to them for this module only."""
    recording = cifar.load_recording(RECORDING)
    raw_dir = tmp_path_factory.mktemp("cifar") / "raw"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(DATASET_SPECS, "cifar10", DATASET_SPECS["cifar10"])  # restored afterwards
        cifar.write_random_cifar(raw_dir, recording["data_seed"])
        yield Namespace(
            seed=1,
            rounds=recording["rounds"],
            samples=recording["samples"],
            raw_dir=str(raw_dir),
            rtol=1e-10,
            recorded=RECORDING,
            data_seed=recording["data_seed"],
            inputs=recording["inputs"],
            authors=None,
        )


@pytest.fixture(scope="module")
def package_models(cifar, recorded_args):
    return cifar.package_models(recorded_args)


@FULL
@pytest.mark.slow
def test_package_rounds_equal_the_authors_cifar_code_fed_the_same_inputs(
    cifar, recorded_args, package_models, capsys
):
    assert cifar.check(recorded_args, package_models) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "lockstep: passed" in out
    assert out.count("users whose test accuracy differs: 0/10") == len(cifar.SETTINGS)


def test_the_recording_holds_every_round_of_ten_participants_in_every_setting(cifar):
    """The recording the checks below compare with: seed 1, 5 rounds, 10 participants a round
    (distinct users), 100 samples a user, and of each of the four settings a sketch of their
    global model after every round and users 0-9's accuracies (multiples of 1/10: 10 test
    samples each)."""
    recording = cifar.load_recording(RECORDING)
    assert (recording["seed"], recording["rounds"], recording["samples"]) == (1, ROUNDS, SAMPLES)
    inputs = recording["inputs"]
    assert inputs["participant_rounds"].tolist() == list(range(ROUNDS))
    assert inputs["participants"].shape == (ROUNDS, PARTICIPANTS)
    assert all(len(set(users)) == PARTICIPANTS for users in inputs["participants"].tolist())
    train, val, test = cifar.split_sizes(SAMPLES)
    for part, size in (("train", train), ("val", val), ("test", test)):
        assert inputs[f"{part}_sizes"].tolist() == [size] * 100
    assert inputs["order_sizes"].tolist() == [train] * (ROUNDS * PARTICIPANTS)
    assert sorted(recording["settings"]) == sorted(cifar.SETTINGS) == sorted(SETTINGS)
    for kept in recording["settings"].values():
        assert kept["rounds_kept"] == list(range(1, ROUNDS + 1))
        assert len(kept["models"]) == ROUNDS
        accuracies = kept["accuracies"] * test
        assert accuracies.shape == (cifar.EVALUATED,)
        assert torch.equal(accuracies, accuracies.round())


@FULL
@pytest.mark.slow
@pytest.mark.parametrize("setting", SETTINGS)
def test_a_server_step_moved_by_1e_8_fails_the_check(
    cifar, recorded_args, package_models, monkeypatch, capsys, setting
):
    """The package's aggregation of the setting's rule with its step w_next - w scaled by
    1 + 1e-8 in round 1: the check sees it."""
    one_round = Namespace(**{**vars(recorded_args), "rounds": 1})
    sim = cifar.simulation(one_round, setting)
    aggregate = type(sim.algorithm).aggregate

    def scaled_step(self, w, updates, ctx):
        w_next, info = aggregate(self, w, updates, ctx)
        return w + (1 + 1e-8) * (w_next - w), info

    monkeypatch.setattr(type(sim.algorithm), "aggregate", scaled_step)
    [moved] = cifar.every_round(sim)
    assert not torch.equal(moved, package_models[setting][0])
    kept = cifar.load_recording(RECORDING)["settings"][setting]
    assert cifar.relative_gap(moved, kept["models"][0], kept["positions"]) > recorded_args.rtol
    mutated = copy.copy(package_models)
    mutated[setting] = [moved, *package_models[setting][1:]]
    assert cifar.check(recorded_args, mutated) == 1
    assert "lockstep: FAILED" in capsys.readouterr().out


@FULL
@pytest.mark.slow
def test_the_recorded_inputs_are_what_the_package_draws(cifar, recorded_args):
    """The recording's partition is the package's ``sort: quicksort`` one (numpy 1.17's order,
    computed alike on every machine) and its participants and minibatch orders are the ones the
    package's seeds give, in every setting."""
    own = Namespace(**{**vars(recorded_args), "inputs": None})
    partition = cifar.cut_partition(
        make_partition("cifar10", recorded_args.raw_dir, "shards", 1, {"sort": "quicksort"}),
        recorded_args.samples,
    )
    rounds = list(range(recorded_args.rounds))
    for setting in cifar.SETTINGS:
        drawn = cifar.lockstep.recorded_inputs(cifar.simulation(own, setting), partition, rounds)
        assert sorted(drawn) == sorted(recorded_args.inputs)
        for name, values in drawn.items():
            assert torch.equal(values, recorded_args.inputs[name]), (setting, name)


def test_their_loader_reads_the_random_batches_as_the_package_does(cifar, fmt, tmp_path):
    """Random batches in CIFAR-10's format read by torchvision's ``CIFAR10`` as the authors'
    ``get_dataset`` calls it (download on, ``main/utils.py:L38-46``; ``torchvision_offline`` takes
    the download and the md5 checks away, and only while it lasts) and by the package: the same
    normalised pixels and labels, bit for bit."""
    from torchvision import datasets, transforms

    archive = fmt.write_cifar(tmp_path / "raw", per_batch=20, test_n=30, seed=3)
    authors = tmp_path / "Fed-MGDA" / "main"
    authors.mkdir(parents=True)
    cifar.extract_for_authors(archive, authors)
    root = authors.parent / "data" / "cifar"
    theirs = transforms.Compose([transforms.ToTensor(),
                                 transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    with cifar.torchvision_offline():
        train, test = (datasets.CIFAR10(root, train=split, download=True, transform=theirs)
                       for split in (True, False))
    package = cifar10.load(tmp_path / "raw", {})
    for dataset, (x, y) in ((train, (package.x, package.y)), (test, package.global_test["test"])):
        assert torch.equal(torch.stack([dataset[i][0] for i in range(len(dataset))]), x)
        assert dataset.targets == y.tolist()
    with pytest.raises(RuntimeError, match="corrupted"):  # the md5 checks are back
        datasets.CIFAR10(root, train=True, download=False)
