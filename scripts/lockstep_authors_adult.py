"""Lockstep check: the authors' Adult code and the package, fed the same inputs, each round.

    git clone https://github.com/watml/Fed-MGDA /tmp/Fed-MGDA          # outside this repository
    pip install --target /tmp/authors-site-adult quadprog tensorboardX  # what the venv lacks
    PYTHONPATH=/tmp/authors-site-adult python scripts/lockstep_authors_adult.py \\
        --authors /tmp/Fed-MGDA/adult --seed 1 --rounds 5

The authors' ``adult/federated_main.py`` (their Adult code, docs/protocol.md §1.5, §4.5, §5.1)
runs as released (``runpy``, no file of theirs changed; ``scripts/authors_code.py``), beside the
package on the same Adult arrays, both in float64, for each rule of ``RUNS``: FedAvg, FedMGDA+
(Table 7's), AFL and q-FedAvg, without and with the bias attack of the PhD client (user 0).

The arrays: the package builds them from the raw UCI files (``resources/raw/adult/``,
``fedmgda.data.adult``); where the authors ship a dump (``adult/data/adult/numpy/``: the label
files, ``X_train_phd``, ``X_test_phd``; a checkout may lack the other feature dumps) it must
equal the package's array (``check_dumps``). Their script reads the package's arrays, written in
the format of their dumps (float64 features, int64 labels) to a scratch working directory.

What is set from outside, on their imported modules (``TheirRun``), and nothing else:

- minibatch orders: the training loader of ``LocalUpdate.update_weights`` (``adult/update.py``)
  yields the package's minibatches of that (round, user) instead of its own shuffle, and the
  pre-round loss of ``inference_trainloader`` (q-FedAvg's F_i, docs/protocol.md §3.9) reads the
  user's training samples in order in batches of ``local_bs``, as the package's does;
- float64: ``Adult`` built as released (after their seed) and then cast; its ``forward`` casts
  the samples to float64 where the released one casts them to float32 (``x.float()``,
  ``adult/models.py``);
- the bias attack: user 0's reported losses + b, in AFL's lambda ascent (the mean local loss
  ``update_weights`` returns) and in q-FedAvg's F_0 (``inference_trainloader``), the hook the
  released code has with b = 0.0 (``adult/federated_main.py:L238-252``; docs/protocol.md §5.1);
- the final model: ``average_weights`` of no iterates (their script keeps iterates for AFL only
  and fails on the others, docs/protocol.md §8.10) returns the last global model;
- no event files (``authors_code.NullWriter``).

Their flags and the package's run config (``THEIR_COMMON``, ``THEIR_FLAGS``, ``PACKAGE``), each
line: their flags (``adult/options.py``; where ``adult/federated_main.py`` reads them) -> the
package's run config (docs/protocol.md section); Table 7's values (§5.1):

- ``--dataset=adult --iid=0 --num_users=2`` (sampling.py:L54-83, utils.py:L35) -> ``dataset:
  adult``, ``partition: domain``, ``shift_by_one: true`` (§1.5);
- ``--frac=1``, users [0, 1] in every round (federated_main.py:L139) -> ``participation: 1.0``
  (§5.1);
- ``--local_ep=1 --local_bs=10 --lr=0.01`` (options.py:L21-26) -> ``local_epochs: 1``,
  ``batch_size: 10``, ``local_lr: 0.01`` (§3.3);
- SGD momentum 0.5, hard-coded (update.py:L71-72; ``--momentum`` is unused) -> ``momentum: 0.5``
  (§3.2);
- ``--normalize=0 --epsilon=0``: weights (0.5, 0.5), step 1 (federated_main.py:L203-222) ->
  ``fedavg``, uniform weights (§4.5);
- ``--normalize=1 --epsilon=1 --global_lr=1 --global_lr_decay=0.8027`` (L203-222) ->
  ``fedmgda_plus``, ``eta: 1``, ``beta: 0.8027`` (§4.4; Table 7's decay 1/3 at T = 500, which
  acts from round 101 only);
- ``--afl=1 --lr_lambda=0.5 --lr_afl_weight=1`` with ``--lr=0.01`` (L187-200) -> ``afl``,
  ``gamma_lambda: 0.5``, ``gamma_w: 0.01``, ``afl_gamma_w: local_lr`` (§4.5, §8.11);
- ``--qffl=5 --Lipschitz_constant=1`` (L223-257; F_i as update.py:L222-224) -> ``qfedavg``,
  ``q: 5``, ``L: 1``, ``qffl_loss: batch_sum_per_sample`` (§4.5, §8.8);
- the bias hook ``+ 0.0`` of user 0 (L238-252) -> ``attack: {kind: bias, user: 0, value: b}``
  (§5.1);
- ``average_weights(list_models)`` tested (L343-354) -> ``final_model: auto``: AFL's average
  iterate, the others' last (§8.10).

Printed for every run: the largest absolute difference of the two global models after each round
and of the tested final model, relative to their largest weight, which must stay within
``--rtol`` (1e-10); and the final model's accuracy on the three global test sets (Uniform, PhD,
non-PhD) as each code computes it, which must count as many samples correct. Exit
status 1 otherwise. ``--record FILE`` saves the authors' side and the inputs both codes were fed
(the partition, every minibatch order); ``--recorded FILE`` compares with such a recording
instead of running their code (tests/data/test_authors_lockstep_adult.py).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from fedmgda.config import AttackConfig, RunConfig
from fedmgda.data import make_partition, save_partition
from fedmgda.data.registry import load_raw
from fedmgda.scheduler import derived_seed, run_packed
from fedmgda.simulator import Simulation

sys.path.insert(0, str(Path(__file__).resolve().parent))
import authors_code  # noqa: E402  (the harness around the authors' code, beside this script)

# their example command (adult/example_command.txt) without the rule's flags and the rounds
THEIR_COMMON = [
    "--dataset=adult",
    "--model=lr",
    "--iid=0",
    "--local_ep=1",
    "--momentum=0",
    "--frac=1",
    "--local_bs=10",
    "--inference=0",
    "--num_users=2",
    "--lr=0.01",
]
# Table 7's decay 1/3 at T = 500 as the code's flag: (1/3)^(100/500) (docs/protocol.md §4.4)
FEDMGDA_PLUS_BETA = 0.8027
THEIR_FLAGS = {
    "fedavg": ["--normalize=0", "--epsilon=0"],
    "fedmgda_plus": [
        "--normalize=1",
        "--epsilon=1",
        "--global_lr=1",
        f"--global_lr_decay={FEDMGDA_PLUS_BETA}",
    ],
    "afl": ["--normalize=0", "--epsilon=0", "--afl=1", "--lr_lambda=0.5", "--lr_afl_weight=1"],
    "qfedavg": ["--normalize=0", "--epsilon=0", "--qffl=5", "--Lipschitz_constant=1"],
}
PACKAGE = {
    "fedavg": {"algorithm": "fedavg"},
    "fedmgda_plus": {
        "algorithm": "fedmgda_plus",
        "hparams": {"eta": 1.0, "beta": FEDMGDA_PLUS_BETA},
    },
    "afl": {
        "algorithm": "afl",
        "hparams": {"gamma_w": 0.01, "gamma_lambda": 0.5},
        "afl_gamma_w": "local_lr",
    },
    "qfedavg": {
        "algorithm": "qfedavg",
        "hparams": {"q": 5.0, "L": 1.0},
        "qffl_loss": "batch_sum_per_sample",
    },
}
# (rule, bias of the PhD client): every rule plainly; each loss-reading rule and FedMGDA+ attacked
RUNS = (
    ("fedavg", 0.0),
    ("fedmgda_plus", 0.0),
    ("fedmgda_plus", 1000.0),
    ("afl", 0.0),
    ("afl", 1.0),
    ("qfedavg", 0.0),
    ("qfedavg", 1000.0),
)
USERS = (0, 1)  # phd, non_phd: both take part in every round
TEST_SETS = ("uniform", "phd", "non_phd")


def run_name(rule: str, bias: float) -> str:
    return f"{rule}_b{bias:g}"


RUN_OF = {run_name(rule, bias): (rule, bias) for rule, bias in RUNS}


def package_config(
    rule: str, bias: float, seed: int, rounds: int, raw_dir: str, partition_file: str | None = None
) -> RunConfig:
    """The package's run of ``rule`` on Adult as the authors' Adult code runs it (the flags of the
    module docstring), the PhD client (user 0) adding ``bias`` to its reported losses."""
    attack = AttackConfig("bias", 0, bias) if bias else AttackConfig()
    return RunConfig(
        dataset="adult",
        partition="domain",
        dataset_options={"shift_by_one": True},
        raw_dir=raw_dir,
        batch_size=10,
        local_lr=0.01,
        momentum=0.5,
        local_epochs=1,
        participation=1.0,
        rounds=rounds,
        seed=seed,
        eval_every=rounds,
        per_user_every=rounds,
        track_improvement=False,
        device="cpu",
        checkpoint_every=0,
        partition_file=partition_file,
        attack=attack,
        **PACKAGE[rule],
    )


# ------------------------------------------------------------------------------ the Adult arrays
def package_arrays(raw_dir: str) -> dict[str, np.ndarray]:
    """The package's Adult arrays under the names and in the format of the authors' dumps
    (``adult/data/adult/numpy/``: float64 features, int64 labels)."""
    raw = load_raw("adult", raw_dir, {})
    x, y = raw.x.numpy().astype(np.float64), raw.y.numpy()
    arrays = {"X_train": x, "y_train": y}
    for name, (xs, ys) in raw.global_test.items():
        suffix = "" if name == "uniform" else f"_{name}"
        arrays[f"X_test{suffix}"], arrays[f"y_test{suffix}"] = (
            xs.numpy().astype(np.float64),
            ys.numpy(),
        )
    phd = x[:, 21] == 1
    for suffix, rows in (("_phd", phd), ("_non_phd", ~phd)):
        arrays[f"X_train{suffix}"], arrays[f"y_train{suffix}"] = x[rows], y[rows]
    return arrays


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 of the arrays (name, dtype, shape, bytes, in name order)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def check_dumps(authors: Path, arrays: dict[str, np.ndarray]) -> bool:
    """The authors' shipped dumps equal the package's arrays, element by element and in dtype;
    prints which dumps their checkout holds. False if one differs."""
    folder = authors / "data" / "adult" / "numpy"
    equal, missing = [], []
    for name, ours in arrays.items():
        path = folder / f"{name}.npy"
        if not path.is_file():
            missing.append(name)
            continue
        theirs = np.load(path, allow_pickle=False)
        if theirs.dtype != ours.dtype or not np.array_equal(theirs, ours):
            print(
                f"{path}: differs from the package's {name} ({theirs.dtype} {theirs.shape} vs "
                f"{ours.dtype} {ours.shape})"
            )
            return False
        equal.append(name)
    print(
        f"the authors' dumps equal to the package's arrays: {', '.join(equal)}; "
        f"not in their checkout: {', '.join(missing) or 'none'}"
    )
    return True


# ------------------------------------------------------------------------------ the inputs fed
PARTS = ("train", "val", "test")


def flat(lists) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, values) of a list of index arrays, as uint16 (every Adult index fits)."""
    return (
        np.asarray([len(a) for a in lists], dtype=np.int32),
        np.concatenate([np.asarray(a, dtype=np.uint16) for a in lists]),
    )


