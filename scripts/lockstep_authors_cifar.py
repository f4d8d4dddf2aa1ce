"""Lockstep check: the authors' CIFAR-10 code and the package, fed the same inputs, round by round,
on CIFAR-10 batches of random pixels (the code path of the paper's Tables 8-11 and Figures 1-4, 7).

    git clone https://github.com/watml/Fed-MGDA /tmp/Fed-MGDA        # outside this repository
    pip install --target /tmp/authors-site quadprog tensorboardX tqdm  # the authors' imports
    export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"  # docs/protocol.md §8.19
    PYTHONPATH=/tmp/authors-site python scripts/lockstep_authors_cifar.py \\
        --authors /tmp/Fed-MGDA/main --record tests/data/authors_lockstep_cifar_seed1.pt.xz
    python scripts/lockstep_authors_cifar.py \\
        --recorded tests/data/authors_lockstep_cifar_seed1.pt.xz  # the package alone

The data (``write_random_cifar``): CIFAR-10's python batches in their real format (``data_batch_1``
.. ``5``, ``test_batch``, ``batches.meta``; pickled dicts with ``b"data"`` uint8 N x 3072 and
``b"labels"``), written by tests/data/conftest.py's ``write_cifar`` from ``--data-seed``: random
pixels, labels 0, 1, ..., 9 in turn (5 000 per class, as in CIFAR-10: the authors'
``noniid(dataset, 100, 500, 100)`` reads exactly 50 000 labels), a test batch of 100 images. The
tarball ``<work>/raw/cifar10/cifar-10-python.tar.gz`` is the package's raw file; its extracted
``cifar-10-batches-py/`` goes to the authors' ``../data/cifar/``, where their loader reads it.

The authors' ``main/federated_main.py`` runs as released (``runpy``, in their folder; no file of
theirs changed), with these changes from outside, named here:

- torchvision's ``CIFAR10``: no download (``download`` returns at once) and the md5 checks of the
  batch files accept any present file (the random batches are not the published ones);
- their arguments: those of their CIFAR-10 shards runs (``--dataset=cifar --iid=0``, one local
  epoch, ``--num_users=100``, ``--frac=0.1``: 10 participants per round) with b and lr of the
  setting (10 and 0.01, or 400 and 0.1);
- each user's index list of their partition cut to ``--samples`` (``SAMPLES``, 100 of 500) before
  their 80 / 10 / 10 split (``with_users_cut``): its first 80 training, 10 validation and 10 test
  samples, the package's partition cut alike (``cut_partition``), to keep the run small (a round
  trains 8 minibatches of 10 at b = 10, one full batch of 80 at b = 400; 500 keeps every sample);
- as in the F-MNIST check (scripts/lockstep_authors_fmnist.py, ``authors_code.FedFromOutside``):
  each round's participants and every participant's minibatch order are the package's, both
  codes compute in float64 (their ``CNNCifar`` built as released after their seed, then cast;
  samples cast as their loader yields them); ``CNNCifar`` has no dropout;
- time only: the participants' pre-round losses (``LocalUpdate.inference_trainloader``) are not
  computed (NaN; only q-FedAvg reads them), and after the last round users 0-9 are evaluated
  (``EVALUATED``), not all 100.

The package reads the random tarball with the registry's checksum set to that file's. The settings
(``SETTINGS``): FedAvg (``--epsilon=0 --normalize=0``) and FedMGDA+ (``--epsilon=1
--normalize=1``, eta 1, no decay) at b = 10 and b = 400. Checked first: the authors' partition is
the package's ``sort: quicksort`` one, index list for index list. Then, for every setting and each
of the ``--rounds`` (5), the largest absolute difference of the two global models relative to the
largest weight, within ``--rtol`` (1e-10), and after the last round the test accuracies of users
0-9 under the authors' model as each code evaluates it, which must be identical. Exit status 1
otherwise.

``--record FILE`` saves what a check without their code needs (xz-compressed ``torch.save``): the
inputs both codes were fed (the cut partition, participants, minibatch orders), ``--samples``, a
hash of the pixels, and of the authors' model after every round its values at ``SKETCH`` fixed
positions of every weight tensor (each tensor's largest weight among them) with the model's norm
and largest weight; ``--recorded FILE`` compares the package, fed those inputs, with that: the
differences at those positions and of the norms, relative to the largest weight and the norm, and
users 0-9's accuracies under the package's own model (tests/data/test_authors_lockstep_cifar.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import lzma
import os
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import torch

from fedmgda.client import evaluate_samples
from fedmgda.config import RunConfig
from fedmgda.data import DATASET_SPECS, Partition, make_partition, save_partition
from fedmgda.data.download import file_digest
from fedmgda.data.registry import load_raw, resolve_options
from fedmgda.metrics import per_owner_mean
from fedmgda.simulator import Simulation

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import authors_code  # noqa: E402  (the harness around the authors' code, beside this script)
import lockstep_authors_fmnist as lockstep  # noqa: E402  (recording and feeding the inputs)

ARCHIVE = "cifar-10-python.tar.gz"
TEST_IMAGES = 100
PARTICIPATION = 0.1  # 10 of the 100 users per round, as in the authors' CIFAR-10 scripts
SAMPLES = 100  # of each user's 500 samples, kept in both codes: 80 train, 10 val, 10 test
EVALUATED = 10  # users 0-9: their test accuracies after the last round are compared
FEDMGDA_PLUS = {"eta": 1.0, "decay": 0}
SETTINGS = {  # name: (algorithm, hparams, b, local lr, the authors' algorithm flags)
    "fedavg_b10": ("fedavg", {}, 10, 0.01, authors_code.FEDAVG),
    "fedmgda_plus_b10": ("fedmgda_plus", FEDMGDA_PLUS, 10, 0.01, ["--epsilon=1", "--normalize=1"]),
    "fedavg_b400": ("fedavg", {}, 400, 0.1, authors_code.FEDAVG),
    "fedmgda_plus_b400": ("fedmgda_plus", FEDMGDA_PLUS, 400, 0.1, ["--epsilon=1", "--normalize=1"]),
}
SKETCH = 512  # recorded positions per weight tensor


# ------------------------------------------------------------------------------ the random batches
def conftest_writers():
    """tests/data/conftest.py, whose ``write_cifar`` writes CIFAR-10's tarball in its format."""
    spec = importlib.util.spec_from_file_location(
        "data_conftest", HERE.parent / "tests" / "data" / "conftest.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_random_cifar(raw_dir: Path, data_seed: int) -> Path:
    """50 000 training and ``TEST_IMAGES`` test images of random pixels as
    ``raw_dir/cifar10/cifar-10-python.tar.gz``; the registry's checksum set to that file's."""
    path = raw_dir / "cifar10" / ARCHIVE
    if not path.is_file():
        conftest_writers().write_cifar(
            raw_dir, per_batch=10_000, test_n=TEST_IMAGES, seed=data_seed, compresslevel=1
        )
    trust_archive(raw_dir)
    return path


def trust_archive(raw_dir: Path) -> None:
    """The package's registry expects the random tarball's sha256 instead of the published md5."""
    spec = DATASET_SPECS["cifar10"]
    files = tuple(
        dataclasses.replace(rf, checksum="sha256:" + file_digest(rf.path(raw_dir), "sha256"))
        for rf in spec.raw_files
    )
    DATASET_SPECS["cifar10"] = dataclasses.replace(spec, raw_files=files)


def extract_for_authors(archive: Path, authors: Path) -> None:
    """The tarball's ``cifar-10-batches-py/`` into the authors' ``../data/cifar/``."""
    target = authors.parent / "data" / "cifar"
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(target, filter="data")


def pixels_hash(raw_dir: Path) -> str:
    """sha256 of the package's training and test tensors: the same random batches."""
    raw = load_raw("cifar10", raw_dir)
    h = hashlib.sha256(raw.x.numpy().tobytes())
    h.update(raw.global_test["test"][0].numpy().tobytes())
    return h.hexdigest()


@contextlib.contextmanager
def torchvision_offline():
    """torchvision's ``CIFAR10`` without its download and with the md5 checks of its batch files
    accepting any present file (the two changes of their loader)."""
    from torchvision.datasets import cifar

    saved = cifar.CIFAR10.download, cifar.check_integrity
    cifar.CIFAR10.download = lambda self: None
    cifar.check_integrity = lambda path, md5=None: os.path.isfile(path)
    try:
        yield
    finally:
        cifar.CIFAR10.download, cifar.check_integrity = saved


# ---------------------------------------------------------------------------------- the package
def split_sizes(samples: int) -> tuple[int, int, int]:
    """The train, val and test sizes of a user of ``samples`` samples, as the authors' 80 / 10 / 10
    split cuts them (``main/update.py:L41-47``) and the package's shards partition does."""
    if samples not in (100, 200, 300, 400, 500):  # their loaders' batches: a tenth of 10 or more
        raise SystemExit(f"--samples {samples}: one of 100, 200, 300, 400 and 500 is needed")
    return 8 * samples // 10, samples // 10, samples // 10


def cut_partition(partition: Partition, samples: int) -> Partition:
    """Each user's first train, val and test samples of ``partition`` (``split_sizes``)."""
    sizes = dict(zip(lockstep.PARTS, split_sizes(samples)))
    return dataclasses.replace(
        partition,
        **{part: [a[: sizes[part]] for a in getattr(partition, part)] for part in lockstep.PARTS},
    )


def cut_user(idxs: list, samples: int) -> list:
    """One user's index list of the authors' partition cut as ``cut_partition`` cuts the
    package's: their 80 / 10 / 10 split of the cut list is the cut of their split."""
    n = len(idxs)
    train, val, _ = split_sizes(samples)
    return [
        *idxs[:train],
        *idxs[int(0.8 * n) : int(0.8 * n) + val],
        *idxs[int(0.9 * n) : int(0.9 * n) + val],
    ]


def package_config(
    setting: str,
    seed: int,
    rounds: int,
    raw_dir: str,
    batched: bool,
    partition_file: str | None = None,
) -> RunConfig:
    """The package's run of a setting on the authors' CIFAR-10 partition (``sort: quicksort``),
    every user evaluated after the last round only."""
    algorithm, hparams, batch_size, lr, _ = SETTINGS[setting]
    return RunConfig(
        dataset="cifar10",
        algorithm=algorithm,
        hparams=dict(hparams),
        partition="shards",
        dataset_options={"sort": "quicksort"},
        raw_dir=raw_dir,
        batch_size=batch_size,
        local_lr=lr,
        momentum=0.5,
        participation=PARTICIPATION,
        rounds=rounds,
        seed=seed,
        eval_every=rounds,
        per_user_every=rounds,
        track_improvement=False,
        batched=batched,
        device="cpu",
        checkpoint_every=0,
        partition_file=partition_file,
    )


def simulation(args, setting: str, batched: bool = True) -> Simulation:
    """The package's side of a setting, without dropout, in float64, on its ``sort: quicksort``
    partition cut to ``args.samples`` per user (``cut_partition``); with ``args.inputs`` (a
    recording's), fed the recorded partition, participants and minibatch orders."""
    inputs = getattr(args, "inputs", None)
    if inputs is None:
        partition = cut_partition(
            make_partition("cifar10", args.raw_dir, "shards", args.seed, {"sort": "quicksort"}),
            args.samples,
        )
    else:
        partition = recorded_partition(inputs, args.seed, args.raw_dir)
    with tempfile.TemporaryDirectory() as tmp:
        part_file = save_partition(partition, Path(tmp) / "partition.npz")
        sim = Simulation(
            package_config(setting, args.seed, args.rounds, args.raw_dir, batched, str(part_file)),
            dtype=torch.float64,
            dropout=False,
        )
    return sim if inputs is None else lockstep.fed(sim, inputs)


def recorded_partition(inputs: dict[str, torch.Tensor], seed: int, raw_dir: str) -> Partition:
    """The recording's partition, with the metadata of the package's own ``sort: quicksort`` one."""
    options = resolve_options(DATASET_SPECS["cifar10"], {"sort": "quicksort"})
    return Partition(
        dataset="cifar10",
        scheme="shards",
        seed=seed,
        options=options,
        fingerprint=load_raw("cifar10", raw_dir, options).fingerprint(),
        **{part: lockstep.unflat(inputs, part) for part in lockstep.PARTS},
    )


def package_models(args, settings=tuple(SETTINGS)) -> dict[str, list[torch.Tensor]]:
    """The package's global model after every round of each setting (its batched path)."""
    return {setting: every_round(simulation(args, setting)) for setting in settings}


def every_round(sim: Simulation) -> list[torch.Tensor]:
    """The package's global model after each round, in order."""
    models = lockstep.package_rounds(sim, 0)
    return [models[t] for t in range(1, sim.cfg.rounds + 1)]


def first_users_accuracies(sim: Simulation, w: torch.Tensor, users: int) -> np.ndarray:
    """The test accuracies of users 0 .. users - 1 under ``w`` (``RunInputs.evaluate_users`` of
    those users' test samples)."""
    inputs = sim.inputs
    mine = inputs.test_owner < users
    _, correct = evaluate_samples(
        inputs.trainer.model,
        w.to(sim.device, sim.data.x.dtype),
        inputs.test_x[mine],
        inputs.test_y[mine],
    )
    return per_owner_mean(correct, inputs.test_owner[mine], users).cpu().numpy()


# ---------------------------------------------------------------------------------- their code
CIFAR_SHARDS = [
    "--dataset=cifar",
    "--model=cnn",
    "--iid=0",
    "--local_ep=1",
    f"--frac={PARTICIPATION}",
    "--num_users=100",
]


def without_pre_round_losses(update) -> None:
    """Their participants' pre-round losses, read by q-FedAvg only, not computed (time only)."""
    update.LocalUpdate.inference_trainloader = lambda self, model: (float("nan"), float("nan"))


def with_users_cut(update, samples: int) -> None:
    """Their ``LocalUpdate`` given each user's index list cut to ``samples`` (``cut_user``)
    before their 80 / 10 / 10 split: the package's cut partition."""
    split = update.LocalUpdate.train_val_test

    def cut_then_split(self, dataset, idxs):
        return split(self, dataset, cut_user(list(idxs), samples))

    update.LocalUpdate.train_val_test = cut_then_split


def their_changes(samples: int):
    """The changes of their ``update`` module (``authors_code.authors_rounds_fed``'s ``also``)."""

    def change(update) -> None:
        without_pre_round_losses(update)
        with_users_cut(update, samples)

    return change


def authors_run(args, setting: str, sim: Simulation) -> authors_code.FedFromOutside:
    """Their ``federated_main.py`` on the random batches for a setting, fed the package's
    participants and minibatches (``authors_code.FedFromOutside``)."""
    _, _, batch_size, lr, flags = SETTINGS[setting]
    participants = [sim.participants(t) for t in range(args.rounds)]
    fed = authors_code.FedFromOutside(
        participants,
        lambda t, user: lockstep.minibatches(sim, t, user),
        dropout=False,
        dtype=torch.float64,
        model="CNNCifar",
        once=False,
        evaluated=EVALUATED,
    )
    argv = [*CIFAR_SHARDS, f"--local_bs={batch_size}", f"--lr={lr}", *flags, f"--seed={args.seed}"]
    with torchvision_offline():
        return authors_code.authors_rounds_fed(
            args.authors, fed, argv, also=their_changes(args.samples)
        )


def same_users(groups: dict, partition: Partition) -> int:
    """Users whose index list in the authors' partition is the package's, in the same order."""
    return sum(
        np.array_equal(np.asarray(groups[u]).astype(np.int64), partition.user_indices(u))
        for u in range(partition.num_users)
    )


# --------------------------------------------------------------------------- what a recording keeps
def sketch_positions(model: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """``SKETCH`` fixed positions of every weight tensor (all of a smaller one), and each
    tensor's largest weight of ``model``."""
    generator, positions, start = torch.Generator().manual_seed(0), [], 0
    for size in sizes:
        chosen = torch.randperm(size, generator=generator)[:SKETCH]
        largest = model[start : start + size].abs().argmax()
        positions.append(start + torch.unique(torch.cat([chosen, largest.view(1)])))
        start += size
    return torch.cat(positions)


def sketch(model: torch.Tensor, positions: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"values": model[positions].clone(), "norm": model.norm(), "largest": model.abs().max()}


def relative_gap(
    own: torch.Tensor, theirs: dict[str, torch.Tensor], positions: torch.Tensor
) -> float:
    """The largest |difference| at the kept positions, and of the norms, relative to their
    largest weight and norm."""
    at = float((own[positions] - theirs["values"]).abs().max() / theirs["largest"])
    return max(at, float((own.norm() - theirs["norm"]).abs() / theirs["norm"]))


def save_recording(path: Path, recording: dict) -> None:
    buffer = io.BytesIO()
    torch.save(recording, buffer)
    path.write_bytes(lzma.compress(buffer.getvalue(), preset=9))


def load_recording(path: Path) -> dict:
    return torch.load(io.BytesIO(lzma.decompress(path.read_bytes())), weights_only=True)


def authors_record(args, settings: tuple[str, ...]) -> dict:
    """Their code on every setting, kept as a recording: {setting: every round's sketch}, the last
    round's per-user accuracies, the inputs both codes were fed; in it also their full models
    (``full``, not saved) and how many users' index lists equal the package's (``same_users``)."""
    extract_for_authors(Path(args.raw_dir) / "cifar10" / ARCHIVE, args.authors)
    first = simulation(args, settings[0])  # one at a time: each holds the samples in float64
    partition = make_partition(
        "cifar10", args.raw_dir, "shards", args.seed, first.cfg.dataset_options
    )
    rounds = list(range(args.rounds))
    inputs = lockstep.recorded_inputs(first, cut_partition(partition, args.samples), rounds)
    sizes = [p.numel() for p in first.model.module.parameters()]
    del first
    record = {
        "seed": args.seed,
        "rounds": args.rounds,
        "samples": args.samples,
        "data_seed": args.data_seed,
        "pixels": pixels_hash(Path(args.raw_dir)),
        "inputs": inputs,
        "settings": {},
    }
    full, same = {}, {}
    for setting in settings:
        sim = simulation(args, setting)
        drawn = lockstep.recorded_inputs(sim, cut_partition(partition, args.samples), rounds)
        if any(not torch.equal(drawn[k], inputs[k]) for k in inputs):
            raise SystemExit(
                f"{setting}: the package draws other participants or minibatch orders "
                f"than in {settings[0]}"
            )
        fed = authors_run(args, setting, sim)
        full[setting], same[setting] = fed.global_models, same_users(fed.groups, partition)
        positions = sketch_positions(fed.global_models[-1], sizes)
        record["settings"][setting] = {
            "positions": positions,
            "accuracies": torch.tensor(fed.accuracies, dtype=torch.float64),
            "rounds_kept": list(range(1, args.rounds + 1)),
            "models": [sketch(w, positions) for w in fed.global_models],
        }
    if args.record is not None:
        save_recording(args.record, record)
    return {**record, "full": full, "same_users": same}


def check(args, own: dict[str, list[torch.Tensor]] | None = None) -> int:
    """Both codes with the same inputs: the partition first, then for every setting the global
    models of every round (every weight, when their code runs now) within ``--rtol`` and
    the per-user test accuracies after the last round identical. ``own``: the package's
    ``package_models``, if already computed."""
    if args.recorded is not None:
        theirs = load_recording(args.recorded)
        if (theirs["seed"], theirs["rounds"]) != (args.seed, args.rounds):
            raise SystemExit(
                f"{args.recorded}: recorded for seed {theirs['seed']}, {theirs['rounds']} rounds; "
                "run with those options"
            )
        if pixels_hash(Path(args.raw_dir)) != theirs["pixels"]:
            raise SystemExit(
                f"{args.raw_dir}: the random batches differ from the recording's "
                f"(--data-seed {theirs['data_seed']})"
            )
    else:
        theirs = authors_record(args, tuple(args.settings))
    own = own if own is not None else package_models(args, tuple(theirs["settings"]))
    failed = False
    if "same_users" in theirs:
        for setting, same in theirs["same_users"].items():
            failed |= same < 100
            print(
                f"{setting}: users whose index list in the authors' partition is the "
                f"package's (sort: quicksort): {same}/100"
            )
    print(
        f"seed {args.seed}, float64, {args.rounds} rounds, {round(100 * PARTICIPATION)} "
        f"participants per round, {args.samples} samples per user, the same participants and "
        "minibatches in both codes; "
        "largest |difference| / largest |weight| of the global models:"
    )
    for setting, kept in theirs["settings"].items():
        failed |= check_setting(
            args, setting, own[setting], kept, theirs.get("full", {}).get(setting)
        )
    print(
        "lockstep: "
        + ("FAILED" if failed else f"passed (within {args.rtol:g}; the evaluations identical)")
    )
    return 1 if failed else 0


def check_setting(
    args, setting: str, own: list[torch.Tensor], kept: dict, full: list[torch.Tensor] | None
) -> bool:
    """One setting's lines; True where it fails."""
    if full is not None:  # their code ran now: every round, every weight
        everything = torch.arange(full[0].numel())
        gaps = {
            t + 1: relative_gap(own[t], sketch(w, everything), everything)
            for t, w in enumerate(full)
        }
    else:
        gaps = {
            t: relative_gap(own[t - 1], model, kept["positions"])
            for t, model in zip(kept["rounds_kept"], kept["models"])
        }
    model = (
        full[-1] if full is not None else own[-1]
    )  # without their full model: the package's evaluates
    accuracies = first_users_accuracies(simulation(args, setting), model, EVALUATED)
    differ = int((np.abs(accuracies - kept["accuracies"].numpy()) > 0).sum())
    whose = (
        "the authors' model evaluated by both codes" if full is not None else "each code's model"
    )
    print(
        f"{setting:18s} | "
        + ", ".join(f"round {t}: {gap:.1e}" for t, gap in gaps.items())
        + f" | {whose}, users whose test accuracy differs: {differ}/{len(accuracies)}"
    )
    return max(gaps.values()) > args.rtol or differ > 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--authors", type=Path, help="the main/ folder of a watml/Fed-MGDA checkout"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/cifar-lockstep"),
        help=f"where the random batches are written (raw/cifar10/{ARCHIVE})",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--samples",
        type=int,
        default=SAMPLES,
        help="samples kept per user, of its 500 (100, 200, ..., 500: 80 %% train, 10 %% val, "
        "10 %% test; with --recorded, the recording's)",
    )
    parser.add_argument("--data-seed", type=int, default=1, help="the random pixels' seed")
    parser.add_argument("--settings", nargs="+", choices=tuple(SETTINGS), default=tuple(SETTINGS))
    parser.add_argument(
        "--rtol", type=float, default=1e-10, help="largest relative difference allowed"
    )
    parser.add_argument("--record", type=Path, help="also save the recording here (.pt.xz)")
    parser.add_argument(
        "--recorded",
        type=Path,
        help="compare with this recording instead of running the authors' code",
    )
    args = parser.parse_args()
    if (args.authors is None) == (args.recorded is None):
        parser.error(
            "give one of --authors (run their code) and --recorded (compare with a recording)"
        )
    split_sizes(args.samples)  # a bad --samples stops here, with one line
    args.authors = args.authors.resolve() if args.authors is not None else None
    args.raw_dir = str((args.work / "raw").resolve())
    args.inputs = None
    if args.recorded is not None:
        recording = load_recording(args.recorded)
        args.data_seed, args.inputs = recording["data_seed"], recording["inputs"]
        args.samples = recording["samples"]
    write_random_cifar(Path(args.raw_dir), args.data_seed)
    torch.set_num_threads(1)
    sys.exit(check(args))


if __name__ == "__main__":
    main()
