"""The federated simulation: sampling, client updates, aggregation, evaluation, checkpoints.

Randomness is derived, not carried: the model is initialised from ``seed``; round t's participants
come from a generator seeded by (seed, t), and client i's minibatch order and dropout masks in
round t from (seed, t, i), each from its own generator (``fedmgda.scheduler.dropout_generator``):
the same whichever path trains the client and whichever runs share its pack. Hence every algorithm run with the same seed sees the same initial model
and the same participants (paired comparisons, docs/protocol.md §6.1), and a run resumed from a
checkpoint continues exactly as if it had never stopped, without saving any RNG state.

This module is one run's protocol, in one place: sampling, the round (the clients' requests, the
algorithm's client-side hooks, aggregation), evaluation, divergence, checkpoints and outputs. A
run is a generator (``Simulation.steps``) that yields a typed request (``TrainRequest``,
``LossRequest``, ``EvalRequest``) whenever a round's clients must be trained, its participants'
losses evaluated or its model evaluated; it computes nothing of that itself. The scheduler
(``fedmgda.scheduler``: ``run``, ``run_packed``) drives one or several runs and answers their
requests, choosing the reference path (``fedmgda.client``) or a fast path (``fedmgda.fastpaths``).
A request carries all its inputs: the run's ``RunInputs`` (built once: model and local training,
samples, partition digest, local term) and, for training, each participant's seed key
(seed, t, i), loss scale (an attack's, computed here only) and client state; the scheduler reads
nothing else of the run.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedmgda import checkpoints, provenance
from fedmgda.algorithms import ClientRound, RoundContext
from fedmgda.attacks import force_attacker, loss_bias, loss_scale
from fedmgda.catalog import get_algorithm, make_algorithm
from fedmgda.client import FlatModel, LocalHParams, LocalTrainer, evaluate_samples
from fedmgda.config import RunConfig
from fedmgda.contract import CheckedHooks
from fedmgda.data.base import FederatedDataset
from fedmgda.errors import ConfigError, PluginError
from fedmgda.metrics import (
    STATISTICS,
    accuracy_stats,
    improved_fraction,
    participant_stats,
    per_owner_mean,
)
from fedmgda.models import build_model
from fedmgda.results import PER_USER, PER_USER_FINAL, protocol_round
from fedmgda.runfolder import FRESH_OPTION, writing

CHECKPOINT = "checkpoint.pt"


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
        raise ConfigError(f"unknown dataset {cfg.dataset!r}; known: {', '.join(sorted(DATASET_SPECS))}")
    data = load_federated(cfg.dataset, cfg.raw_dir, partition=cfg.partition, seed=cfg.seed, options=cfg.dataset_options, partition_file=cfg.partition_file)
    return data, cfg.model or DATASET_SPECS[cfg.dataset].model


@dataclass
class RunResult:
    metrics: pd.DataFrame
    per_user: pd.DataFrame
    summary: dict[str, Any]
    final_weights: torch.Tensor  # the final model as a flat vector (average iterate for AFL)
    final_users: pd.DataFrame | None = None  # every user's test accuracy and loss under it (None: diverged)


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
    train_idx_cpu: list[torch.Tensor]  # each user's train indices on the CPU (the batched path plans minibatches there)
    partition: str  # a digest of the train and test splits
    test_x: torch.Tensor  # every user's test samples, pooled, and the user owning each
    test_y: torch.Tensor
    test_owner: torch.Tensor
    batched: bool  # the config's ``batched`` and ``cuda_graphs``
    cuda_graphs: bool
    local_term: Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor] | None  # term(w, w_start, state): the algorithm's (checked), or None
    vmap_local_term: bool  # False: the algorithm declares that its term cannot be vmap-ed

    def participant_losses(self, w: torch.Tensor, users: list[int]) -> dict[str, torch.Tensor]:
        """Loss and accuracy of ``w`` on each participant's train split (eval mode), evaluated
        in one pass over the participants' pooled samples.

        ``loss``: mean per-sample loss; ``total``: the sum of minibatch means (``participant_stats``)."""
        idx = [self.data.train_idx[user] for user in users]
        pooled = torch.cat(idx)
        per_sample, correct = evaluate_samples(self.trainer.model, w, self.data.x[pooled], self.data.y[pooled])
        return participant_stats(per_sample, correct, [len(i) for i in idx], self.trainer.hparams.batch_size)

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

    def evaluate(self, w: torch.Tensor, with_global: bool) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """``evaluate_users`` and, with ``with_global``, ``evaluate_global`` (else {})."""
        acc, loss = self.evaluate_users(w)
        return acc, loss, self.evaluate_global(w) if with_global else {}


@dataclass(frozen=True)
class TrainRequest:
    """A run asks for round ``t``'s local training of ``users`` from ``w`` and is sent back their
    (updates, reported mean local losses). Per participant, in ``users`` order: ``seed_keys``,
    what its minibatch order and dropout masks derive from (run seed, round, user);
    ``loss_scales``, the factor on its objective (``fedmgda.attacks.loss_scale``); ``states``, its
    state (``client_state``) when the run's algorithm has a local term (``run.local_term``), else None."""

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