def unflat(inputs: dict[str, np.ndarray], name: str) -> list[np.ndarray]:
    sizes, values = inputs[f"{name}_sizes"], inputs[f"{name}_idx"].astype(np.int64)
    return np.split(values, np.cumsum(sizes)[:-1])


def minibatches(sim: Simulation, t: int, user: int) -> list[list[int]]:
    """The package's minibatches of (round t, user): positions into the user's train samples, from
    the client's seed key as ``scheduler.train_one`` draws them."""
    generator = torch.Generator().manual_seed(derived_seed(sim.cfg.seed, t, user))
    return [
        b.tolist()
        for b in sim.trainer.minibatches.batch_order(len(sim.data.train_idx[user]), generator)
    ]


def drawn_inputs(seed: int, rounds: int, raw_dir: str) -> dict[str, np.ndarray]:
    """What both codes are fed, as the package draws it: the partition's index lists and every
    (round, user)'s minibatch order (its positions, all minibatches in a row; rounds outer, users
    inner). The orders come from the client's seed key, the same for every rule of a seed."""
    sim = Simulation(package_config("fedavg", 0.0, seed, rounds, raw_dir), dtype=torch.float64)
    partition = make_partition("adult", raw_dir, "domain", seed, sim.cfg.dataset_options)
    inputs = {
        f"{part}_{what}": values
        for part in PARTS
        for what, values in zip(("sizes", "idx"), flat(getattr(partition, part)))
    }
    orders = [
        [i for batch in minibatches(sim, t, u) for i in batch] for t in range(rounds) for u in USERS
    ]
    inputs["order_sizes"], inputs["order_idx"] = flat(orders)
    return inputs


