"""The one harness around the authors' F-MNIST and CIFAR-10 code (watml/Fed-MGDA, its ``main/``
folder), for scripts/run_authors_fmnist.py, scripts/lockstep_authors_fmnist.py,
scripts/compare_authors_fmnist.py and scripts/lockstep_authors_cifar.py;
scripts/lockstep_authors_adult.py runs their ``adult/`` folder with :func:`code_on_path`,
:func:`run_federated_main` and :class:`NullWriter`.

Their code never enters this repository: it is imported from the folder given, on the import path
and as working directory (:func:`authors_modules`; their data paths, '../data/fmnist/' and
'../logs', are relative to it), and their ``federated_main.py`` runs unchanged as a script
(:func:`run_federated_main`, ``runpy``). What the scripts change of it is set from outside, on
their imported modules, and named here:

- :func:`speed_up`: time only, every number as it is (each dataset transformed once,
  :class:`Transformed`; no event files, :class:`NullWriter`);
- :func:`record_run`: every round's per-user accuracies and training loss recorded as computed
  (``run_authors_fmnist.py run``);
- :func:`authors_rounds`: the lockstep check's inputs from outside (participants, minibatch
  orders, dropout off, a dtype), their server rule's flags, the round their loop starts from
  (:func:`rounds_from`) and the global model of every round (``lockstep_authors_fmnist.py
  rounds``); :func:`authors_client`: their ``LocalUpdate`` of every user (``... masks``);
  :func:`authors_rounds_fed`: the same inputs from outside for any of their arguments and models
  (``lockstep_authors_cifar.py``, which names its further changes).

Everything stops first unless this numpy sorts equal labels as the authors' numpy 1.17 did
(:func:`require_authors_sort`; docs/protocol.md §8.19).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import os
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from fedmgda.data.legacy_sort import numpy_1_17_argsort

# the arguments of their Figure 3 scripts on F-MNIST, the number of rounds (--epochs) aside
FIGURE3_ON_FMNIST = ["--dataset=fmnist", "--model=cnn", "--iid=0", "--local_bs=10", "--lr=0.01",
                     "--local_ep=1", "--frac=0.1", "--num_users=100"]
FIGURE3_ROUNDS = 200
FEDAVG = ["--epsilon=0", "--normalize=0"]  # their FedMGDA+ as FedAvg
THEIR_MODULES = ("update", "models", "utils", "sampling", "options")


class Transformed:
    """A torchvision dataset with every sample transformed once: ``dataset[i]`` is the same
    (tensor, label) as the wrapped dataset's, bit for bit; only the per-access PIL conversion is
    saved. No random number is drawn by either."""

    def __init__(self, dataset):
        self.samples = [dataset[i] for i in range(len(dataset))]
        self.targets = dataset.targets

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


class Cast:
    """A dataset whose samples are cast to ``dtype`` (the authors' loaders give float32)."""

    def __init__(self, dataset, dtype: torch.dtype):
        self.dataset, self.dtype, self.targets = dataset, dtype, dataset.targets

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        x, y = self.dataset[i]
        return x.to(self.dtype), y


class NullWriter:
    """tensorboardX's ``SummaryWriter`` without the event files (their ``add_scalar`` per step)."""

    def __init__(self, *args, **kwargs):
        pass

    def add_scalar(self, *args, **kwargs):
        pass


class FunctionalWithoutDropout:
    """``torch.nn.functional`` as ``main/models.py`` sees it, with ``dropout`` the identity."""

    def __getattr__(self, name):
        return getattr(torch.nn.functional, name)

    @staticmethod
    def dropout(x, *args, **kwargs):
        return x


def speed_up(utils, tensorboardX) -> None:
    """Two changes of time only, the numbers unchanged (``--exact`` leaves them out): the datasets
    transformed once (:class:`Transformed`) and no event files (:class:`NullWriter`)."""
    get_dataset = utils.get_dataset

    def transformed_once(args):
        train_dataset, test_dataset, user_groups = get_dataset(args)
        return Transformed(train_dataset), Transformed(test_dataset), user_groups

    utils.get_dataset = transformed_once
    tensorboardX.SummaryWriter = NullWriter


def require_authors_sort() -> None:
    """Stop unless this numpy's default ``argsort`` leaves equal labels in the order the authors'
    numpy (1.17) did: their ``main/sampling.py`` sorts with it, and only then is their partition
    the package's ``sort: quicksort`` (docs/protocol.md §8.19). Current numpy gets there with its
    SIMD sorts switched off before it is imported."""
    labels = np.random.RandomState(0).randint(0, 10, 5000)
    if not np.array_equal(np.argsort(labels), numpy_1_17_argsort(labels)):
        umath = getattr(np, "_core", getattr(np, "core", None))._multiarray_umath
        targets = " ".join(getattr(umath, "__cpu_dispatch__", []))
        raise SystemExit(f"numpy {np.__version__} on this CPU sorts equal labels otherwise than "
                         "the authors' numpy 1.17, so their code would build another partition; "
                         f"rerun with NPY_DISABLE_CPU_FEATURES=\"{targets}\" "
                         "(docs/protocol.md §8.19)")


@contextlib.contextmanager
def authors_modules(authors: Path):
    """The authors' ``main/`` on the import path and as working directory (their data paths,
    '../data/fmnist/' and '../logs', are relative to it); their modules forgotten afterwards, so a
    second use imports them afresh. Stops first if their label sort would not be numpy 1.17's."""
    require_authors_sort()
    with code_on_path(authors, authors):
        yield


@contextlib.contextmanager
def code_on_path(code: Path, workdir: Path):
    """A folder of the authors' code (``main/`` or ``adult/``) on the import path and ``workdir``
    as working directory; their modules (``THEIR_MODULES``, the same names in both folders)
    forgotten afterwards, so a second use imports them afresh."""
    cwd, path = os.getcwd(), list(sys.path)
    os.chdir(workdir)
    sys.path.insert(0, str(code))
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        for name in THEIR_MODULES:
            sys.modules.pop(name, None)


def run_federated_main(authors: Path, argv: list[str]) -> dict:
    """The authors' ``federated_main.py`` run as a script with ``argv`` (inside
    :func:`authors_modules`, after the caller's patches); its module globals when it finishes."""
    sys.argv = ["federated_main.py", *argv]
    return runpy.run_path(str(authors / "federated_main.py"), run_name="__main__")


# ----------------------------------------------------------------- their run as released, recorded
def record_run(authors: Path, seed: int, out: Path, extra: list[str], exact: bool = False) -> None:
    """Their ``federated_main.py`` with their Figure 3 arguments on F-MNIST, ``--seed=seed`` and
    ``extra``, every number as released: every round's per-user accuracies to
    ``<out>/seed<S>.csv`` (round, user, accuracy) and the per-round training loss to
    ``<out>/seed<S>_train_loss.csv``. Without ``exact``, :func:`speed_up`."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    with authors_modules(authors):
        _record_patched(authors, seed, out, extra, exact)


def _record_patched(authors: Path, seed: int, out: Path, extra: list[str], exact: bool) -> None:
    import tensorboardX
    import update  # the authors' modules, from their folder
    import utils

    if not exact:
        speed_up(utils, tensorboardX)

    rows: list[tuple[int, int, float]] = []
    state = {"round": 0, "user": 0}
    train, infer = update.LocalUpdate.update_weights, update.LocalUpdate.inference

    def update_weights(self, model, global_round):
        if global_round != state["round"]:
            state["round"], state["user"] = global_round, 0
        return train(self, model, global_round)

    def inference(self, model):
        accuracy, loss = infer(self, model)
        rows.append((state["round"] + 1, state["user"], accuracy))
        state["user"] += 1
        return accuracy, loss

    update.LocalUpdate.update_weights, update.LocalUpdate.inference = update_weights, inference
    start = time.time()
    finished = run_federated_main(authors, [*FIGURE3_ON_FMNIST, f"--epochs={FIGURE3_ROUNDS}",
                                            f"--seed={seed}", *extra])
    with open(out / f"seed{seed}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["round", "user", "accuracy"])
        writer.writerows(rows)
    write_train_loss(finished["train_loss"], out / f"seed{seed}_train_loss.csv")
    print(f"authors' code, seed {seed}: {time.time() - start:.0f} s; per-user accuracies -> {out}")


def write_train_loss(train_loss: list[float], path: Path) -> None:
    """federated_main.py's ``train_loss``: one value per round, the participants' mean local
    loss."""
    pd.DataFrame({"round": range(1, len(train_loss) + 1),
                  "train_loss": [float(v) for v in train_loss]}).to_csv(path, index=False)


# ----------------------------------------------------------------- their run fed from outside
class FedFromOutside:
    """The patches of :func:`authors_rounds` on the authors' modules, and what they record: each
    round's participants and every participant's minibatches given, dropout off (``dropout``
    False), the model and samples in ``dtype``, no evaluation on the global test set (time only);
    the global model of every round and every user's test accuracy after the last."""

    def __init__(self, participants: list[list[int]],
                 batches: Callable[[int, int], list[list[int]]], dropout: bool, dtype: torch.dtype,
                 start: int = 0, model: str = "CNNMnist", once: bool = True,
                 evaluated: int | None = None):
        self.participants, self.batches = participants, batches
        self.dropout, self.dtype = dropout, dtype
        self.start = start  # the 0-based round of participants[0]
        self.model = model  # the class name of their model in main/models.py
        self.once = once  # each dataset transformed once (Transformed), or at each access
        self.evaluated = evaluated  # after the last round, users 0 .. evaluated - 1 (None: all)
        self.groups: dict = {}  # their partition, as their get_dataset returned it
        self.rounds = len(participants)
        self.round, self.user = -1, 0
        self.global_models: list[torch.Tensor] = []
        self.accuracies: list[float] = []

    def patch(self, utils, update, their_models, tensorboardX) -> None:
        fed = self
        get_dataset = utils.get_dataset
        train, infer = update.LocalUpdate.update_weights, update.LocalUpdate.inference

        def dataset_then_given_participants(args):
            # their partition draws np.random.choice: only then replaced
            train_dataset, test_dataset, groups = get_dataset(args)
            fed.groups = groups
            once = Transformed if fed.once else (lambda dataset: dataset)
            loaded = (Cast(once(train_dataset), fed.dtype), Cast(once(test_dataset), fed.dtype),
                      groups)
            np.random.choice = fed.next_participants
            return loaded

        def update_weights(self, model, global_round):
            user = fed.participants[global_round - fed.start][fed.user]
            fed.user += 1
            self.trainloader = DataLoader(self.trainloader.dataset,
                                          batch_sampler=fed.batches(global_round, user))
            if not fed.dropout and hasattr(model, "conv2_drop"):
                model.conv2_drop = nn.Identity()
            return train(self, model, global_round)

        def inference(self, model):
            # the round's first evaluation: the new global model
            if not fed.global_models or len(fed.global_models) <= fed.round:
                fed.global_models.append(torch.cat([p.detach().flatten()
                                                    for p in model.parameters()]).clone())
            enough = fed.evaluated is not None and len(fed.accuracies) >= fed.evaluated
            if fed.round < fed.rounds - 1 or enough:
                # only the last round's per-user accuracies are compared
                return float("nan"), float("nan")
            accuracy, loss = infer(self, model)
            fed.accuracies.append(accuracy)
            return accuracy, loss

        utils.get_dataset = dataset_then_given_participants
        update.LocalUpdate.update_weights, update.LocalUpdate.inference = update_weights, inference
        # the global test set (every 10th round and after the last) is not compared: time only
        update.test_inference = lambda args, model, test_dataset: (float("nan"), float("nan"))
        if not self.dropout:
            their_models.F = FunctionalWithoutDropout()
        model_class = getattr(their_models, self.model)
        built = model_class.__init__

        # their CNN, built as released (after their seed), then cast
        def built_then_cast(self, *a, **k):
            built(self, *a, **k)
            self.to(fed.dtype)

        model_class.__init__ = built_then_cast
        tensorboardX.SummaryWriter = NullWriter

    def next_participants(self, a, size=None, replace=True, p=None):
        """``np.random.choice`` of ``federated_main.py``'s round loop: the next round's
        participants."""
        self.round += 1
        self.user = 0
        return np.array(self.participants[self.round])


@contextlib.contextmanager
def rounds_from(start: int):
    """Their round loop, ``for epoch in tqdm(range(args.epochs))``
    (``main/federated_main.py:L125``), from the 0-based round ``start`` on: the ``tqdm`` they
    import skips the rounds before it, so round ``start`` begins from their initial model and
    their schedule reads ``epoch`` as it is (the server step's decay, ``L198-199``). Nothing is
    changed for ``start`` 0."""
    if start == 0:
        yield
        return
    import tqdm

    bar = tqdm.tqdm
    tqdm.tqdm = lambda rounds, *args, **kwargs: itertools.islice(rounds, start, None)
    try:
        yield
    finally:
        tqdm.tqdm = bar


def authors_rounds(authors: Path, participants: list[list[int]],
                   batches: Callable[[int, int], list[list[int]]], seed: int, dropout: bool,
                   dtype: torch.dtype = torch.float32, flags: list[str] = FEDAVG,
                   start: int = 0) -> tuple[list[torch.Tensor], np.ndarray]:
    """Their ``federated_main.py`` with their server rule's ``flags`` (default FedAvg) for
    ``len(participants)`` rounds from the 0-based round ``start`` (:func:`rounds_from`) with these
    participants, the minibatches ``batches(round, user)`` (positions into the user's train
    samples) and, with ``dropout`` False, no dropout (:class:`FedFromOutside`): its global model
    after every round and every user's test accuracy after the last."""
    rounds = len(participants)
    with authors_modules(authors):
        import models as their_models
        import tensorboardX
        import update
        import utils

        fed = FedFromOutside(participants, batches, dropout, dtype, start)
        fed.patch(utils, update, their_models, tensorboardX)
        choice = np.random.choice
        argv = [*FIGURE3_ON_FMNIST, *flags, f"--epochs={start + rounds}", f"--seed={seed}"]
        try:
            with (open(os.devnull, "w") as null, contextlib.redirect_stdout(null),
                  contextlib.redirect_stderr(null), rounds_from(start)):
                run_federated_main(authors, argv)
        finally:
            np.random.choice = choice
    return fed.global_models, np.array(fed.accuracies)


def authors_rounds_fed(authors: Path, fed: FedFromOutside, argv: list[str],
                       also: Callable[[object], None] | None = None) -> FedFromOutside:
    """Their ``federated_main.py`` with ``argv`` for ``fed.rounds`` rounds, patched by ``fed``
    (:class:`FedFromOutside`) and then by ``also(update)`` (their ``update`` module), quiet; ``fed``
    holds what it recorded."""
    with authors_modules(authors):
        import models as their_models
        import tensorboardX
        import update
        import utils

        fed.patch(utils, update, their_models, tensorboardX)
        if also is not None:
            also(update)
        choice = np.random.choice
        try:
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), \
                    contextlib.redirect_stderr(null):
                run_federated_main(authors, [*argv, f"--epochs={fed.rounds}"])
        finally:
            np.random.choice = choice
    return fed


def authors_client(authors: Path, seed: int):
    """The authors' ``LocalUpdate`` of every user (their ``get_dataset`` partition after
    ``np.random.seed(seed)``, as ``federated_main.py``) and a ``CNNMnist`` factory."""
    with authors_modules(authors):
        import models as their_models
        import update
        import utils

        args = SimpleNamespace(dataset="fmnist", iid=0, unequal=0, num_users=100, local_bs=10,
                               lr=0.01, local_ep=1, optimizer="sgd", prox_weight=0.0, verbose=0,
                               gpu=None, normalize=0, num_channels=1, num_classes=10)
        np.random.seed(seed)
        train_dataset, _, groups = utils.get_dataset(args)
        logger = SimpleNamespace(add_scalar=lambda *a, **k: None)
        clients = {u: update.LocalUpdate(args, train_dataset, groups[u], logger)
                   for u in range(args.num_users)}
        return clients, (lambda: their_models.CNNMnist(args))