@dataclass
class _State:
    """What a checkpoint holds (everything else is rebuilt from the config)."""

    next_round: int = 0
    w: torch.Tensor | None = None
    iterate_sum: torch.Tensor | None = None
    rows: list[dict[str, float]] = field(default_factory=list)
    per_user_rows: list[pd.DataFrame] = field(default_factory=list)
    elapsed: float = 0.0
    diverged_round: int | None = None
    failure: tuple[int, str] | None = None  # (round, message) of a hook that broke its contract
    diverged_because: str | None = None  # why: weights or test loss not finite, or no finite report
    made_under: dict[str, Any] | None = None  # the environment stamp of the checkpoint resumed from


class Simulation:
    """One federated training run of ``cfg`` (data and model may be injected, e.g. by tests)."""

    def __init__(self, cfg: RunConfig, data: FederatedDataset | None = None, model_name: str | None = None):
        self.cfg = cfg
        self.device = resolve_device(cfg.device, cfg.dataset, model_name or cfg.model)
        if self.device.type == "cuda":  # explicit: PyTorch's default lets cuDNN use TF32
            torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
            torch.backends.cudnn.allow_tf32 = cfg.tf32
            torch.backends.cudnn.deterministic = cfg.deterministic  # some conv backward algorithms use atomics
            torch.backends.cudnn.benchmark = False
        if data is None:
            data, model_name = load_dataset(cfg)
        if model_name is None:
            raise ConfigError("model_name is required when a dataset is injected")
        self.train_sizes = np.array(data.train_sizes())
        self.data = data.to(self.device)
        self.num_users = data.num_users
        if cfg.attack.active and cfg.attack.user >= self.num_users:
            raise ConfigError(f"attack.user = {cfg.attack.user} but the dataset has {self.num_users} users")

        torch.manual_seed(cfg.seed)  # the same initial model for every algorithm of a seed
        module = build_model(model_name, tuple(data.x.shape[1:]), data.num_classes, cfg.init).to(self.device)
        self.model = FlatModel(module)
        self.algorithm_info = get_algorithm(cfg.algorithm, cfg.plugin)  # its declared facts (fedmgda.catalog)
        options = {name: getattr(cfg, name) for name in self.algorithm_info.run_options}
        self.algorithm = make_algorithm(cfg.algorithm, cfg.hparams, cfg.rounds, self.num_users, cfg.plugin, **options)
        batch = None if cfg.batch_size == "full" else int(cfg.batch_size)
        self.local = LocalHParams(cfg.local_epochs, batch, cfg.local_lr, cfg.momentum, self.algorithm.proximal_mu)
        self.hooks = CheckedHooks(self.algorithm, cfg.algorithm, cfg.plugin, owner=self)  # what they return, checked
        self.client_states: dict[int, Any] = {}  # the algorithm's per-client state (kept in checkpoints)
        self.trainer = LocalTrainer(self.model, self.local)
        self.per_round = cfg.clients_per_round or max(1, math.floor(cfg.participation * self.num_users + 1e-9))
        self.per_round = min(self.per_round, self.num_users)
        self.needs_pre_round_loss = cfg.track_improvement or self.algorithm_info.needs_pre_round_losses
        self.rounds_started = self.rounds_done = 0  # in this process (for progress lines)
        self.mean_acc = math.nan  # the latest evaluated mean user accuracy
        self._last_losses: tuple | None = None  # (w, its version, users, losses): round t's post is round t+1's pre
        self.test_sizes = np.array(data.test_sizes())
        self.inputs = self._run_inputs()
        self.environment = provenance.environment_stamp(self.device, data.partition_hash)

    def _run_inputs(self) -> RunInputs:
        """What this run's requests carry (``RunInputs``), built once."""
        cfg, data = self.cfg, self.data
        train_idx_cpu = [i.cpu() for i in data.train_idx]
        partition = hashlib.sha1(b"".join(i.numpy().tobytes() + b"|" for i in [*train_idx_cpu, *(i.cpu() for i in data.test_idx)])).hexdigest()
        test_owner = torch.cat([torch.full((len(i),), u, device=self.device) for u, i in enumerate(data.test_idx)])
        test_idx = torch.cat(data.test_idx)
        local_term = self.hooks.local_term if self.algorithm.has_local_term() else None
        return RunInputs(f"{cfg.dataset}/{cfg.algorithm}/seed{cfg.seed}", cfg.algorithm, self.device, self.trainer, data,
                         train_idx_cpu, partition, data.x[test_idx], data.y[test_idx], test_owner, cfg.batched,
                         cfg.cuda_graphs, local_term, type(self.algorithm).vmap_local_term)

    def share_samples(self, lead: Simulation) -> None:
        """Train and evaluate on ``lead``'s copy of the pooled samples, equal to this run's (a pack,
        ``fedmgda.scheduler.check_packable``, then holds one copy)."""
        self.data = replace(self.data, x=lead.data.x, y=lead.data.y)
        self.inputs = replace(self.inputs, data=self.data)

    # ------------------------------------------------------------------ sampling and clients
    def participants(self, t: int) -> list[int]:
        """Round t's participants: floor(p*m) users without replacement, uniformly or, with
        ``sampling: size``, with probability proportional to their train sizes (successive draws,
        each among the users not drawn yet, as ``np.random.choice(m, k, replace=False, p=n_i / n)``
        in the q-FFL code: fair_flearn fedbase.py:L142-148, ``select_clients`` with sampling 2)."""
        rng = np.random.default_rng([self.cfg.seed, t])
        p = self.train_sizes / self.train_sizes.sum() if self.cfg.sampling == "size" else None
        chosen = [int(u) for u in rng.choice(self.num_users, self.per_round, replace=False, p=p)]
        if self.cfg.attack.active:
            chosen = force_attacker(chosen, self.cfg.attack.user)
        return chosen

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
        """The statistics of model ``w`` and its per-user vector (what per_user_final.csv stores)."""
        acc, loss = self.inputs.evaluate_users(w)
        users = pd.DataFrame({"user": np.arange(self.num_users), "n_test": self.test_sizes, "accuracy": acc, "loss": loss})
        return {**accuracy_stats(acc, self.test_sizes), **self.inputs.evaluate_global(w)}, users

    # ------------------------------------------------------------------ the run
    def steps(self, out_dir: str | Path | None = None, fresh_if_unreadable: bool = False):
        """The run as a generator: it yields a TrainRequest whenever a round's clients must be
        trained and is sent back their (updates, train losses), yields a LossRequest when its
        participants' losses are needed and is sent back ``participant_losses``, yields an
        EvalRequest when its model is evaluated and is sent back ``evaluate``, and returns the
        RunResult. Driving several runs' generators together is what ``run_packed`` does.
        A checkpoint in ``out_dir`` is resumed from; one it cannot resume from stops the run
        (``checkpoints.UnusableCheckpoint``), or with ``fresh_if_unreadable`` is set aside and
        the run starts from round 0, which it prints."""
        cfg = self.cfg
        out = Path(out_dir) if out_dir is not None else None
        state = self._resume(out, fresh_if_unreadable) if out is not None else None
        if state is None:
            state = _State(w=self.model.initial_vector().to(self.device))
            state.iterate_sum = torch.zeros_like(state.w)
        started = time.perf_counter() - state.elapsed
        w = state.w
        self.rounds_done = self.rounds_started = state.next_round
        for t in range(state.next_round, cfg.rounds):
            try:
                row, w_next = yield from self._round(w, t, state)
            except PluginError as error:  # a hook broke its contract: this run fails, its pack goes on
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
            if out is not None and cfg.checkpoint_every and (t + 1) % cfg.checkpoint_every == 0 and t + 1 < cfg.rounds:
                state.elapsed = time.perf_counter() - started
                self._save_checkpoint(out, state)
        state.elapsed = time.perf_counter() - started
        result = self._finish(w, state)
        if out is not None:
            write_result(result, out)
            (out / CHECKPOINT).unlink(missing_ok=True)
        return result

    def _round(self, w: torch.Tensor, t: int, state: _State):
        """One round (a generator: it yields for the clients' training, then returns the metrics
        row and the next global model). Participants whose reports are not finite are left out of
        the aggregation (``screen_reports``); the run diverges only when the global model (its
        weights, or its evaluated test losses) is not finite, or when no participant of a round
        could send a finite report from it."""
        cfg, attack = self.cfg, self.cfg.attack
        users = self.participants(t)
        sizes = [int(self.train_sizes[u]) for u in users]
        pre = (yield from self._losses(w, users)) if self.needs_pre_round_loss else None
        scales = [loss_scale(attack, u) for u in users]  # on the objective it trains and on the loss it reports
        updates, train_losses = yield self._train_request(w, t, users, scales)
        biases = torch.tensor([loss_bias(attack, u) for u in users], device=self.device)
        reported_total = self.algorithm.reported_loss(pre, sizes) * torch.tensor(scales, device=self.device) + biases if pre is not None else torch.full((len(users),), float("nan"), device=self.device)
        reported_losses = [train_losses + biases] + ([reported_total] if pre is not None else [])
        screened = screen_reports(users, updates, reported_losses, self.algorithm.uses_losses)
        row: dict[str, float] = {"round": t + 1, "train_loss": finite_mean(train_losses), **screened.columns()}
        if not screened.kept:  # no participant could report finitely from the global model
            state.diverged_round, state.diverged_because = t + 1, "no participant sent a finite report"
            row["eta"] = float("nan")
            return row, w
        updates, ctx = self._context(w, t, screened, updates, train_losses, biases, reported_total, sizes)
        try:
            w_next, info = self.hooks.aggregate(w, updates, ctx)
        except (FloatingPointError, ValueError, ArithmeticError):
            w_next, info = w.new_full(w.shape, float("nan")), {"eta": float("nan")}
        row["eta"] = info.get("eta", float("nan"))
        if not torch.isfinite(w_next).all():
            state.diverged_round, state.diverged_because = t + 1, "weights not finite"
            return row, w
        if cfg.track_improvement:
            post = yield from self._losses(w_next, users)
            row["improved_loss"] = improved_fraction(pre["loss"], post["loss"])
            row["improved_acc"] = improved_fraction(pre["acc"], post["acc"], higher_is_better=True)
        store_users = t % cfg.per_user_every == 0 or t == cfg.rounds - 1
        if t % cfg.eval_every == 0 or store_users:
            acc, loss, global_acc = yield EvalRequest(self.inputs, w_next, store_users)
            row.update(accuracy_stats(acc, self.test_sizes))
            if not np.isfinite(loss).all():  # the global model's own loss: it has diverged
                state.diverged_round, state.diverged_because = t + 1, "test loss not finite"
                return row, w
            if store_users:
                row.update(global_acc)
                state.per_user_rows.append(pd.DataFrame({"round": t + 1, "user": np.arange(self.num_users), "n_test": self.test_sizes, "accuracy": acc, "loss": loss}))
        return row, w_next

    def _context(self, w: torch.Tensor, t: int, screened: Screened, updates: torch.Tensor, train_losses: torch.Tensor,
                 biases: torch.Tensor, reported_total: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, RoundContext]:
        """The updates and the RoundContext of the participants the aggregation uses (``screened.kept``),
        after their ``after_training``; a participant left out keeps its client state."""
        users, kept = screened.users, screened.kept
        if len(kept) < len(users):  # only then copies: with every report finite, the round is unchanged
            at = torch.tensor(kept, dtype=torch.long, device=self.device)
            users, sizes, updates, reported_total = [users[i] for i in kept], [sizes[i] for i in kept], updates[at], reported_total[at]
            train_losses, biases = train_losses[at], biases[at]
        reports = self._after_training(w, users, updates, train_losses)
        return updates, RoundContext(t, self.cfg.rounds, users, reported_total, train_losses + biases, sizes, reports)

    def _client_state(self, user: int, w: torch.Tensor) -> Any:
        if user not in self.client_states:
            self.client_states[user] = self.hooks.client_state(user, w)
        return self.client_states[user]

    def _train_request(self, w: torch.Tensor, t: int, users: list[int], loss_scales: list[float]) -> TrainRequest:
        """Round t's training request, with each participant's state if the algorithm has a local term."""
        states = [self._client_state(u, w) for u in users] if self.inputs.local_term is not None else None
        return TrainRequest(self.inputs, w, t, users, [(self.cfg.seed, t, u) for u in users], loss_scales, states)

    def _after_training(self, w: torch.Tensor, users: list[int], updates: torch.Tensor, train_losses: torch.Tensor) -> list[Any]:
        """Each participant's ``after_training``: its new state (kept) and its report (returned)."""
        if not self.algorithm.has_client_state():
            return [None] * len(users)
        reports = []
        for user, update, loss in zip(users, updates, train_losses):
            steps = self.local.epochs * self.local.batches_per_epoch(int(self.train_sizes[user]))
            client = ClientRound(user, self._client_state(user, w), update, loss, steps, self.local.lr)
            self.client_states[user], report = self.hooks.after_training(client)
            reports.append(report)
        return reports

    def _finish(self, w: torch.Tensor, state: _State) -> RunResult:
        cfg = self.cfg
        metrics = pd.DataFrame(state.rows)
        for column in ("round", "eta", "train_loss", *NONFINITE_COLUMNS, "improved_loss", "improved_acc", *STATISTICS):  # a run failed in round 1 has none
            if column not in metrics:
                metrics[column] = np.nan
        per_user = pd.concat(state.per_user_rows, ignore_index=True) if state.per_user_rows else pd.DataFrame(columns=["round", "user", "n_test", "accuracy", "loss"])
        diverged = state.diverged_round is not None or state.failure is not None
        completed = len([r for r in state.rows if state.diverged_round != r["round"]])
        summary: dict[str, Any] = {
            "config": cfg.to_dict(),
            "status": "failed" if state.failure else "diverged" if diverged else "ok",
            "diverged_round": state.diverged_round,
            "diverged_because": state.diverged_because,
            **({"failed_round": state.failure[0], "error": state.failure[1]} if state.failure else {}),
            "rounds_completed": completed,
            "runtime_s": round(state.elapsed, 3),
            "device": str(self.device) if self.device.type == "cpu" else f"{self.device} ({torch.cuda.get_device_name(self.device)})",
            "participants_per_round": self.per_round,
            "final": None,
            "protocol": None,
            "environment": self.environment,
        }
        average = cfg.final_model == "average" or (cfg.final_model == "auto" and self.algorithm_info.averages_iterates)
        final_w = state.iterate_sum / cfg.rounds if average else w
        final_users = None
        if not diverged:
            summary["final_model"] = "average of all iterates" if average else "last iterate"
            summary["final"], final_users = self.model_stats(final_w)
            summary["protocol"] = protocol_stats(per_user, metrics, cfg.per_user_every)
        return RunResult(metrics, per_user, summary, final_w, final_users)

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, out: Path, state: _State) -> None:
        out.mkdir(parents=True, exist_ok=True)
        payload = {
            "config": self.cfg.to_dict(),
            "next_round": state.next_round,
            "w": state.w.cpu(),
            "iterate_sum": state.iterate_sum.cpu(),
            "algorithm": self.algorithm.state_dict(),
            "client_states": self.client_states,
            "rows": state.rows,
            "per_user_rows": [checkpoints.frame_columns(frame) for frame in state.per_user_rows],
            "elapsed": state.elapsed,
            "environment": self.environment,
        }
        with writing(out / CHECKPOINT) as tmp, open(tmp, "wb") as file:  # atomic: a kill leaves the previous checkpoint intact
            torch.save(payload, file)  # to a Python file: a full disk is an OSError (torch's own writer says "iostream error")

    def _resume(self, out: Path, fresh_if_unreadable: bool) -> _State | None:
        path = out / CHECKPOINT
        if not path.exists():
            return None
        try:
            state = self._read_checkpoint(path)
        except checkpoints.UnusableCheckpoint as refused:
            if not fresh_if_unreadable:
                raise
            aside = checkpoints.set_aside(refused)
            print(f"{out}: {path.name} {refused.why}: set aside as {aside.name} ({FRESH_OPTION}); "
                  "this run restarts from round 0", flush=True)
            return None
        print(f"{out}: resuming from its checkpoint (round {state.next_round} of {self.cfg.rounds} done)", flush=True)
        note = provenance.resume_note(state.made_under, self.environment)
        if note:
            print(f"{out}: {note}", flush=True)
        return state

    def _read_checkpoint(self, path: Path) -> _State:
        """The state of the checkpoint at ``path``, its algorithm's state loaded;
        ``checkpoints.UnusableCheckpoint`` if it is not one of this run."""
        payload = checkpoints.read(path, self.device)  # data only; refused if it is not a checkpoint
        if payload["config"] != self.cfg.to_dict():
            raise checkpoints.refuse(path, "belongs to a different run config")
        size = (self.model.num_params,)
        if payload["w"].shape != size or payload["iterate_sum"].shape != size:
            raise checkpoints.refuse(path, f"holds a model of {payload['w'].numel()} weights; this run's has {size[0]}")
        self.algorithm.load_state_dict(payload["algorithm"])
        self.client_states = payload["client_states"]
        return _State(
            next_round=payload["next_round"],
            w=payload["w"].to(self.device),
            iterate_sum=payload["iterate_sum"].to(self.device),
            rows=payload["rows"],
            per_user_rows=[checkpoints.frame(columns) for columns in payload["per_user_rows"]],
            elapsed=payload["elapsed"],
            made_under=payload.get("environment") if isinstance(payload.get("environment"), dict) else None,
        )


