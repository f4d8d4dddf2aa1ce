"""Lockstep check: the authors' F-MNIST code and the package, fed the same inputs, round by round.

    git clone https://github.com/watml/Fed-MGDA /tmp/Fed-MGDA        # outside this repository
    mkdir -p /tmp/Fed-MGDA/data/fmnist/FashionMNIST/raw && cp resources/raw/fmnist/*.gz "$_" \\
        && gunzip -kf "$_"/*.gz
    pip install --target /tmp/authors-site quadprog tensorboardX tqdm  # the authors' imports
    # numpy 2.4 on x86-64: their sort's order (docs/protocol.md §8.19)
    export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
    PYTHONPATH=/tmp/authors-site python scripts/lockstep_authors_fmnist.py rounds \\
        --authors /tmp/Fed-MGDA/main --seed 1 --rounds 5
    PYTHONPATH=/tmp/authors-site python scripts/lockstep_authors_fmnist.py rounds \
        --authors /tmp/Fed-MGDA/main --rule fedmgda_plus --start-round 99   # across the first drop
    PYTHONPATH=/tmp/authors-site python scripts/lockstep_authors_fmnist.py record \
        --authors /tmp/Fed-MGDA/main --seed 1 --rounds 5 --out tests/data/authors_lockstep_seed1.pt
    PYTHONPATH=/tmp/authors-site python scripts/lockstep_authors_fmnist.py masks \\
        --authors /tmp/Fed-MGDA/main --seed 1 --draws 200

Both codes run one server rule of the authors' code (``--rule``, default FedAvg: the authors'
``--epsilon=0 --normalize=0``; ``RULES`` maps each rule's flags to the package's algorithm and
hyper-parameters, docs/protocol.md §4.2) with their Figure 3 F-MNIST arguments
(``scripts/authors_code.py``, the harness of every script that runs their code) on the authors'
partition (the package's ``sort: quicksort``, index for index the same:
``scripts/compare_authors_fmnist.py``). ``--start-round`` starts both codes' run at a later round
from the initial model, with that round's participants, minibatches and server step (their round
loop skips the rounds before it: ``authors_code.rounds_from``); their step decays every 100 rounds
(``main/federated_main.py:L198-199``, no flag sets the period), so ``--start-round 99`` runs
rounds 99-103 across its first drop.

``rounds`` runs the authors' ``main/federated_main.py`` as released (``runpy``, in their folder;
no file of theirs is changed) with three things set from outside, so that both codes get the same
inputs:

- participants: each round's ``np.random.choice(range(100), 10, replace=False)`` of
  ``federated_main.py`` returns the package's participants of that round
  (``Simulation.participants``);
- minibatch order: the training loader of ``LocalUpdate.update_weights`` (``main/update.py``)
  yields the package's minibatches of that (round, user) (``Minibatches.batch_order`` from the
  client's seed key) instead of its own shuffle;
- dropout: off in both. In the authors' ``CNNMnist`` the ``Dropout2d`` module becomes an identity
  and ``main/models.py``'s ``F.dropout`` returns its input; in the package the trainer's dropout
  sites are emptied (``Simulation(dropout=False)``: the model trains in eval mode, which for this
  CNN without batch norm is the same function).

Both codes compute in float64 by default (``--dtype``): the authors' CNN is built as released after
their seed and then cast, their samples cast as their loader yields them; the package's model and
samples cast likewise (``Simulation(dtype=...)``). Printed for every round: the largest absolute
difference of the two global models, relative to their largest weight, which must stay within
``--rtol`` (1e-10); after the last round, every user's test accuracy under the authors' model as
each code evaluates it (the authors' ``LocalUpdate.inference``; the package's ``evaluate_users``),
which must be identical.
Both the package's reference path (``batched: false``) and the path it keeps (``batched: true``) are
checked. Exit status 1 otherwise.

Why float64: in float32 the two codes' global models agree to about 5e-7 after one round, but a
rounding difference of one client's step occasionally flips a ReLU or a max-pool's choice, and from
then on that client's update differs by up to 1e-3 of its size; the gap then grows round by round,
as it does between the package's own two paths. ``--dtype float32`` prints that picture: each round
also run from the authors' model of the round before (within 1e-5 unless such a flip happens in it),
and the package's reference and batched paths beside each other. ``--recorded FILE`` compares
with a recording instead of running their code (tests/data/test_authors_lockstep.py).

``record`` runs every run of ``RECORDED_RUNS`` (each rule from round 1, and FedMGDA+ with ε = 0.1
across the first drop) in the authors' code in float64, checks each against the package's
batched path as ``rounds`` does, and saves the inputs both codes were fed, the authors' models
after each run's first and last round and their per-user accuracies in one file; ``--rules``
records some of them, ``--merge`` puts such recordings in one file.

``masks`` compares what dropout does in each code, from the same start (the initial model of the
seed) and the same minibatch order of one client: ``--draws`` trainings of that client in each code,
each with fresh masks (the authors': torch's global generator reseeded per draw; the package's:
the client's own generator, seeded per draw), then the mean and spread of the update, of its norm
and of the training loss. With the same dropout distribution the two mean updates differ by
sampling error only: ``|mean_a - mean_p|^2`` is then about ``(tr Var_a + tr Var_p) / draws``
(printed as a ratio, about 1). Also printed: the kept fraction of each site's units, and each
code's output of one batch in eval mode (no dropout, no scaling at test time).
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader

from fedmgda.config import RunConfig
from fedmgda.data import DATASET_SPECS, Partition, make_partition, save_partition
from fedmgda.data.registry import load_raw, resolve_options
from fedmgda.scheduler import Scheduler, derived_seed, run_round
from fedmgda.simulator import Simulation

sys.path.insert(0, str(Path(__file__).resolve().parent))
import authors_code  # noqa: E402  (the harness around the authors' code, beside this script)
from authors_code import authors_client  # noqa: E402


class Rule(NamedTuple):
    """A server rule of the authors' ``main/`` code: their flags (beside
    ``authors_code.FIGURE3_ON_FMNIST``) and the package's algorithm and hyper-parameters that
    compute it. Flag by flag: docs/protocol.md §4.2, §4.6 (--global_lr is ``eta``,
    --global_lr_decay ``beta``, the per-100-round factor, not the paper's ``decay``;
    --prox_weight ``mu``; --qffl ``q``; --Lipschitz_constant ``L``)."""

    flags: tuple[str, ...]
    algorithm: str
    hparams: dict[str, float] = {}  # never changed: package_config copies it


# Each rule once, with the values of the authors' Figure 3 scripts
# (main/Figure3/shell_scripts_for_running_exps/batch_size10/*.sh). Their code: lambda
# main/federated_main.py:L184-192 (QP main/utils.py:L146-172), the server step
# eta * beta^(epoch // 100) L198-206, q-FFL L207-230, normalisation main/update.py:L145-152,
# the proximal term main/update.py:L87-93.
RULES = {
    "fedavg": Rule(("--normalize=0", "--epsilon=0"), "fedavg"),
    "fedavg_n": Rule(("--normalize=1", "--epsilon=0", "--global_lr=1.5",
                      "--global_lr_decay=0.89"),
                     "fedavg_n", {"eta": 1.5, "beta": 0.89}),
    "fedprox": Rule(("--normalize=0", "--epsilon=0", "--prox_weight=0.01"),
                    "fedprox", {"mu": 0.01}),
    "fedmgda": Rule(("--normalize=0", "--epsilon=1"), "fedmgda", {"epsilon": 1.0}),
    "fedmgda_plus": Rule(("--normalize=1", "--epsilon=1", "--global_lr=1.5",
                          "--global_lr_decay=0.89"),
                         "fedmgda_plus", {"eta": 1.5, "beta": 0.89, "epsilon": 1.0}),
    # the QP within the box 1/n +- 0.1 (lambda_i <= 0.2): config/fmnist.yaml's ablation row
    "fedmgda_plus_eps0.1": Rule(("--normalize=1", "--epsilon=0.1", "--global_lr=1.5",
                                 "--global_lr_decay=0.89"),
                                "fedmgda_plus", {"eta": 1.5, "beta": 0.89, "epsilon": 0.1}),
    "mgda_prox": Rule(("--normalize=1", "--epsilon=1", "--prox_weight=0.1", "--global_lr=1",
                       "--global_lr_decay=0.89"),
                      "mgda_prox", {"eta": 1.0, "beta": 0.89, "epsilon": 1.0, "mu": 0.1}),
    "qfedavg": Rule(("--normalize=0", "--epsilon=0", "--qffl=0.5", "--Lipschitz_constant=1"),
                    "qfedavg", {"q": 0.5, "L": 1.0}),
}
# their server step decays first at the 0-based round 100 (epoch // 100, L198-199)
FIRST_DROP = 100
# the recording's runs, (rule, 0-based first round): every rule from the start, and FedMGDA+ with
# epsilon = 0.1 across the first drop of the server step (rounds 99-103, the drop at 101)
RECORDED_RUNS = [*((rule, 0) for rule in RULES if rule != "fedmgda_plus_eps0.1"),
                 ("fedmgda_plus_eps0.1", FIRST_DROP - 2)]


def package_config(seed: int, rounds: int, raw_dir: str, batched: bool,
                   partition_file: str | None = None, rule: str = "fedavg",
                   start: int = 0) -> RunConfig:
    """The package's run of the authors' ``rule`` on F-MNIST (config/fmnist.yaml's
    ``fmnist_shards_authors_sort`` setting) for the 0-based rounds ``start`` to
    ``start + rounds - 1``, every user evaluated after the last round (and round 0) only."""
    end = start + rounds
    return RunConfig(dataset="fmnist", algorithm=RULES[rule].algorithm,
                     hparams=dict(RULES[rule].hparams), partition="shards",
                     dataset_options={"sort": "quicksort"}, raw_dir=raw_dir, batch_size=10,
                     local_lr=0.01, momentum=0.5, participation=0.1, rounds=end, seed=seed,
                     eval_every=end, per_user_every=end, track_improvement=False,
                     batched=batched, device="cpu", checkpoint_every=0,
                     partition_file=partition_file)


def lockstep_simulation(args, batched: bool) -> Simulation:
    """The package's side: without dropout, computing in ``args.dtype`` (its model and samples cast
    after the model is initialised; float64: the lockstep check without float32's rounding, whose
    differences the ReLUs and max-pools amplify round by round); with ``args.inputs`` (a
    recording's), fed the recorded inputs."""
    inputs = getattr(args, "inputs", None)
    options = {"dtype": args.dtype, "dropout": False}
    run = {"rule": args.rule, "start": args.start_round}
    if inputs is None:
        cfg = package_config(args.seed, args.rounds, args.raw_dir, batched, **run)
        return without_global_test(Simulation(cfg, **options))
    with tempfile.TemporaryDirectory() as tmp:
        part_file = save_partition(recorded_partition(inputs, args.seed, args.raw_dir),
                                   Path(tmp) / "partition.npz")
        cfg = package_config(args.seed, args.rounds, args.raw_dir, batched, str(part_file), **run)
        sim = without_global_test(Simulation(cfg, **options))
    return fed(sim, inputs)


def without_global_test(sim: Simulation) -> Simulation:
    """``sim`` without the global test set, which no check compares (time only: the package's
    last round evaluates its users alone)."""
    sim.data.global_test = {}
    return sim


# ------------------------------------------------------------------ the inputs a recording carries
PARTS = ("train", "val", "test")


def recorded_inputs(sim: Simulation, partition: Partition,
                    rounds: list[int]) -> dict[str, torch.Tensor]:
    """What both codes were fed, saved with a recording so that the package can be fed it again on
    any machine: the partition's index lists, the participants of each of the 0-based ``rounds``
    and every participant's minibatch order (its positions, all minibatches in a row)."""
    participants = [sim.participants(t) for t in rounds]
    inputs = {f"{part}_{what}": torch.from_numpy(values) for part in PARTS
              for what, values in zip(("sizes", "idx"), flat(getattr(partition, part)))}
    inputs["participant_rounds"] = torch.tensor(rounds)
    inputs["participants"] = torch.tensor(participants)
    orders = [[i for batch in minibatches(sim, t, u) for i in batch]
              for t, users in zip(rounds, participants) for u in users]
    inputs["order_sizes"], inputs["order_idx"] = (torch.from_numpy(a) for a in flat(orders))
    return inputs


def flat(lists) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, values) of a list of index arrays, as int32 (the recording stays small)."""
    return (np.asarray([len(a) for a in lists], dtype=np.int32),
            np.concatenate([np.asarray(a, dtype=np.int32) for a in lists]))


def unflat(inputs: dict[str, torch.Tensor], name: str) -> list[np.ndarray]:
    sizes, values = inputs[f"{name}_sizes"].numpy(), inputs[f"{name}_idx"].numpy().astype(np.int64)
    return np.split(values, np.cumsum(sizes)[:-1])


def recorded_partition(inputs: dict[str, torch.Tensor], seed: int, raw_dir: str) -> Partition:
    """The recording's partition, with the metadata of the package's own ``sort: quicksort`` one."""
    options = resolve_options(DATASET_SPECS["fmnist"],
                              package_config(seed, 1, raw_dir, batched=True).dataset_options)
    return Partition(dataset="fmnist", scheme="shards", seed=seed, options=options,
                     fingerprint=load_raw("fmnist", raw_dir, options).fingerprint(),
                     **{part: unflat(inputs, part) for part in PARTS})


def fed(sim: Simulation, inputs: dict[str, torch.Tensor]) -> Simulation:
    """``sim`` drawing its participants and minibatch orders from ``inputs`` instead of its seed
    (the orders are looked up by the client's seed, ``derived_seed(seed, round, user)``)."""
    participants = dict(zip(inputs["participant_rounds"].tolist(), inputs["participants"].tolist()))
    keys = [derived_seed(sim.cfg.seed, t, u) for t, users in participants.items() for u in users]
    orders = dict(zip(keys, (torch.from_numpy(o) for o in unflat(inputs, "order"))))
    sim.participants = lambda t: participants[t]
    # one local epoch
    sim.trainer.minibatches.epoch_order = lambda n, generator: orders[generator.initial_seed()]
    return sim


def minibatches(sim: Simulation, t: int, user: int) -> list[list[int]]:
    """The package's minibatches of (round t, user): positions into the user's train samples,
    from the client's seed key as ``scheduler.train_one`` draws them."""
    n = len(sim.data.train_idx[user])
    generator = torch.Generator().manual_seed(derived_seed(sim.cfg.seed, t, user))
    return [b.tolist() for b in sim.trainer.minibatches.batch_order(n, generator)]


def package_rounds(sim: Simulation, start: int,
                   starts: dict[int, torch.Tensor] | None = None) -> dict[int, torch.Tensor]:
    """{round (1-based): the package's global model after it} for the 0-based rounds ``start`` to
    ``sim.cfg.rounds - 1`` from the initial model (``run_round``, the rounds of one pack); with
    ``starts``, each round after the first starts from ``starts[t]`` (the authors' model after
    the 1-based round t) instead of the package's own."""
    scheduler, w = Scheduler([sim.inputs]), sim.model.initial_vector().to(sim.device)
    models: dict[int, torch.Tensor] = {}
    for t in range(start, sim.cfg.rounds):
        w_start = starts[t].clone() if starts is not None and t > start else w
        w = run_round(sim, w_start, t, scheduler).w_next
        models[t + 1] = w.detach().clone()
    return models


def authors_rounds(authors: Path, sim: Simulation, dropout: bool,
                   dtype: torch.dtype = torch.float32, rule: str = "fedavg",
                   start: int = 0) -> tuple[dict[int, torch.Tensor], np.ndarray]:
    """The authors' ``federated_main.py`` with ``rule``'s flags for the 0-based rounds ``start`` to
    ``sim.cfg.rounds - 1`` with the package's participants and minibatches (and, with ``dropout``
    False, no dropout): {round (1-based): its global model} and every user's test accuracy after
    the last (``authors_code.authors_rounds``)."""
    rounds = range(start, sim.cfg.rounds)
    models, accuracies = authors_code.authors_rounds(
        authors, [sim.participants(t) for t in rounds], lambda t, user: minibatches(sim, t, user),
        sim.cfg.seed, dropout, dtype, flags=list(RULES[rule].flags), start=start)
    return {t + 1: w for t, w in zip(rounds, models)}, accuracies


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def authors_record(args) -> tuple[dict[int, torch.Tensor], np.ndarray]:
    """The authors' side of ``rounds``: {round (1-based): global model} and the last round's
    per-user accuracies, run now (``--authors``) or read from a recording (``--recorded``, written
    by ``record``, float64 only: the first and last round of each of ``RECORDED_RUNS``;
    tests/data/authors_lockstep_seed1.pt)."""
    if args.recorded is not None:
        run = recorded_run(torch.load(args.recorded, weights_only=True), args, args.recorded)
        return dict(zip(run["rounds_kept"].tolist(), run["models"])), run["accuracies"].numpy()
    sim = lockstep_simulation(args, batched=True)
    return authors_rounds(args.authors, sim, dropout=False, dtype=args.dtype, rule=args.rule,
                          start=args.start_round)


def recorded_run(recorded: dict, args, path: Path) -> dict:
    """The run of ``args.rule`` from ``args.start_round`` in a recording; one error line naming the
    file and its runs where it holds none such."""
    wanted = (args.seed, args.rounds, str(args.dtype))
    if (recorded["seed"], recorded["rounds"], recorded["dtype"]) != wanted:
        raise SystemExit(f"{path}: recorded for seed {recorded['seed']}, {recorded['rounds']} "
                         f"rounds, {recorded['dtype']}; run with those options")
    for run in recorded["runs"]:
        if (run["rule"], run["start_round"]) == (args.rule, args.start_round):
            return run
    held = ", ".join(f"{run['rule']} from round {run['start_round'] + 1}"
                     for run in recorded["runs"])
    raise SystemExit(f"{path}: no run of {args.rule} from round {args.start_round + 1} "
                     f"(it holds {held})")


def record(args) -> int:
    """``record``: every run of ``RECORDED_RUNS`` (``--rules``: those of these rules) in the
    authors' code, each checked against the package (``check_rounds``, its batched path), saved to
    ``--out``: the inputs both codes were fed, and of each run the authors' models after its first
    and last round and every user's test accuracy after the last. Exit status 1 if a check fails.
    With ``--merge``, the runs of such recordings in one file instead (recorded in parallel)."""
    if args.merge:
        return merge_recordings(args.merge, args.out)
    sim = lockstep_simulation(run_args(args, "fedavg", 0), batched=True)
    rounds = sorted({start + k for _, start in RECORDED_RUNS for k in range(args.rounds)})
    partition = make_partition("fmnist", args.raw_dir, "shards", args.seed, sim.cfg.dataset_options)
    inputs, runs, failed = recorded_inputs(sim, partition, rounds), [], 0
    chosen = [(rule, start) for rule, start in RECORDED_RUNS
              if not args.rules or rule in args.rules]
    for rule, start in chosen:
        one = run_args(args, rule, start)
        theirs, accuracies = authors_record(one)
        print(f"--- {rule} ({' '.join(RULES[rule].flags)}), "
              f"rounds {start + 1}-{start + args.rounds}")
        failed |= check_rounds(one, package_paths(one, paths=(True,)), (theirs, accuracies))
        kept = [start + 1, start + args.rounds]
        runs.append({"rule": rule, "start_round": start, "rounds_kept": torch.tensor(kept),
                     "models": torch.stack([theirs[t] for t in kept]),
                     "accuracies": torch.from_numpy(accuracies)})
    torch.save({"seed": args.seed, "rounds": args.rounds, "dtype": str(args.dtype),
                "inputs": inputs, "runs": runs}, args.out)
    print(f"{len(runs)} runs recorded in {args.out}" + ("; a check FAILED" if failed else ""))
    return failed


def merge_recordings(parts: list[Path], out: Path) -> int:
    """The runs of the recordings ``parts`` (the same seed, rounds, dtype and inputs) in ``out``, in
    the order of ``RECORDED_RUNS``."""
    recordings = [torch.load(part, weights_only=True) for part in parts]
    first = recordings[0]
    for part, other in zip(parts, recordings):
        same = [other[k] == first[k] for k in ("seed", "rounds", "dtype")]
        same += [torch.equal(other["inputs"][k], v) for k, v in first["inputs"].items()]
        if not all(same):
            raise SystemExit(f"{part}: another seed, length, dtype or inputs than {parts[0]}")
    order = {run: i for i, run in enumerate(RECORDED_RUNS)}
    runs = sorted((run for recording in recordings for run in recording["runs"]),
                  key=lambda run: order[run["rule"], run["start_round"]])
    torch.save({**first, "runs": runs}, out)
    print(f"{len(runs)} runs recorded in {out}")
    return 0


def run_args(args, rule: str, start: int) -> argparse.Namespace:
    """``args`` for the run of ``rule`` from the 0-based round ``start``."""
    return argparse.Namespace(**{**vars(args), "rule": rule, "start_round": start})


def recording_inputs(recorded: Path | None) -> dict[str, torch.Tensor] | None:
    """The inputs a recording carries (``recorded_inputs``), to feed the package; None without
    one."""
    return None if recorded is None else torch.load(recorded, weights_only=True)["inputs"]


PATHS = {False: "reference", True: "batched"}


def package_paths(args,
                  paths: tuple[bool, ...] = (False, True)) -> dict[bool, dict[int, torch.Tensor]]:
    """The package's global models of every round on its reference path (False) and batched
    path (True)."""
    return {batched: package_rounds(lockstep_simulation(args, batched), args.start_round)
            for batched in paths}


def check_rounds(args, own: dict[bool, dict[int, torch.Tensor]] | None = None,
                 theirs_record: tuple[dict[int, torch.Tensor], np.ndarray] | None = None) -> int:
    """Both codes from the same start with the same inputs: in float64 the global models of every
    round must agree to ``--rtol``; in float32, where rounding differences grow round by round,
    each round is also run from the authors' model of the round before, and the package's two
    paths beside each other show how far rounding alone takes them apart. ``own``: the package's
    ``package_paths``, if already computed (tests: the batched path only); ``theirs_record``: the
    authors' side (``authors_record``), if already computed."""
    theirs, their_acc = theirs_record if theirs_record is not None else authors_record(args)
    own = own if own is not None else package_paths(args)
    one = {}
    if args.dtype == torch.float32 and len(theirs) == args.rounds:
        one = {batched: package_rounds(lockstep_simulation(args, batched), args.start_round,
                                       starts=theirs)
               for batched in own}
    failed = False
    names = ", ".join(PATHS[b] for b in own)
    print(f"seed {args.seed}, {args.rule}, {str(args.dtype)[6:]}, dropout off, the same "
          "participants and minibatches in both codes; largest |difference| / largest |weight| "
          "of the global models:")
    print(f"round | package vs authors ({names})"
          + (" | reference vs batched" if len(own) == 2 else "")
          + (f" | one round from the authors' model ({names})" if one else ""))
    for t, authors in sorted(theirs.items()):
        whole = [relative_difference(models[t].to(authors.dtype), authors)
                 for models in own.values()]
        line = f"{t:5d} | " + ", ".join(f"{d:.1e}" for d in whole)
        if len(own) == 2:
            line += f" | {relative_difference(own[False][t], own[True][t]):.1e}"
        if one:
            single = [relative_difference(models[t], authors) for models in one.values()]
            failed |= max(single) > args.rtol
            line += " | " + ", ".join(f"{d:.1e}" for d in single)
        else:
            failed |= max(whole) > args.rtol
        print(line)
    last = args.start_round + args.rounds
    sim = lockstep_simulation(args, batched=True)
    acc, _ = sim.inputs.evaluate_users(theirs[last].to(sim.device, sim.data.x.dtype))
    differ = int((np.abs(acc - their_acc) > 0).sum())
    failed |= differ > 0
    print(f"round {last}: the authors' model evaluated by both codes: users whose test accuracy "
          f"differs {differ}/{len(acc)} (mean: package {100 * acc.mean():.3f} %, "
          f"authors {100 * their_acc.mean():.3f} %)")
    within = "from the same model, each round" if one else "every round"
    passed = f"passed ({within} within {args.rtol:g}; the evaluations identical)"
    print("lockstep: " + ("FAILED" if failed else passed))
    return 1 if failed else 0


# ---------------------------------------------------------------------------------- dropout masks
def check_masks(args) -> int:
    sim = Simulation(package_config(args.seed, 1, args.raw_dir, batched=False))
    user = sim.participants(0)[0]
    batches = minibatches(sim, 0, user)
    clients, their_cnn = authors_client(args.authors, args.seed)
    client = clients[user]
    client.trainloader = DataLoader(client.trainloader.dataset, batch_sampler=batches)
    torch.manual_seed(args.seed)
    start = their_cnn()
    w0 = sim.model.initial_vector()
    assert torch.equal(w0, torch.cat([p.detach().flatten()
                                      for p in start.parameters()])), "initial models differ"

    theirs, ours, their_loss, our_loss = [], [], [], []
    idx = sim.data.train_idx[user]
    x, y = sim.data.x[idx], sim.data.y[idx]
    for draw in range(args.draws):
        torch.manual_seed(10_000 + draw)
        diff, loss, *_ = client.update_weights(copy.deepcopy(start), 0)
        theirs.append(torch.cat([diff[k].flatten() for k in start.state_dict()]))
        their_loss.append(loss)
        result = sim.trainer.train(w0, x, y,
                                   torch.Generator().manual_seed(derived_seed(args.seed, 0, user)),
                                   dropout_generator=torch.Generator().manual_seed(20_000 + draw))
        ours.append(result.update)
        our_loss.append(float(result.train_loss))
    a, p = torch.stack(theirs).double(), torch.stack(ours).double()
    gap = float(((a.mean(0) - p.mean(0)) ** 2).sum())
    expected = float((a.var(0).sum() + p.var(0).sum()) / args.draws)
    print(f"seed {args.seed}, user {user}, {args.draws} draws of dropout masks from the same start "
          "and minibatches:")
    for name, v in (("authors", a), ("package", p)):
        norms = v.norm(dim=1)
        print(f"  {name}: update norm {float(norms.mean()):.5f} ± {float(norms.std()):.5f}, "
              f"tr Var(update) {float(v.var(0).sum()):.3e}")
    print(f"  training loss: authors {np.mean(their_loss):.4f} ± "
          f"{np.std(their_loss, ddof=1):.4f}, "
          f"package {np.mean(our_loss):.4f} ± {np.std(our_loss, ddof=1):.4f}")
    print(f"  |mean_a - mean_p|^2 = {gap:.3e}; sampling error alone gives about {expected:.3e}: "
          f"ratio {gap / expected:.2f}")
    keep = sim.trainer.minibatches.dropout_masks(len(batches), 10, torch.Generator().manual_seed(0),
                                                 torch.device("cpu"))
    kept = ", ".join(f"{float(k.float().mean()):.3f}" for k in keep)
    print("  package masks, kept fraction per site: " + kept)
    start.eval()
    sim.model.module.eval()
    with torch.no_grad():
        same = torch.equal(start(x[:60]), sim.model.module(x[:60]))
    print("  eval-mode outputs of 60 samples identical (no dropout, no scaling at test "
          f"time): {same}")
    return 0 if gap / expected < 3 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("rounds", "record", "masks"):
        p = sub.add_parser(name)
        p.add_argument("--authors", type=Path, help="the main/ folder of a watml/Fed-MGDA checkout")
        p.add_argument("--raw-dir", default="resources/raw",
                       help="resources/raw, with the four F-MNIST files in fmnist/")
        p.add_argument("--seed", type=int, default=1)
    for name in ("rounds", "record"):
        sub.choices[name].add_argument("--rounds", type=int, default=5,
                                       help="rounds of each run (default 5)")
    rounds = sub.choices["rounds"]
    rounds.add_argument("--rule", choices=sorted(RULES), default="fedavg",
                        help="the authors' server rule (RULES; default fedavg)")
    rounds.add_argument("--start-round", type=int, default=1,
                        help=f"the run's first round, 1-based (default 1; {FIRST_DROP - 1}: "
                             "the server step's first drop in the third of 5 rounds)")
    rounds.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                        help="both codes compute in this precision (default float64: no rounding)")
    rounds.add_argument("--rtol", type=float,
                        help="largest relative difference allowed (default 1e-10 in float64, "
                             "1e-5 in float32)")
    rounds.add_argument("--recorded", type=Path,
                        help="compare with this recording instead of running the authors' code")
    record_options = sub.choices["record"]
    record_options.add_argument("--out", type=Path, required=True,
                                help="the recording to write (tests/data/...)")
    record_options.add_argument("--rules", nargs="+", choices=sorted(RULES),
                                help="record the runs of these rules only (default: every run)")
    record_options.add_argument("--merge", nargs="+", type=Path,
                                help="write the runs of these recordings to --out instead")
    sub.choices["masks"].add_argument("--draws", type=int, default=200)
    args = parser.parse_args()
    given = args.authors or getattr(args, "recorded", None) or getattr(args, "merge", None)
    if not given:
        parser.error("--authors is required (or, for rounds, --recorded)")
    args.authors = args.authors.resolve() if args.authors is not None else None
    args.raw_dir = str(Path(args.raw_dir).resolve())
    if args.command == "masks":
        sys.exit(check_masks(args))
    if args.command == "record":
        args.recorded, args.inputs, args.dtype, args.rtol = None, None, torch.float64, 1e-10
        sys.exit(record(args))
    if args.start_round < 1:
        parser.error("--start-round is 1-based: 1 or more")
    args.start_round -= 1
    args.inputs = recording_inputs(args.recorded)
    args.dtype = getattr(torch, args.dtype)
    if args.rtol is None:
        args.rtol = 1e-10 if args.dtype == torch.float64 else 1e-5
    sys.exit(check_rounds(args))


if __name__ == "__main__":
    main()
