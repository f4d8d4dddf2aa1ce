"""The federated simulation: sampling, client updates, aggregation, evaluation.

Randomness is derived, not carried: the model is initialised from ``seed``; round t's participants
come from a generator seeded by (seed, t), and client i's minibatch order and dropout masks in round
t from (seed, t, i), each from its own generator (``fedmgda.scheduler.dropout_generator``): the same
whichever path trains the client and whichever runs share its pack. Hence every algorithm run with
the same seed sees the same initial model and the same participants (paired comparisons,
docs/protocol.md §6.1), and a run resumed from a checkpoint continues exactly as if it had never
stopped, without saving any RNG state.

This module is one run's protocol, in one place: sampling, the round (the clients' requests, the
algorithm's client-side hooks, aggregation), evaluation, divergence, and when to checkpoint and
write the outputs (their files: ``fedmgda.checkpoints``, ``fedmgda.results``). A run is a generator
(``Simulation.steps``; one round from a given model: ``Simulation.round``) that yields a typed
request (``TrainRequest``, ``LossRequest``, ``EvalRequest``) whenever a round's clients must be
trained, its participants' losses evaluated or its model evaluated; it computes nothing of that
itself. The scheduler (``fedmgda.scheduler``: ``run``, ``run_packed``, ``run_round``) drives one or
several runs and answers their requests, choosing the reference path (``fedmgda.client``) or a fast
path (``fedmgda.fastpaths``). A request carries all its inputs: the run's ``RunInputs`` (built once:
model and local training, samples, partition digest, local term) and, for training, each
participant's seed key (seed, t, i), loss scale (an attack's, computed here only) and client state;
the scheduler reads nothing else of the run.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedmgda import checkpoints, provenance, results
from fedmgda.algorithms import Algorithm, ClientRound, RoundContext
from fedmgda.attacks import force_attacker, loss_bias, loss_scale
from fedmgda.catalog import get_algorithm, make_algorithm
from fedmgda.checkpoints import RunState
from fedmgda.client import FlatModel, LocalHParams, LocalTrainer, evaluate_samples
from fedmgda.config import RunConfig, too_many_clients
from fedmgda.contract import DIVERGENCE, CheckedHooks
from fedmgda.data.base import FederatedDataset
from fedmgda.errors import ConfigError, PluginError, TrainingStopped, warn_deprecated
from fedmgda.metrics import accuracy_stats, improved_fraction, participant_stats, per_owner_mean
from fedmgda.models import build_model
from fedmgda.results import per_user_table, run_result
from fedmgda.screening import Screened, finite_mean, screen_reports

# names this module used to hold, and where they live now: importing one from here still works,
# with one deprecation warning per name, until fedmgda 0.2.0 (CHANGELOG.md, "Deprecated")
MOVED = {"CHECKPOINT": "fedmgda.checkpoints", "RunResult": "fedmgda.results",
         "write_result": "fedmgda.results", "protocol_stats": "fedmgda.results",
         "NONFINITE_COLUMNS": "fedmgda.results"}
_warned: set[str] = set()


def __getattr__(name: str) -> Any:
    """A moved name (``MOVED``) from its new home, with a deprecation warning the first time."""
    if name not in MOVED:
        raise AttributeError(f"module 'fedmgda.simulator' has no attribute {name!r}")
    import importlib

    if name not in _warned:
        _warned.add(name)
        warn_deprecated(f"fedmgda.simulator.{name} is deprecated: import it from {MOVED[name]} "
                        f"(from {MOVED[name]} import {name}); the old place goes in fedmgda 0.2.0")
    return getattr(importlib.import_module(MOVED[name]), name)


def resolve_device(name: str, dataset: str | None = None, model: str | None = None) -> torch.device:
    """``name`` as a torch device; ``auto``: cpu without CUDA, else the faster device for the
    run's dataset and model by the measured round times (:func:`fedmgda.devices.choose_device`)."""
    if name == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        if dataset is None:
            return torch.device("cuda")
        from fedmgda.devices import choose_device

        return torch.device(choose_device(dataset, model, cuda_available=True))
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} requested but CUDA is not available on this machine")
    return torch.device(name)