def batch_orders(
    inputs: dict[str, np.ndarray], rounds: int
) -> Callable[[int, int], list[list[int]]]:
    """(round, user) -> the fed minibatches (positions, ``local_bs`` = 10 a batch)."""
    orders = unflat(inputs, "order")

    def batches(t: int, user: int) -> list[list[int]]:
        order = orders[t * len(USERS) + user].tolist()
        return [order[i : i + 10] for i in range(0, len(order), 10)]

    if len(orders) != rounds * len(USERS):
        raise SystemExit(
            f"the fed minibatch orders are for {len(orders)} (round, user) pairs, "
            f"not {rounds * len(USERS)}"
        )
    return batches


def fed_simulation(
    rule: str, bias: float, seed: int, rounds: int, raw_dir: str, inputs: dict[str, np.ndarray]
) -> Simulation:
    """The package's run, in float64, with the fed partition and minibatch orders (looked up by the
    client's seed key, ``derived_seed(seed, round, user)``)."""
    own = make_partition("adult", raw_dir, "domain", seed, {"shift_by_one": True})
    fed_partition = dataclasses.replace(own, **{part: unflat(inputs, part) for part in PARTS})
    with tempfile.TemporaryDirectory() as tmp:
        part_file = save_partition(fed_partition, Path(tmp) / "partition.npz")
        sim = Simulation(
            package_config(rule, bias, seed, rounds, raw_dir, str(part_file)), dtype=torch.float64
        )
    keys = [derived_seed(seed, t, u) for t in range(rounds) for u in USERS]
    orders = dict(zip(keys, (torch.from_numpy(o) for o in unflat(inputs, "order"))))
    # one local epoch: its order is the fed one of the client's seed key
    sim.trainer.minibatches.epoch_order = lambda n, generator: orders[generator.initial_seed()]
    return sim


