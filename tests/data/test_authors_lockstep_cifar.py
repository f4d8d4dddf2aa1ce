"""The lockstep check with the authors' CIFAR-10 code (scripts/lockstep_authors_cifar.py) against a
recording of their side, so that it runs without their code: FedAvg and FedMGDA+ at b = 10 and
b = 400 on the authors' CIFAR-10 partition of random-pixel batches in CIFAR-10's real format,
seed 1, 3 rounds of 2 participants, the package's participants and minibatches fed to their
``federated_main.py``, both codes in float64. Recorded by

    NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" PYTHONPATH=/tmp/authors-site \\
        python scripts/lockstep_authors_cifar.py --authors /tmp/Fed-MGDA/main \\
        --record tests/data/authors_lockstep_cifar_seed1.pt.xz

(watml/Fed-MGDA as released, numpy 2.4.6 with its SIMD sorts off, torch 2.14.1 and torchvision
0.29.1 on the CPU): of their global models after rounds 1 and 3, the values at fixed positions of
every weight tensor with the norm and largest weight; users 0-9's test accuracies after round 3; the
inputs both codes were fed and a hash of the random pixels, which the test writes again from their
seed."""

import copy
import importlib.util
import os
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from fedmgda.algorithms.averaging import WeightedUpdates
from fedmgda.data import DATASET_SPECS, cifar10, make_partition

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "authors_lockstep_cifar_seed1.pt.xz"
MUTATED = "fedavg_b400"  # the setting whose server step the mutation test moves
# The package's four CIFAR-10 runs in float64 take minutes and up to ~9 GB at b = 400: run them
# with FEDMGDA_LOCKSTEP_CIFAR=1 (the loader test below always runs).
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
            rounds=3,
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


@FULL
@pytest.mark.slow
def test_a_server_step_moved_by_1e_8_fails_the_check(
    cifar, recorded_args, package_models, monkeypatch, capsys
):
    """The package's server step eta_t scaled by 1 + 1e-8 in round 1 of one setting: the check
    sees it."""
    step_size = WeightedUpdates.step_size
    monkeypatch.setattr(
        WeightedUpdates, "step_size", lambda self, t: step_size(self, t) * (1 + 1e-8)
    )
    one_round = Namespace(**{**vars(recorded_args), "rounds": 1})
    [moved] = cifar.lockstep.package_rounds(cifar.simulation(one_round, MUTATED))
    assert not torch.equal(moved, package_models[MUTATED][0])
    mutated = copy.copy(package_models)
    mutated[MUTATED] = [moved, *package_models[MUTATED][1:]]
    assert cifar.check(recorded_args, mutated) == 1
    out = capsys.readouterr().out
    assert "lockstep: FAILED" in out
    kept = cifar.load_recording(RECORDING)["settings"][MUTATED]
    assert cifar.relative_gap(moved, kept["models"][0], kept["positions"]) > recorded_args.rtol


@FULL
@pytest.mark.slow
def test_the_recorded_inputs_are_what_the_package_draws(cifar, recorded_args):
    """The recording's partition is the package's ``sort: quicksort`` one (numpy 1.17's order,
    computed alike on every machine) and its participants and minibatch orders are the ones the
    package's seeds give, in every setting."""
    own = Namespace(**{**vars(recorded_args), "inputs": None})
    partition = make_partition("cifar10", recorded_args.raw_dir, "shards", 1, {"sort": "quicksort"})
    for setting in cifar.SETTINGS:
        drawn = cifar.lockstep.recorded_inputs(cifar.simulation(own, setting), partition)
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