def load_dataset(cfg: RunConfig) -> tuple[FederatedDataset, str]:
    """The run's federated dataset and its model name, from the dataset registry."""
    from fedmgda.data import DATASET_SPECS, load_federated

    if cfg.dataset not in DATASET_SPECS:
        raise ConfigError(f"unknown dataset {cfg.dataset!r}; "
                          f"known: {', '.join(sorted(DATASET_SPECS))}")
    data = load_federated(cfg.dataset, cfg.raw_dir, partition=cfg.partition, seed=cfg.seed,
                          options=cfg.dataset_options, partition_file=cfg.partition_file)
    return data, cfg.model or DATASET_SPECS[cfg.dataset].model


@dataclass
class TermFallback:
    """Why a run's local term trains on the reference path although the run is batched and its
    algorithm lets the term be vmap-ed: its term or its clients' states failed to vmap in its pack
    (``fedmgda.scheduler.Scheduler.refuse_vmap``, which sets ``reason``), from then on for the rest
    of the run. None: no such failure (yet)."""

    reason: str | None = None


@dataclass(frozen=True)
class RunInputs:
    """What a run's requests are computed from, the same all run long (``Simulation.inputs``, in
    every request): its model and local training, its samples on its device, how its clients may
    train. Runs with equal ``partition`` have equal train and test splits: the scheduler computes
    their participants' losses and their evaluations together."""

    name: str  # dataset/algorithm/seed (messages)
    algorithm: str  # a local term's fall-back to the reference path holds per algorithm
    device: torch.device
    trainer: LocalTrainer  # the model and the local hyper-parameters
    data: FederatedDataset  # the pooled samples and the users' splits, on the device
    # each user's train indices on the CPU (the batched path plans minibatches there)
    train_idx_cpu: list[torch.Tensor]
    partition: str  # a digest of the train and test splits
    test_x: torch.Tensor  # every user's test samples, pooled, and the user owning each
    test_y: torch.Tensor
    test_owner: torch.Tensor
    batched: bool  # the config's ``batched`` and ``cuda_graphs``
    cuda_graphs: bool
    # term(w, w_start, state): the algorithm's (checked), or None
    local_term: Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor] | None
    vmap_local_term: bool  # False: the algorithm declares that its term cannot be vmap-ed
    # set by its pack's scheduler
    fallback: TermFallback = field(default_factory=TermFallback, compare=False)

    def participant_losses(self, w: torch.Tensor, users: list[int]) -> dict[str, torch.Tensor]:
        """Loss and accuracy of ``w`` on each participant's train split (eval mode), evaluated
        in one pass over the participants' pooled samples.

        ``loss``: mean per-sample loss; ``total``: the sum of minibatch means
        (``participant_stats``)."""
        idx = [self.data.train_idx[user] for user in users]
        pooled = torch.cat(idx)
        per_sample, correct = evaluate_samples(self.trainer.model, w, self.data.x[pooled],
                                               self.data.y[pooled])
        return participant_stats(per_sample, correct, [len(i) for i in idx],
                                 self.trainer.hparams.batch_size)

    def evaluate_users(self, w: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Every user's test accuracy and mean test loss under ``w``."""
        per_sample, correct = evaluate_samples(self.trainer.model, w, self.test_x, self.test_y)
        acc = per_owner_mean(correct, self.test_owner, self.data.num_users)
        loss = per_owner_mean(per_sample, self.test_owner, self.data.num_users)
        return acc.cpu().numpy(), loss.cpu().numpy()

    def evaluate_global(self, w: torch.Tensor) -> dict[str, float]:
        out = {}
        for name, (x, y) in self.data.global_test.items():
            out[f"test_acc_{name}"] = float(evaluate_samples(self.trainer.model, w, x, y)[1].mean())
        return out

    def evaluate(self, w: torch.Tensor,
                 with_global: bool) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """``evaluate_users`` and, with ``with_global``, ``evaluate_global`` (else {})."""
        acc, loss = self.evaluate_users(w)
        return acc, loss, self.evaluate_global(w) if with_global else {}


@dataclass(frozen=True)
class TrainRequest:
    """A run asks for round ``t``'s local training of ``users`` from ``w`` and is sent back their
    (updates, reported mean local losses). Per participant, in ``users`` order: ``seed_keys``,
    what its minibatch order and dropout masks derive from (run seed, round, user);
    ``loss_scales``, the factor on its objective (``fedmgda.attacks.loss_scale``); ``states``, its
    state (``client_state``) when the run's algorithm has a local term (``run.local_term``), else
    None."""

    run: RunInputs
    w: torch.Tensor
    t: int
    users: list[int]
    seed_keys: list[tuple[int, int, int]]
    loss_scales: list[float]
    states: list[Any] | None = None


@dataclass(frozen=True)
class LossRequest:
    """A run asks for ``run.participant_losses(w, users)``."""

    run: RunInputs
    w: torch.Tensor
    users: list[int]


@dataclass(frozen=True)
class EvalRequest:
    """A run asks for ``run.evaluate(w, with_global)`` (its evaluation rounds)."""

    run: RunInputs
    w: torch.Tensor
    with_global: bool


@dataclass(frozen=True)
class RoundRecord:
    """One round (``Simulation.round``): round ``t``, its metrics.csv ``row``, the participants
    whose updates were aggregated (``users``; ``updates``, a row each, in that order), the global
    model the run goes on from (``w_next``: the round's start model when it diverged), why it
    diverged (``diverged``, else None) and its per-user table when it stored one (``per_user``)."""

    t: int
    row: dict[str, Any]
    users: list[int]
    updates: torch.Tensor
    w_next: torch.Tensor
    diverged: str | None = None
    per_user: pd.DataFrame | None = None


class Simulation:
    """One federated training run of ``cfg`` (data and model may be injected, e.g. by tests).

    ``dtype``: the model and the samples cast to it after the model is initialised (e.g.
    ``torch.float64``; default: as built, float32); ``dropout=False``: the clients train without
    dropout (``LocalTrainer(dropout=False)``: in eval mode). Both are for checks, not for runs of
    the protocol (scripts/lockstep_authors_fmnist.py)."""

    def __init__(self, cfg: RunConfig, data: FederatedDataset | None = None,
                 model_name: str | None = None, *, dtype: torch.dtype | None = None,
                 dropout: bool = True):
        self.cfg = cfg
        self.device = resolve_device(cfg.device, cfg.dataset, model_name or cfg.model)
        if self.device.type == "cuda":
            cuda_settings(cfg)
        if data is None:
            data, model_name = load_dataset(cfg)
        if model_name is None:
            raise ConfigError("model_name is required when a dataset is injected")
        self.train_sizes = np.array(data.train_sizes())
        self.test_sizes = np.array(data.test_sizes())
        self.data = cast_samples(data.to(self.device), dtype)
        self.num_users = data.num_users
        if cfg.attack.active and cfg.attack.user >= self.num_users:
            raise ConfigError(f"attack.user = {cfg.attack.user} but the dataset has "
                              f"{self.num_users} users")

        torch.manual_seed(cfg.seed)  # the same initial model for every algorithm of a seed
        module = build_model(model_name, tuple(data.x.shape[1:]), data.num_classes, cfg.init,
                             cfg.conv).to(self.device)
        self.model = FlatModel(module.to(dtype) if dtype is not None else module)
        # its declared facts (fedmgda.catalog)
        self.algorithm_info = get_algorithm(cfg.algorithm, cfg.plugin)
        options = {name: getattr(cfg, name) for name in self.algorithm_info.run_options}
        self.algorithm = make_algorithm(cfg.algorithm, cfg.hparams, cfg.rounds, self.num_users,
                                        cfg.plugin, **options)
        batch = None if cfg.batch_size == "full" else int(cfg.batch_size)
        self.local = LocalHParams(cfg.local_epochs, batch, cfg.local_lr, cfg.momentum,
                                  self.algorithm.proximal_mu)
        # what they return, checked
        self.hooks = CheckedHooks(self.algorithm, cfg.algorithm, cfg.plugin, owner=self)
        self.clients = ClientSide(self.algorithm, self.hooks, self.local, self.train_sizes,
                                  cfg.rounds)
        self.trainer = LocalTrainer(self.model, self.local, dropout=dropout)
        if (cfg.clients_per_round or 0) > self.num_users:  # natural users: known from the data
            raise ConfigError(too_many_clients(cfg.clients_per_round, cfg.dataset, self.num_users))
        self.per_round = cfg.clients_per_round or max(
            1, math.floor(cfg.participation * self.num_users + 1e-9))
        self.needs_pre_round_loss = (cfg.track_improvement
                                     or self.algorithm_info.needs_pre_round_losses)
        self.rounds_started = self.rounds_done = 0  # in this process (for progress lines)
        # the text written as the folder's run.yaml with the outputs (None: none; fedmgda.cli)
        self.config_text: str | None = None
        self.mean_acc = math.nan  # the latest evaluated mean user accuracy
        # (w, its version, users, losses): round t's post is round t+1's pre
        self._last_losses: tuple | None = None
        local_term = self.hooks.local_term if self.algorithm.has_local_term() else None
        self.inputs = run_inputs(cfg, self.device, self.trainer, self.data, local_term,
                                 type(self.algorithm).vmap_local_term)
        self.environment = provenance.environment_stamp(self.device, data.partition_hash)

    @property
    def client_states(self) -> dict[int, Any]:
        """The algorithm's per-client states (``ClientSide.states``: kept in checkpoints)."""
        return self.clients.states

    def share_samples(self, lead: Simulation) -> None:
        """Train and evaluate on ``lead``'s copy of the pooled samples, equal to this run's (a pack,
        ``fedmgda.scheduler.check_packable``, then holds one copy)."""
        self.data = replace(self.data, x=lead.data.x, y=lead.data.y)
        self.inputs = replace(self.inputs, data=self.data)

    # ------------------------------------------------------------------ sampling and clients
    def participants(self, t: int) -> list[int]:
        """Round t's participants (``sample_participants``)."""
        return sample_participants(self.cfg, self.train_sizes, self.per_round, t)

    def _losses(self, w: torch.Tensor, users: list[int]):
        """``participant_losses(w, users)`` asked of the driver (a generator), remembered once:
        with full participation, the post-round losses are the next round's pre-round losses."""
        last = self._last_losses
        if last is not None and last[0] is w and last[1] == w._version and last[2] == users:
            return last[3]
        losses = yield LossRequest(self.inputs, w, users)
        self._last_losses = (w, w._version, list(users), losses)
        return losses

    # ------------------------------------------------------------------ evaluation
    def model_stats(self, w: torch.Tensor) -> tuple[dict[str, float], pd.DataFrame]:
        """The statistics of model ``w`` and its per-user vector (what per_user_final.csv
        stores)."""
        acc, loss = self.inputs.evaluate_users(w)
        return ({**accuracy_stats(acc, self.test_sizes), **self.inputs.evaluate_global(w)},
                per_user_table(self.test_sizes, acc, loss))

    # ------------------------------------------------------------------ the run
    def steps(self, out_dir: str | Path | None = None, fresh_if_unreadable: bool = False,
              should_stop: Callable[[], bool] | None = None):
        """The run as a generator: it yields a TrainRequest whenever a round's clients must be
        trained and is sent back their (updates, train losses), yields a LossRequest when its
        participants' losses are needed and is sent back ``participant_losses``, yields an
        EvalRequest when its model is evaluated and is sent back ``evaluate``, and returns the
        RunResult. Driving several runs' generators together is what ``run_packed`` does.
        A checkpoint in ``out_dir`` is resumed from; one it cannot resume from stops the run
        (``checkpoints.UnusableCheckpoint``), or with ``fresh_if_unreadable`` is set aside and
        the run starts from round 0, which it prints. ``should_stop`` (a run with ``out_dir``):
        asked at the end of each round but the last; True checkpoints the run and raises
        ``TrainingStopped`` (a signal to the trainer, ``fedmgda.cli``)."""
        cfg = self.cfg
        out = Path(out_dir) if out_dir is not None else None
        state = resume_state(self, out, fresh_if_unreadable) if out is not None else None
        if state is None:
            state = RunState(w=self.model.initial_vector().to(self.device))
            state.iterate_sum = torch.zeros_like(state.w)
        started = time.perf_counter() - state.elapsed
        w = state.w
        self.rounds_done = self.rounds_started = state.next_round
        for t in range(state.next_round, cfg.rounds):
            try:
                row, w_next = yield from self._round(w, t, state)
            # a hook broke its contract: this run fails, its pack goes on
            except PluginError as error:
                state.failure = (t + 1, str(error))
                print(f"[engine] {out or 'run'}: failed at round {t + 1}: {error}", flush=True)
                break
            state.rows.append(row)
            self.rounds_done = t + 1
            if math.isfinite(row.get("mean_acc", math.nan)):
                self.mean_acc = row["mean_acc"]
            if state.diverged_round is not None:
                break
            w = w_next
            state.iterate_sum += w
            state.next_round, state.w = t + 1, w
            if out is not None and t + 1 < cfg.rounds:
                checkpoint_or_stop(self, out, state, started, should_stop)
        state.elapsed = time.perf_counter() - started
        result = final_result(self, w, state)
        if out is not None:
            results.write_result(result, out, self.config_text)
            (out / checkpoints.CHECKPOINT).unlink(missing_ok=True)
        return result

    def _round(self, w: torch.Tensor, t: int, state: RunState):
        """Round t of the run (``round``, a generator), kept in its progress ``state`` (why it
        diverged, its per-user table); returns the metrics row and the next global model."""
        record = yield from self.round(w, t)
        if record.diverged is not None:
            state.diverged_round, state.diverged_because = t + 1, record.diverged
        if record.per_user is not None:
            state.per_user_rows.append(record.per_user)
        return record.row, record.w_next

    def round(self, w: torch.Tensor, t: int):
        """Round t from the global model ``w`` (a generator: it yields for the clients' training
        and the evaluations, as ``steps``, and returns the ``RoundRecord``;
        ``fedmgda.scheduler.run_round`` drives it alone). Participants whose reports are not finite
        are left out of the aggregation
        (``screen_reports``); the round diverges only when the global model (its weights, or its
        evaluated test losses) is not finite, or when no participant could send a finite report
        from it. The algorithm's and the clients' states advance as in the run."""
        attack = self.cfg.attack
        users = self.participants(t)
        sizes = [int(self.train_sizes[u]) for u in users]
        pre = (yield from self._losses(w, users)) if self.needs_pre_round_loss else None
        # on the objective it trains and on the loss it reports
        scales = [loss_scale(attack, u) for u in users]
        updates, train_losses = yield train_request(self.inputs, self.clients, self.cfg.seed, w,
                                                    t, users, scales)
        biases = torch.tensor([loss_bias(attack, u) for u in users], device=self.device)
        reported_total = (self.algorithm.reported_loss(pre, sizes)
                          * torch.tensor(scales, device=self.device) + biases if pre is not None
                          else torch.full((len(users),), float("nan"), device=self.device))
        reported_losses = [train_losses + biases] + ([reported_total] if pre is not None else [])
        screened = screen_reports(users, updates, reported_losses, self.algorithm.uses_losses)
        row: dict[str, Any] = {"round": t + 1, "train_loss": finite_mean(train_losses),
                               **screened.columns()}
        if not screened.kept:  # no participant could report finitely from the global model
            row["eta"] = float("nan")
            return RoundRecord(t, row, [], updates[:0], w, "no participant sent a finite report")
        updates, ctx = self.clients.context(w, t, screened, updates, train_losses, biases,
                                            reported_total, sizes)
        try:
            w_next, info = self.hooks.aggregate(w, updates, ctx)
        except DIVERGENCE:  # not finite numbers only; any other error of a hook fails the run
            w_next, info = w.new_full(w.shape, float("nan")), {"eta": float("nan")}
        row["eta"] = info.get("eta", float("nan"))
        if not torch.isfinite(w_next).all():
            return RoundRecord(t, row, list(ctx.participants), updates, w, "weights not finite")
        if self.cfg.track_improvement:
            post = yield from self._losses(w_next, users)
            row["improved_loss"] = improved_fraction(pre["loss"], post["loss"])
            row["improved_acc"] = improved_fraction(pre["acc"], post["acc"], higher_is_better=True)
        per_user, diverged = yield from evaluate_round(self.inputs, self.cfg, self.test_sizes,
                                                       w_next, t, row)
        return RoundRecord(t, row, list(ctx.participants), updates, w if diverged else w_next,
                           diverged, per_user)


def resume_state(sim: Simulation, out: Path, fresh_if_unreadable: bool) -> RunState | None:
    """The progress of the checkpoint in ``out`` (``checkpoints.resume``), the algorithm's and
    clients' states of the run ``sim`` restored; None: none, or one set aside."""
    resumed = checkpoints.resume(out, sim.device, sim.cfg.to_dict(), sim.model.num_params,
                                 sim.environment, fresh_if_unreadable)
    if resumed is None:
        return None
    sim.algorithm.load_state_dict(resumed.algorithm)
    sim.clients.states = resumed.client_states
    return resumed.state


def checkpoint_or_stop(sim: Simulation, out: Path, state: RunState, started: float,
                       should_stop: Callable[[], bool] | None) -> None:
    """After a round but the last: the run's checkpoint when ``checkpoint_every`` says so or a
    stop is asked for (``should_stop``), then ``TrainingStopped`` for the latter."""
    stopping = should_stop is not None and should_stop()
    every = sim.cfg.checkpoint_every
    if stopping or (every and state.next_round % every == 0):
        state.elapsed = time.perf_counter() - started
        checkpoints.save(out, state, sim.cfg.to_dict(), sim.algorithm.state_dict(),
                         sim.client_states, sim.environment)
    if stopping:
        raise TrainingStopped([(str(out), state.next_round)])


def train_request(inputs: RunInputs, clients: ClientSide, seed: int, w: torch.Tensor, t: int,
                  users: list[int], loss_scales: list[float]) -> TrainRequest:
    """Round t's training request of a run, with each participant's state (``clients``) if the
    algorithm has a local term."""
    states = [clients.state(u, w) for u in users] if inputs.local_term is not None else None
    return TrainRequest(inputs, w, t, users, [(seed, t, u) for u in users], loss_scales, states)


def final_result(sim: Simulation, w: torch.Tensor, state: RunState) -> results.RunResult:
    """The outputs of the run ``sim`` (``results.run_result``); its final model: the average of the
    iterates (``final_model``, or the algorithm's ``averages_iterates``), else the last one."""
    cfg = sim.cfg
    average = cfg.final_model == "average" or (cfg.final_model == "auto"
                                               and sim.algorithm_info.averages_iterates)
    final_w = state.iterate_sum / cfg.rounds if average else w
    final = None
    if state.diverged_round is None and state.failure is None:
        final = ("average of all iterates" if average else "last iterate",
                 *sim.model_stats(final_w))
    device = (str(sim.device) if sim.device.type == "cpu"
              else f"{sim.device} ({torch.cuda.get_device_name(sim.device)})")
    return run_result(cfg.to_dict(), state, final_w, final, device=device,
                      participants_per_round=sim.per_round, environment=sim.environment)


class ClientSide:
    """A run's clients as its algorithm sees them: each client's state (``states``, kept in the
    run's checkpoints; made by the ``client_state`` hook before the client's first round) and, after
    a round's training, the ``after_training`` hook of each participant the aggregation uses: its
    new state, and its report in the round's ``RoundContext``."""

    def __init__(self, algorithm: Algorithm, hooks: CheckedHooks, local: LocalHParams,
                 train_sizes: np.ndarray, rounds: int):
        self.algorithm, self.hooks, self.local = algorithm, hooks, local
        self.train_sizes, self.rounds = train_sizes, rounds
        self.states: dict[int, Any] = {}

    def state(self, user: int, w: torch.Tensor) -> Any:
        if user not in self.states:
            self.states[user] = self.hooks.client_state(user, w)
        return self.states[user]

    def context(self, w: torch.Tensor, t: int, screened: Screened, updates: torch.Tensor,
                train_losses: torch.Tensor, biases: torch.Tensor, reported_total: torch.Tensor,
                sizes: list[int]) -> tuple[torch.Tensor, RoundContext]:
        """The updates and the RoundContext of the participants the aggregation uses
        (``screened.kept``), after their ``after_training``; a participant left out keeps its
        client state."""
        users, kept = screened.users, screened.kept
        # only then copies: with every report finite, the round is unchanged
        if len(kept) < len(users):
            at = torch.tensor(kept, dtype=torch.long, device=updates.device)
            users, sizes = [users[i] for i in kept], [sizes[i] for i in kept]
            updates, reported_total = updates[at], reported_total[at]
            train_losses, biases = train_losses[at], biases[at]
        reports = self.after_training(w, users, updates, train_losses)
        return updates, RoundContext(t, self.rounds, users, reported_total, train_losses + biases,
                                     sizes, reports)

    def after_training(self, w: torch.Tensor, users: list[int], updates: torch.Tensor,
                       train_losses: torch.Tensor) -> list[Any]:
        """Each participant's ``after_training``: its new state (kept) and its report (returned)."""
        if not self.algorithm.has_client_state():
            return [None] * len(users)
        reports = []
        for user, update, loss in zip(users, updates, train_losses):
            steps = self.local.epochs * self.local.batches_per_epoch(int(self.train_sizes[user]))
            client = ClientRound(user, self.state(user, w), update, loss, steps, self.local.lr)
            self.states[user], report = self.hooks.after_training(client)
            reports.append(report)
        return reports


def sample_participants(cfg: RunConfig, train_sizes: np.ndarray, per_round: int,
                        t: int) -> list[int]:
    """Round t's participants: ``per_round`` (floor(p*m)) users without replacement, uniformly or,
    with ``sampling: size``, with probability proportional to their train sizes (successive draws,
    each among the users not drawn yet, as ``np.random.choice(m, k, replace=False, p=n_i / n)``
    in the q-FFL code: fair_flearn fedbase.py:L142-148, ``select_clients`` with sampling 2); an
    attacker is forced in (``force_attacker``). Drawn from a generator seeded by (seed, t)."""
    rng = np.random.default_rng([cfg.seed, t])
    p = train_sizes / train_sizes.sum() if cfg.sampling == "size" else None
    chosen = [int(u) for u in rng.choice(len(train_sizes), per_round, replace=False, p=p)]
    if cfg.attack.active:
        chosen = force_attacker(chosen, cfg.attack.user)
    return chosen


def evaluate_round(inputs: RunInputs, cfg: RunConfig, test_sizes: np.ndarray, w: torch.Tensor,
                   t: int, row: dict[str, Any]):
    """Round t's evaluation of its new global model ``w`` (every ``eval_every`` rounds and where
    per-user vectors are stored; a generator that yields its EvalRequest), its statistics put in
    ``row``: the round's per-user table (None where none is stored) and why the run diverged (its
    test loss not finite), else None."""
    store_users = t % cfg.per_user_every == 0 or t == cfg.rounds - 1
    if not (t % cfg.eval_every == 0 or store_users):
        return None, None
    acc, loss, global_acc = yield EvalRequest(inputs, w, store_users)
    row.update(accuracy_stats(acc, test_sizes))
    if not np.isfinite(loss).all():  # the global model's own loss: it has diverged
        return None, "test loss not finite"
    if not store_users:
        return None, None
    row.update(global_acc)
    return per_user_table(test_sizes, acc, loss, t + 1), None


def cuda_settings(cfg: RunConfig) -> None:
    """A CUDA run's backend settings, explicit: PyTorch's default lets cuDNN use TF32."""
    torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
    torch.backends.cudnn.allow_tf32 = cfg.tf32
    # some conv backward algorithms use atomics
    torch.backends.cudnn.deterministic = cfg.deterministic
    torch.backends.cudnn.benchmark = False


def cast_samples(data: FederatedDataset, dtype: torch.dtype | None) -> FederatedDataset:
    """``data`` with its samples (and its global test sets' samples) in ``dtype``; None: as they
    are."""
    if dtype is None:
        return data
    return replace(data, x=data.x.to(dtype),
                   global_test={name: (x.to(dtype), y)
                                for name, (x, y) in data.global_test.items()})


def run_inputs(cfg: RunConfig, device: torch.device, trainer: LocalTrainer, data: FederatedDataset,
               local_term: Callable | None, vmap_local_term: bool) -> RunInputs:
    """What a run's requests carry (``RunInputs``), built once."""
    train_idx_cpu = [i.cpu() for i in data.train_idx]
    partition = hashlib.sha1(b"".join(i.numpy().tobytes() + b"|" for i in [
        *train_idx_cpu, *(i.cpu() for i in data.test_idx)])).hexdigest()
    test_owner = torch.cat([torch.full((len(i),), u, device=device)
                            for u, i in enumerate(data.test_idx)])
    test_idx = torch.cat(data.test_idx)
    return RunInputs(f"{cfg.dataset}/{cfg.algorithm}/seed{cfg.seed}", cfg.algorithm, device,
                     trainer, data, train_idx_cpu, partition, data.x[test_idx], data.y[test_idx],
                     test_owner, cfg.batched, cfg.cuda_graphs, local_term, vmap_local_term)