def package_run(sim: Simulation) -> dict[str, np.ndarray]:
    """The package's run (``run_packed``, as a run of the workflow): its global model after every
    round, the tested final model and that model's accuracy on the three global test sets."""
    models: list[torch.Tensor] = []
    played = sim.round

    def round_recorded(w, t):
        record = yield from played(w, t)
        models.append(record.w_next.detach().clone())
        return record

    sim.round = round_recorded
    result = run_packed([sim], [None])[0]
    final = result.summary["final"]
    return {
        "models": torch.stack(models).numpy(),
        "final": result.final_weights.detach().numpy(),
        "test_acc": np.array([final[f"test_acc_{name}"] for name in TEST_SETS]),
    }


# ------------------------------------------------------------------------------ their run
class TheirRun:
    """The patches on the authors' Adult modules (the module docstring's list) and what they
    record: each user's index set as their ``get_dataset`` builds it, the global model after every
    ``load_state_dict`` (every round's, then the tested final model) and the accuracies of
    ``test_inference``."""

    def __init__(
        self, batches: Callable[[int, int], list[list[int]]], bias: float, dtype: torch.dtype
    ):
        self.batches, self.bias, self.dtype = batches, bias, dtype
        self.groups: dict[int, set] = {}
        self.models: list[torch.Tensor] = []
        self.states: list[dict[str, torch.Tensor]] = []
        self.test_acc: list[float] = []

    def patch(self, utils, update, their_models, tensorboardX) -> None:
        self._patch_data(utils, update)
        self._patch_model(their_models, utils)
        tensorboardX.SummaryWriter = authors_code.NullWriter

    def _patch_data(self, utils, update) -> None:
        run = self
        get_dataset, built = utils.get_dataset, update.LocalUpdate.__init__
        train, pre_round, test = (
            update.LocalUpdate.update_weights,
            update.LocalUpdate.inference_trainloader,
            update.test_inference,
        )

        def dataset_recorded(args):
            train_dataset, test_dataset, groups = get_dataset(args)
            run.groups = groups
            return train_dataset, test_dataset, groups

        def built_for_user(self, args, dataset, idxs, logger):
            built(self, args, dataset, idxs, logger)  # federated_main passes idxs=user_groups[idx]
            self.user = next(u for u, group in run.groups.items() if group is idxs)

        def update_weights(self, model, global_round):
            self.trainloader = DataLoader(
                self.trainloader.dataset, batch_sampler=run.batches(global_round, self.user)
            )
            difference, loss, *rest = train(self, model, global_round)
            return (difference, loss + run.user_bias(self.user), *rest)

        def inference_trainloader(self, model):
            n, size = len(self.trainloader.dataset), self.args.local_bs
            in_order = [list(range(i, min(i + size, n))) for i in range(0, n, size)]
            self.trainloader = DataLoader(self.trainloader.dataset, batch_sampler=in_order)
            accuracy, loss = pre_round(self, model)
            return accuracy, loss + run.user_bias(self.user)

        def test_inference(args, model, test_dataset):
            accuracy, loss = test(args, model, test_dataset)
            run.test_acc.append(accuracy)
            return accuracy, loss

        utils.get_dataset, update.LocalUpdate.__init__ = dataset_recorded, built_for_user
        update.LocalUpdate.update_weights, update.LocalUpdate.inference_trainloader = (
            update_weights,
            inference_trainloader,
        )
        update.test_inference = test_inference

    def _patch_model(self, their_models, utils) -> None:
        run = self
        built, load, average = (
            their_models.Adult.__init__,
            their_models.Adult.load_state_dict,
            utils.average_weights,
        )

        def built_then_cast(self, *a, **k):
            built(self, *a, **k)  # their model, built as released (after their seed), then cast
            self.to(run.dtype)

        def forward(self, x):  # adult/models.py, x.float() (float32) replaced by the run's dtype
            return torch.nn.functional.log_softmax(self.lin(x.to(run.dtype)), dim=1)

        def load_recorded(self, state_dict, *a, **k):
            loaded = load(self, state_dict, *a, **k)
            run.states.append(copy.deepcopy(self.state_dict()))
            run.models.append(torch.cat([p.detach().flatten() for p in self.parameters()]).clone())
            return loaded

        def average_or_last(models):  # no iterates kept (all rules but AFL): the last global model
            return average(models) if models else copy.deepcopy(run.states[-1])

        their_models.Adult.__init__, their_models.Adult.forward = built_then_cast, forward
        their_models.Adult.load_state_dict, utils.average_weights = load_recorded, average_or_last

    def user_bias(self, user: int) -> float:
        return self.bias if user == 0 else 0.0