NONFINITE_COLUMNS = ("nonfinite_updates", "nonfinite_losses", "nonfinite_users", "dropped")


@dataclass
class Screened:
    """A round's participants sorted by what they reported (``screen_reports``)."""

    users: list[int]  # the round's participants
    kept: list[int]  # positions (into ``users``) of those the aggregation uses
    bad_updates: list[int]  # users whose update has a NaN or Inf entry
    bad_losses: list[int]  # users who reported a non-finite loss

    def columns(self) -> dict[str, Any]:
        """The round's metrics.csv columns: how many updates and losses were not finite, whose
        (space-separated user ids, "" when none), and how many participants were left out."""
        flagged = sorted(set(self.bad_updates) | set(self.bad_losses))
        return {"nonfinite_updates": len(self.bad_updates), "nonfinite_losses": len(self.bad_losses),
                "nonfinite_users": " ".join(map(str, flagged)), "dropped": len(self.users) - len(self.kept)}


def screen_reports(users: list[int], updates: torch.Tensor, losses: list[torch.Tensor], uses_losses: bool) -> Screened:
    """The one rule for non-finite reports, the same for every algorithm (docs/protocol-choices.md):
    a participant is left out of the round's aggregation when its update has a NaN or Inf entry,
    or when one of its reported ``losses`` (one tensor per kind of loss, a value per participant)
    is not finite and the algorithm reads losses (``uses_losses``). Nothing is replaced by zeros."""
    update_ok = torch.isfinite(updates).all(dim=1).tolist()
    loss_ok = torch.isfinite(torch.stack(losses)).all(dim=0).tolist()
    kept = [i for i in range(len(users)) if update_ok[i] and (loss_ok[i] or not uses_losses)]
    return Screened(list(users), kept, [u for u, ok in zip(users, update_ok) if not ok], [u for u, ok in zip(users, loss_ok) if not ok])


