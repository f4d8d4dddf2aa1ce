"""Lockstep check: the authors' F-MNIST code and the package, fed the same inputs, round by round.

    git clone https://github.com/watml/Fed-MGDA /tmp/Fed-MGDA        # outside this repository
    mkdir -p /tmp/Fed-MGDA/data/fmnist/FashionMNIST/raw && cp resources/raw/fmnist/*.gz "$_" && gunzip -kf "$_"/*.gz
    pip install --target /tmp/authors-site quadprog tensorboardX tqdm  # the authors' imports
    export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"  # numpy 2.4 on x86-64: their sort's order (docs/protocol.md §8.19)
    PYTHONPATH=/tmp/authors-site python scripts/lockstep_authors_fmnist.py rounds --authors /tmp/Fed-MGDA/main --seed 1 --rounds 5
    PYTHONPATH=/tmp/authors-site python scripts/lockstep_authors_fmnist.py masks --authors /tmp/Fed-MGDA/main --seed 1 --draws 200

Both codes run FedAvg (the authors' ``--epsilon=0 --normalize=0``) with their Figure 3 F-MNIST
arguments (``scripts/authors_code.py``, the harness of every script that runs their code) on the authors' partition (the package's
``sort: quicksort``, index for index the same: ``scripts/compare_authors_fmnist.py``).

``rounds`` runs the authors' ``main/federated_main.py`` as released (``runpy``, in their folder;
no file of theirs is changed) with three things set from outside, so that both codes get the same
inputs:

- participants: each round's ``np.random.choice(range(100), 10, replace=False)`` of
  ``federated_main.py`` returns the package's participants of that round (``Simulation.participants``);
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
and the package's reference and batched paths beside each other. ``--record FILE`` saves the
authors' float64 models of rounds 1 and the last and their accuracies, ``--recorded FILE`` compares
with such a recording instead of running their code (tests/data/test_authors_lockstep.py).

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


def package_config(seed: int, rounds: int, raw_dir: str, batched: bool, partition_file: str | None = None) -> RunConfig:
    """The package's run of the authors' FedAvg on F-MNIST (config/fmnist.yaml's
    ``fmnist_shards_authors_sort`` setting), every user evaluated after the last round only."""
    return RunConfig(dataset="fmnist", algorithm="fedavg", partition="shards", dataset_options={"sort": "quicksort"},
                     raw_dir=raw_dir, batch_size=10, local_lr=0.01, momentum=0.5, participation=0.1, rounds=rounds,
                     seed=seed, eval_every=rounds, per_user_every=rounds, track_improvement=False, batched=batched,
                     device="cpu", checkpoint_every=0, partition_file=partition_file)


def lockstep_simulation(args, batched: bool) -> Simulation:
    """The package's side: without dropout, computing in ``args.dtype`` (its model and samples cast
    after the model is initialised; float64: the lockstep check without float32's rounding, whose
    differences the ReLUs and max-pools amplify round by round); with ``args.inputs`` (a
    recording's), fed the recorded inputs."""
    inputs = getattr(args, "inputs", None)
    options = {"dtype": args.dtype, "dropout": False}
    if inputs is None:
        return Simulation(package_config(args.seed, args.rounds, args.raw_dir, batched), **options)
    with tempfile.TemporaryDirectory() as tmp:
        part_file = save_partition(recorded_partition(inputs, args.seed, args.raw_dir), Path(tmp) / "partition.npz")
        sim = Simulation(package_config(args.seed, args.rounds, args.raw_dir, batched, str(part_file)), **options)
    return fed(sim, inputs)


# ------------------------------------------------------------------ the inputs a recording carries
PARTS = ("train", "val", "test")


def recorded_inputs(sim: Simulation, partition: Partition) -> dict[str, torch.Tensor]:
    """What both codes were fed, saved with a recording so that the package can be fed it again on
    any machine: the partition's index lists, each round's participants and every participant's
    minibatch order (its positions, all minibatches in a row)."""
    rounds = sim.cfg.rounds
    participants = [sim.participants(t) for t in range(rounds)]
    inputs = {f"{part}_{what}": torch.from_numpy(values) for part in PARTS
              for what, values in zip(("sizes", "idx"), flat(getattr(partition, part)))}
    inputs["participants"] = torch.tensor(participants)
    orders = [torch.tensor([i for batch in minibatches(sim, t, u) for i in batch]) for t in range(rounds) for u in participants[t]]
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
    options = resolve_options(DATASET_SPECS["fmnist"], package_config(seed, 1, raw_dir, batched=True).dataset_options)
    return Partition(dataset="fmnist", scheme="shards", seed=seed, options=options,
                     fingerprint=load_raw("fmnist", raw_dir, options).fingerprint(),
                     **{part: unflat(inputs, part) for part in PARTS})


def fed(sim: Simulation, inputs: dict[str, torch.Tensor]) -> Simulation:
    """``sim`` drawing its participants and minibatch orders from ``inputs`` instead of its seed
    (the orders are looked up by the client's seed, ``derived_seed(seed, round, user)``)."""
    participants = inputs["participants"].tolist()
    keys = [derived_seed(sim.cfg.seed, t, u) for t, users in enumerate(participants) for u in users]
    orders = dict(zip(keys, (torch.from_numpy(o) for o in unflat(inputs, "order"))))
    sim.participants = lambda t: participants[t]
    sim.trainer.minibatches.epoch_order = lambda n, generator: orders[generator.initial_seed()]  # one local epoch
    return sim


def minibatches(sim: Simulation, t: int, user: int) -> list[list[int]]:
    """The package's minibatches of (round t, user): positions into the user's train samples,
    from the client's seed key as ``scheduler.train_one`` draws them."""
    n = len(sim.data.train_idx[user])
    generator = torch.Generator().manual_seed(derived_seed(sim.cfg.seed, t, user))
    return [b.tolist() for b in sim.trainer.minibatches.batch_order(n, generator)]


def package_rounds(sim: Simulation, starts: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The package's global model after every round (``run_round``, the rounds of one pack); with
    ``starts``, round t starts from ``starts[t - 1]`` (the authors' model after round t - 1)
    instead of the package's own."""
    scheduler, w = Scheduler([sim.inputs]), sim.model.initial_vector().to(sim.device)
    models: list[torch.Tensor] = []
    for t in range(sim.cfg.rounds):
        w = run_round(sim, starts[t - 1].clone() if starts is not None and t > 0 else w, t, scheduler).w_next
        models.append(w.detach().clone())
    return models


def authors_rounds(authors: Path, sim: Simulation, dropout: bool, dtype: torch.dtype = torch.float32) -> tuple[list[torch.Tensor], np.ndarray]:
    """The authors' ``federated_main.py`` for ``sim.cfg.rounds`` rounds with the package's
    participants and minibatches (and, with ``dropout`` False, no dropout): its global model after
    every round and every user's test accuracy after the last (``authors_code.authors_rounds``)."""
    participants = [sim.participants(t) for t in range(sim.cfg.rounds)]
    return authors_code.authors_rounds(authors, participants, lambda t, user: minibatches(sim, t, user),
                                       sim.cfg.seed, dropout, dtype)


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def authors_record(args) -> tuple[dict[int, torch.Tensor], np.ndarray]:
    """The authors' side of ``rounds``: {round: global model} and the last round's per-user
    accuracies, run now (``--authors``) or read from a recording (``--recorded``, written by
    ``--record``, float64 only: rounds 1 and the last; tests/data/authors_lockstep_seed1.pt)."""
    if args.recorded is not None:
        recorded = torch.load(args.recorded, weights_only=True)
        if (recorded["seed"], recorded["rounds"], recorded["dtype"]) != (args.seed, args.rounds, str(args.dtype)):
            raise SystemExit(f"{args.recorded}: recorded for seed {recorded['seed']}, {recorded['rounds']} rounds, "
                             f"{recorded['dtype']}; run with those options")
        return dict(zip(recorded["rounds_kept"].tolist(), recorded["models"])), recorded["accuracies"].numpy()
    sim = lockstep_simulation(args, batched=True)
    inputs = recorded_inputs(sim, make_partition("fmnist", args.raw_dir, "shards", args.seed, sim.cfg.dataset_options))
    models, accuracies = authors_rounds(args.authors, sim, dropout=False, dtype=args.dtype)
    theirs = {t + 1: w for t, w in enumerate(models)}
    if args.record is not None:
        if args.dtype != torch.float64:
            raise SystemExit("--record keeps float64 runs only (--dtype float64)")
        kept = [1, args.rounds]
        torch.save({"seed": args.seed, "rounds": args.rounds, "dtype": str(args.dtype), "rounds_kept": torch.tensor(kept),
                    "models": torch.stack([theirs[t] for t in kept]), "accuracies": torch.from_numpy(accuracies),
                    "inputs": inputs}, args.record)
    return theirs, accuracies


def recording_inputs(recorded: Path | None) -> dict[str, torch.Tensor] | None:
    """The inputs a recording carries (``recorded_inputs``), to feed the package; None without one."""
    return None if recorded is None else torch.load(recorded, weights_only=True)["inputs"]


PATHS = {False: "reference", True: "batched"}


def package_paths(args, paths: tuple[bool, ...] = (False, True)) -> dict[bool, list[torch.Tensor]]:
    """The package's global models of every round on its reference path (False) and batched path (True)."""
    return {batched: package_rounds(lockstep_simulation(args, batched)) for batched in paths}


def check_rounds(args, own: dict[bool, list[torch.Tensor]] | None = None) -> int:
    """Both codes from the same start with the same inputs: in float64 the global models of every
    round must agree to ``--rtol``; in float32, where rounding differences grow round by round,
    each round is also run from the authors' model of the round before, and the package's two
    paths beside each other show how far rounding alone takes them apart. ``own``: the package's
    ``package_paths``, if already computed (tests: the batched path only)."""
    theirs, their_acc = authors_record(args)
    own = own if own is not None else package_paths(args)
    one = {}
    if args.dtype == torch.float32 and len(theirs) == args.rounds:
        starts = [theirs[t] for t in range(1, args.rounds + 1)]
        one = {batched: package_rounds(lockstep_simulation(args, batched), starts=starts) for batched in own}
    failed = False
    names = ", ".join(PATHS[b] for b in own)
    print(f"seed {args.seed}, {str(args.dtype)[6:]}, dropout off, the same participants and minibatches in both codes; "
          "largest |difference| / largest |weight| of the global models:")
    print(f"round | package vs authors ({names})" + (" | reference vs batched" if len(own) == 2 else "")
          + (f" | one round from the authors' model ({names})" if one else ""))
    for t, authors in sorted(theirs.items()):
        whole = [relative_difference(models[t - 1].to(authors.dtype), authors) for models in own.values()]
        line = f"{t:5d} | " + ", ".join(f"{d:.1e}" for d in whole)
        if len(own) == 2:
            line += f" | {relative_difference(own[False][t - 1], own[True][t - 1]):.1e}"
        if one:
            single = [relative_difference(models[t - 1], authors) for models in one.values()]
            failed |= max(single) > args.rtol
            line += " | " + ", ".join(f"{d:.1e}" for d in single)
        else:
            failed |= max(whole) > args.rtol
        print(line)
    sim = lockstep_simulation(args, batched=True)
    acc, _ = sim.inputs.evaluate_users(theirs[args.rounds].to(sim.device, sim.data.x.dtype))
    differ = int((np.abs(acc - their_acc) > 0).sum())
    failed |= differ > 0
    print(f"round {args.rounds}: the authors' model evaluated by both codes: users whose test accuracy differs {differ}/{len(acc)} "
          f"(mean: package {100 * acc.mean():.3f} %, authors {100 * their_acc.mean():.3f} %)")
    within = "from the same model, each round" if one else "every round"
    print("lockstep: " + ("FAILED" if failed else f"passed ({within} within {args.rtol:g}; the evaluations identical)"))
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
    assert torch.equal(w0, torch.cat([p.detach().flatten() for p in start.parameters()])), "initial models differ"

    theirs, ours, their_loss, our_loss = [], [], [], []
    idx = sim.data.train_idx[user]
    x, y = sim.data.x[idx], sim.data.y[idx]
    for draw in range(args.draws):
        torch.manual_seed(10_000 + draw)
        diff, loss, *_ = client.update_weights(copy.deepcopy(start), 0)
        theirs.append(torch.cat([diff[k].flatten() for k in start.state_dict()]))
        their_loss.append(loss)
        result = sim.trainer.train(w0, x, y, torch.Generator().manual_seed(derived_seed(args.seed, 0, user)),
                                   dropout_generator=torch.Generator().manual_seed(20_000 + draw))
        ours.append(result.update)
        our_loss.append(float(result.train_loss))
    a, p = torch.stack(theirs).double(), torch.stack(ours).double()
    gap = float(((a.mean(0) - p.mean(0)) ** 2).sum())
    expected = float((a.var(0).sum() + p.var(0).sum()) / args.draws)
    print(f"seed {args.seed}, user {user}, {args.draws} draws of dropout masks from the same start and minibatches:")
    for name, v in (("authors", a), ("package", p)):
        norms = v.norm(dim=1)
        print(f"  {name}: update norm {float(norms.mean()):.5f} ± {float(norms.std()):.5f}, "
              f"tr Var(update) {float(v.var(0).sum()):.3e}")
    print(f"  training loss: authors {np.mean(their_loss):.4f} ± {np.std(their_loss, ddof=1):.4f}, "
          f"package {np.mean(our_loss):.4f} ± {np.std(our_loss, ddof=1):.4f}")
    print(f"  |mean_a - mean_p|^2 = {gap:.3e}; sampling error alone gives about {expected:.3e}: ratio {gap / expected:.2f}")
    keep = sim.trainer.minibatches.dropout_masks(len(batches), 10, torch.Generator().manual_seed(0), torch.device("cpu"))
    print("  package masks, kept fraction per site: " + ", ".join(f"{float(k.float().mean()):.3f}" for k in keep))
    start.eval()
    sim.model.module.eval()
    with torch.no_grad():
        same = torch.equal(start(x[:60]), sim.model.module(x[:60]))
    print(f"  eval-mode outputs of 60 samples identical (no dropout, no scaling at test time): {same}")
    return 0 if gap / expected < 3 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("rounds", "masks"):
        p = sub.add_parser(name)
        p.add_argument("--authors", type=Path, help="the main/ folder of a watml/Fed-MGDA checkout")
        p.add_argument("--raw-dir", default="resources/raw", help="resources/raw, with the four F-MNIST files in fmnist/")
        p.add_argument("--seed", type=int, default=1)
    sub.choices["rounds"].add_argument("--rounds", type=int, default=5)
    sub.choices["rounds"].add_argument("--dtype", choices=("float64", "float32"), default="float64",
                                       help="both codes compute in this precision (default float64: no rounding to amplify)")
    sub.choices["rounds"].add_argument("--rtol", type=float, help="largest relative difference allowed (default 1e-10 in float64, 1e-5 in float32)")
    sub.choices["rounds"].add_argument("--record", type=Path, help="also save the authors' models and accuracies here")
    sub.choices["rounds"].add_argument("--recorded", type=Path, help="compare with this recording instead of running the authors' code")
    sub.choices["masks"].add_argument("--draws", type=int, default=200)
    args = parser.parse_args()
    if args.authors is None and getattr(args, "recorded", None) is None:
        parser.error("--authors is required (or, for rounds, --recorded)")
    args.authors = args.authors.resolve() if args.authors is not None else None
    args.raw_dir = str(Path(args.raw_dir).resolve())
    if args.command == "rounds":
        args.inputs = recording_inputs(args.recorded)
        args.dtype = getattr(torch, args.dtype)
        args.rtol = args.rtol if args.rtol is not None else (1e-10 if args.dtype == torch.float64 else 1e-5)
    sys.exit(check_rounds(args) if args.command == "rounds" else check_masks(args))


if __name__ == "__main__":
    main()