def authors_run(
    authors: Path,
    arrays: dict[str, np.ndarray],
    rule: str,
    bias: float,
    seed: int,
    rounds: int,
    batches: Callable[[int, int], list[list[int]]],
) -> tuple[dict[str, np.ndarray], dict[int, set]]:
    """Their ``adult/federated_main.py`` for ``rounds`` rounds of ``rule`` in float64 on ``arrays``
    (written as their dumps to a scratch working directory, ``./data/adult/numpy/``), fed
    ``batches`` (:class:`TheirRun`): its global model after every round, the tested final model,
    that model's three test accuracies, and each user's index set."""
    with tempfile.TemporaryDirectory() as workdir:
        folder = Path(workdir) / "data" / "adult" / "numpy"
        folder.mkdir(parents=True)
        for name, values in arrays.items():
            np.save(folder / f"{name}.npy", values)
        with authors_code.code_on_path(authors, Path(workdir)):
            import models as their_models
            import tensorboardX
            import update
            import utils

            run = TheirRun(batches, bias, torch.float64)
            run.patch(utils, update, their_models, tensorboardX)
            argv = [*THEIR_COMMON, *THEIR_FLAGS[rule], f"--epochs={rounds}", f"--seed={seed}"]
            with (
                open(os.devnull, "w") as null,
                contextlib.redirect_stdout(null),
                contextlib.redirect_stderr(null),
            ):
                authors_code.run_federated_main(authors, argv)
    if len(run.models) != rounds + 1 or len(run.test_acc) < len(TEST_SETS):
        raise SystemExit(
            f"{authors}: their run of {run_name(rule, bias)} stored {len(run.models)} models and "
            f"{len(run.test_acc)} test accuracies; expected {rounds + 1} and at least "
            f"{len(TEST_SETS)}"
        )
    record = {
        "models": torch.stack(run.models[:rounds]).numpy(),
        "final": run.models[rounds].numpy(),
        "test_acc": np.array(run.test_acc[-len(TEST_SETS) :]),
    }
    return record, run.groups