def finite_mean(values: torch.Tensor) -> float:
    """The mean of the finite values (NaN when none is): the round's reported training loss leaves
    out a participant whose loss is not finite (counted in ``nonfinite_losses``)."""
    finite = torch.isfinite(values)
    return float(values.mean() if bool(finite.all()) else values[finite].mean())


def protocol_stats(per_user: pd.DataFrame, metrics: pd.DataFrame, per_user_every: int) -> dict[str, float] | None:
    """Statistics of the last stored per-user vector at a round t (0-based) with
    t % per_user_every == 0: the vector the paper's tables were computed from (docs/protocol.md §6.3:
    round T-9 for T a multiple of 10, not the final model)."""
    last = protocol_round(per_user, per_user_every)
    if last is None:
        return None
    vector = per_user[per_user["round"] == last]
    stats: dict[str, float] = {"round": last, **accuracy_stats(vector["accuracy"].to_numpy(), vector["n_test"].to_numpy())}
    row = metrics[metrics["round"] == last]
    for column in metrics.columns:
        if column.startswith("test_acc_") and not row.empty:
            stats[column] = float(row[column].iloc[0])
    return stats


def write_result(result: RunResult, out: Path) -> None:
    """metrics.csv, per_user.csv, per_user_final.csv (the final model's per-user vector, from
    which tables compute its statistics: ``fedmgda.results``), then summary.json (written last:
    its presence marks completion)."""
    out.mkdir(parents=True, exist_ok=True)
    tables = {"metrics.csv": result.metrics, PER_USER: result.per_user, PER_USER_FINAL: result.final_users}
    for name, table in tables.items():
        if table is not None:
            with writing(out / name) as tmp:  # a full disk: one line naming the file
                table.to_csv(tmp, index=False)
    with writing(out / "summary.json") as tmp:
        tmp.write_text(json.dumps(result.summary, indent=2, default=float))