def same_clients(groups: dict[int, set], inputs: dict[str, np.ndarray]) -> bool:
    """Their users' training samples (the first 80 % of each index set in its iteration order,
    ``adult/update.py:L45``) are the fed partition's, index for index."""
    train = unflat(inputs, "train")
    return all(
        np.array_equal(
            np.array(list(groups[u])[: int(0.8 * len(groups[u]))], dtype=np.int64), train[u]
        )
        for u in USERS
    )


# ------------------------------------------------------------------------------ the check
def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def correct_counts(accuracies: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The number of test samples correct behind each accuracy of ``TEST_SETS`` (the package's
    accuracy is a float32 mean, the authors' a float64 quotient: they agree on the count)."""
    sizes = [len(arrays["y_test" if name == "uniform" else f"y_test_{name}"]) for name in TEST_SETS]
    return np.rint(np.asarray(accuracies) * np.array(sizes)).astype(np.int64)


def authors_records(
    args, arrays: dict[str, np.ndarray]
) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The authors' side of every run, {run: record}, and the inputs both codes are fed: run now
    (``--authors``; with ``--record``, saved) or read from a recording (``--recorded``)."""
    if args.recorded is not None:
        return read_recording(args.recorded, args.seed, args.rounds, arrays)
    if not check_dumps(args.authors, arrays):
        raise SystemExit(
            f"{args.authors}: the authors' Adult dumps differ from the package's arrays"
        )
    inputs = drawn_inputs(args.seed, args.rounds, args.raw_dir)
    batches = batch_orders(inputs, args.rounds)
    records = {}
    for rule, bias in args.runs:
        records[run_name(rule, bias)], groups = authors_run(
            args.authors, arrays, rule, bias, args.seed, args.rounds, batches
        )
        if not same_clients(groups, inputs):
            raise SystemExit(
                f"{args.authors}: their Adult clients are not the package's shift_by_one partition"
            )
    if args.record is not None:
        meta = {
            "seed": np.array(args.seed),
            "rounds": np.array(args.rounds),
            "arrays_sha256": np.array(arrays_digest(arrays)),
            "runs": np.array([run_name(rule, bias) for rule, bias in args.runs]),
        }
        kept = {
            f"{name}__{what}": values
            for name, record in records.items()
            for what, values in record.items()
        }
        np.savez_compressed(
            args.record, **meta, **kept, **{f"inputs__{k}": v for k, v in inputs.items()}
        )
    return records, inputs


def read_recording(path: Path, seed: int, rounds: int, arrays: dict[str, np.ndarray]):
    """A recording of ``--record``: {run: record} and the inputs, for ``seed`` and ``rounds`` on
    these arrays (else one error line naming the file)."""
    with np.load(path, allow_pickle=False) as recorded:
        content = {key: recorded[key] for key in recorded.files}
    if (int(content["seed"]), int(content["rounds"])) != (seed, rounds):
        raise SystemExit(
            f"{path}: recorded for seed {int(content['seed'])}, {int(content['rounds'])} rounds; "
            "run with those options"
        )
    if str(content["arrays_sha256"]) != arrays_digest(arrays):
        raise SystemExit(
            f"{path}: recorded on other Adult arrays than the package builds from these raw files"
        )
    records = {
        str(name): {what: content[f"{name}__{what}"] for what in ("models", "final", "test_acc")}
        for name in content["runs"]
    }
    inputs = {
        key.removeprefix("inputs__"): values
        for key, values in content.items()
        if key.startswith("inputs__")
    }
    return records, inputs


def check_runs(
    args, arrays: dict[str, np.ndarray], own: dict[str, dict[str, np.ndarray]] | None = None
) -> int:
    """Every run of both codes from the same start with the same inputs: the global models of every
    round and the tested final model within ``--rtol``, as many test samples correct.
    ``own``: the package's side, {run: ``package_run``}, if already computed (tests): then only
    its runs are compared."""
    theirs, inputs = authors_records(args, arrays)
    if own is None:
        own = {
            name: package_run(
                fed_simulation(*RUN_OF[name], args.seed, args.rounds, args.raw_dir, inputs)
            )
            for name in theirs
        }
    failed = False
    print(
        f"seed {args.seed}, float64, the same Adult arrays, partition and minibatches in both "
        "codes; largest |difference| / largest |weight| of the global models (rounds 1..T, final "
        "model); test accuracies "
        f"({', '.join(TEST_SETS)}):"
    )
    for name in own:
        record, ours = theirs[name], own[name]
        rounds = [
            relative_difference(ours["models"][t], record["models"][t]) for t in range(args.rounds)
        ]
        final = relative_difference(ours["final"], record["final"])
        same_acc = np.array_equal(
            correct_counts(ours["test_acc"], arrays), correct_counts(record["test_acc"], arrays)
        )
        failed |= max(*rounds, final) > args.rtol or not same_acc
        print(
            f"{name:16s} | "
            + " ".join(f"{d:.1e}" for d in rounds)
            + f" | {final:.1e} | "
            + ", ".join(f"{100 * a:.2f}" for a in record["test_acc"])
            + (
                " (the same)"
                if same_acc
                else " (package: " + ", ".join(f"{100 * a:.2f}" for a in ours["test_acc"]) + ")"
            )
        )
    print(
        "lockstep: "
        + (
            "FAILED"
            if failed
            else f"passed (every round and the final model within {args.rtol:g}; "
            "as many test samples correct)"
        )
    )
    return 1 if failed else 0


def parse_runs(names: list[str] | None) -> list[tuple[str, float]]:
    if names is None:
        return list(RUNS)
    unknown = [n for n in names if n not in RUN_OF]
    if unknown:
        raise SystemExit(f"--runs: unknown {', '.join(unknown)}; choose from {', '.join(RUN_OF)}")
    return [RUN_OF[n] for n in names]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--authors", type=Path, help="the adult/ folder of a watml/Fed-MGDA checkout"
    )
    parser.add_argument(
        "--raw-dir",
        default="resources/raw",
        help="resources/raw, with adult.data and adult.test in adult/",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--runs",
        nargs="+",
        help="a subset of the runs (default: all of " + ", ".join(run_name(*r) for r in RUNS) + ")",
    )
    parser.add_argument(
        "--rtol", type=float, default=1e-10, help="largest relative difference allowed"
    )
    parser.add_argument(
        "--record", type=Path, help="also save the authors' side and the inputs fed here (.npz)"
    )
    parser.add_argument(
        "--recorded",
        type=Path,
        help="compare with this recording instead of running the authors' code",
    )
    args = parser.parse_args()
    if args.authors is None and args.recorded is None:
        parser.error("--authors is required (or --recorded)")
    args.authors = args.authors.resolve() if args.authors is not None else None
    args.raw_dir = str(Path(args.raw_dir).resolve())
    args.runs = parse_runs(args.runs)
    torch.set_num_threads(1)
    sys.exit(check_runs(args, package_arrays(args.raw_dir)))


if __name__ == "__main__":
    main()
