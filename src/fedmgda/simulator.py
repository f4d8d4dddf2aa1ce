"""The federated simulation: sampling, client updates, aggregation, evaluation, checkpoints.

Randomness is derived, not carried: the model is initialised from ``seed``; round t's participants
come from a generator seeded by (seed, t), and client i's minibatch order and dropout masks in
round t from (seed, t, i). Hence every algorithm run with the same seed sees the same initial model
and the same participants (paired comparisons, docs/protocol.md §6.1), and a run resumed from a
checkpoint continues exactly as if it had never stopped, without saving any RNG state.

A run is a generator (``Simulation.steps``) that yields whenever a round's clients must be trained
or its participants' losses evaluated; ``run_packed`` drives several such runs in lockstep and
serves all their requests of a kind together.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedmgda.aggregators import ClientRound, RoundContext, make_aggregator
from fedmgda.attacks import force_attacker, loss_bias, loss_scale
from fedmgda.catalog import get_algorithm
from fedmgda.client import (
    ClientResult,
    CudaGraphs,
    DistinctSamples,
    FlatModel,
    LocalHParams,
    LocalTrainer,
    evaluate_linear,
    evaluate_samples,
    single_thread_on_cpu,
    size_groups,
)
from fedmgda.config import RunConfig
from fedmgda.data.base import FederatedDataset
from fedmgda.errors import ConfigError
from fedmgda.metrics import (
    STAT_KEYS,
    accuracy_stats,
    improved_fraction,
    participant_stats,
    per_owner_mean,
)
from fedmgda.models import build_model

CHECKPOINT = "checkpoint.pt"
_SAID_SEQUENTIAL: set[str] = set()  # algorithms whose fall-back to the reference path was logged


def derived_seed(*keys: int) -> int:
    """A 63-bit seed determined by ``keys`` (e.g. run seed, round, user)."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1 << 31, 1], dtype=np.uint64))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} requested but CUDA is not available on this machine")
    return torch.device(name)


def load_dataset(cfg: RunConfig) -> tuple[FederatedDataset, str]:
    """The run's federated dataset and its model name, from the dataset registry."""
    from fedmgda.data import DATASET_SPECS, load_federated

    if cfg.dataset not in DATASET_SPECS:
        raise ConfigError(f"unknown dataset {cfg.dataset!r}; known: {', '.join(sorted(DATASET_SPECS))}")
    data = load_federated(cfg.dataset, cfg.raw_dir, partition=cfg.partition, seed=cfg.seed, options=cfg.dataset_options, partition_file=cfg.partition_file)
    return data, DATASET_SPECS[cfg.dataset].model


@dataclass
class RunResult:
    metrics: pd.DataFrame
    per_user: pd.DataFrame
    summary: dict[str, Any]
    final_weights: torch.Tensor  # the final model as a flat vector (average iterate for AFL)


@dataclass
class TrainRequest:
    """A run asks for round ``t``'s local training of ``users`` from ``w`` and is sent back their
    (updates, reported mean local losses). ``local_terms``: each participant's term of its local
    objective, ``term(w, w_start)`` (the algorithm's ``local_term``), or None."""

    w: torch.Tensor
    t: int
    users: list[int]
    local_terms: list[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] | None = None


@dataclass
class LossRequest:
    """A run asks for ``participant_losses(w, users)``."""

    w: torch.Tensor
    users: list[int]


@dataclass
class EvalRequest:
    """A run asks for ``evaluate(w, with_global)`` (its evaluation rounds)."""

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


class Simulation:
    """One federated training run of ``cfg`` (data and model may be injected, e.g. by tests)."""

    def __init__(self, cfg: RunConfig, data: FederatedDataset | None = None, model_name: str | None = None):
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        if self.device.type == "cuda":  # explicit: PyTorch's default lets cuDNN use TF32
            torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
            torch.backends.cudnn.allow_tf32 = cfg.tf32
            torch.backends.cudnn.deterministic = cfg.deterministic  # some conv backward algorithms use atomics
            torch.backends.cudnn.benchmark = False
        if data is None:
            data, model_name = load_dataset(cfg)
        if model_name is None:
            raise ConfigError("model_name is required when a dataset is injected")
        self.train_idx_cpu = [i.cpu() for i in data.train_idx]  # the batched path plans minibatches on the CPU
        self.train_sizes = np.array(data.train_sizes())
        self.data = data.to(self.device)
        self.num_users = data.num_users
        if cfg.attack.active and cfg.attack.user >= self.num_users:
            raise ConfigError(f"attack.user = {cfg.attack.user} but the dataset has {self.num_users} users")

        torch.manual_seed(cfg.seed)  # the same initial model for every algorithm of a seed
        module = build_model(model_name, tuple(data.x.shape[1:]), data.num_classes, cfg.init).to(self.device)
        self.model = FlatModel(module)
        self.algorithm = get_algorithm(cfg.algorithm, cfg.plugin)  # what the rule needs (fedmgda.catalog)
        options = {name: getattr(cfg, name) for name in self.algorithm.run_options}
        self.aggregator = make_aggregator(cfg.algorithm, cfg.hparams, cfg.rounds, self.num_users, cfg.plugin, **options)
        batch = None if cfg.batch_size == "full" else int(cfg.batch_size)
        self.local = LocalHParams(cfg.local_epochs, batch, cfg.local_lr, cfg.momentum, self.aggregator.proximal_mu)
        # the algorithm's client side (fedmgda.aggregators.Aggregator): a local term only the
        # reference path serves, per-client state (kept in checkpoints) and reports
        self.client_states: dict[int, Any] = {}
        self.batched = cfg.batched and not self.aggregator.has_local_term()
        if cfg.batched and not self.batched and cfg.algorithm not in _SAID_SEQUENTIAL:
            _SAID_SEQUENTIAL.add(cfg.algorithm)
            print(f"[engine] {cfg.algorithm}: the batched and analytic paths do not serve its local_term; "
                  f"its clients train on the reference path, one after another", flush=True)
        graphs = CudaGraphs() if cfg.batched and cfg.cuda_graphs and self.device.type == "cuda" else None
        self.trainer = LocalTrainer(self.model, self.local, graphs=graphs)
        self.per_round = cfg.clients_per_round or max(1, math.floor(cfg.participation * self.num_users + 1e-9))
        self.per_round = min(self.per_round, self.num_users)
        self.needs_pre_round_loss = cfg.track_improvement or self.algorithm.needs_pre_round_losses
        self.rounds_started = self.rounds_done = 0  # in this process (for progress lines)
        self.mean_acc = math.nan  # the latest evaluated mean user accuracy
        self._last_losses: tuple | None = None  # (w, its version, users, losses): round t's post is round t+1's pre
        # runs whose partitions (train and test) match can have their participant losses and
        # their evaluations computed together
        self.partition_key = hashlib.sha1(b"".join(i.numpy().tobytes() + b"|" for i in [*self.train_idx_cpu, *(i.cpu() for i in data.test_idx)])).hexdigest()
        self._distinct_train: tuple[list[int], DistinctSamples] | None = None  # the latest participants' (packed linear runs)
        self._distinct_test: DistinctSamples | None = None

        test_idx = self.data.test_idx
        self.test_owner = torch.cat([torch.full((len(i),), u, device=self.device) for u, i in enumerate(test_idx)])
        self.test_sizes = np.array(data.test_sizes())
        self.test_x = self.data.x[torch.cat(test_idx)]
        self.test_y = self.data.y[torch.cat(test_idx)]

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

    def participant_losses(self, w: torch.Tensor, users: list[int]) -> dict[str, torch.Tensor]:
        """Loss and accuracy of ``w`` on each participant's train split (eval mode), evaluated
        in one pass over the participants' pooled samples.

        ``loss``: mean per-sample loss; ``total``: the sum of minibatch means (``participant_stats``)."""
        idx = [self.data.train_idx[user] for user in users]
        pooled = torch.cat(idx)
        per_sample, correct = evaluate_samples(self.model, w, self.data.x[pooled], self.data.y[pooled])
        return participant_stats(per_sample, correct, [len(i) for i in idx], self.local.batch_size)

    def _losses(self, w: torch.Tensor, users: list[int]):
        """``participant_losses(w, users)`` asked of the driver (a generator), remembered once:
        with full participation, the post-round losses are the next round's pre-round losses."""
        last = self._last_losses
        if last is not None and last[0] is w and last[1] == w._version and last[2] == users:
            return last[3]
        losses = yield LossRequest(w, users)
        self._last_losses = (w, w._version, list(users), losses)
        return losses

    # ------------------------------------------------------------------ evaluation
    def evaluate_users(self, w: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Every user's test accuracy and mean test loss under ``w``."""
        per_sample, correct = evaluate_samples(self.model, w, self.test_x, self.test_y)
        acc = per_owner_mean(correct, self.test_owner, self.num_users)
        loss = per_owner_mean(per_sample, self.test_owner, self.num_users)
        return acc.cpu().numpy(), loss.cpu().numpy()

    def evaluate_global(self, w: torch.Tensor) -> dict[str, float]:
        out = {}
        for name, (x, y) in self.data.global_test.items():
            out[f"test_acc_{name}"] = float(evaluate_samples(self.model, w, x, y)[1].mean())
        return out

    def evaluate(self, w: torch.Tensor, with_global: bool) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """``evaluate_users`` and, with ``with_global``, ``evaluate_global`` (else {})."""
        acc, loss = self.evaluate_users(w)
        return acc, loss, self.evaluate_global(w) if with_global else {}

    def distinct_train(self, users: list[int]) -> DistinctSamples:
        """The participants' pooled train samples as ``DistinctSamples`` (the latest participants' are kept)."""
        if self._distinct_train is None or self._distinct_train[0] != users:
            pooled = torch.cat([self.data.train_idx[user] for user in users])
            self._distinct_train = (list(users), DistinctSamples(self.data.x[pooled], self.data.y[pooled]))
        return self._distinct_train[1]

    def distinct_test(self) -> DistinctSamples:
        """The users' test samples (``test_x``), then each global test set, as ``DistinctSamples``."""
        if self._distinct_test is None:
            global_sets = list(self.data.global_test.values())
            x = torch.cat([self.test_x.flatten(1), *(gx.flatten(1) for gx, _ in global_sets)])
            self._distinct_test = DistinctSamples(x, torch.cat([self.test_y, *(gy for _, gy in global_sets)]))
        return self._distinct_test

    def model_stats(self, w: torch.Tensor) -> dict[str, float]:
        acc, _ = self.evaluate_users(w)
        return {**accuracy_stats(acc, self.test_sizes), **self.evaluate_global(w)}

    # ------------------------------------------------------------------ the run
    def run(self, out_dir: str | Path | None = None) -> RunResult:
        """Train the run; with ``out_dir``, resume from its checkpoint and write the outputs there."""
        return run_packed([self], [out_dir])[0]

    def steps(self, out_dir: str | Path | None = None):
        """The run as a generator: it yields a TrainRequest whenever a round's clients must be
        trained and is sent back their (updates, train losses), yields a LossRequest when its
        participants' losses are needed and is sent back ``participant_losses``, yields an
        EvalRequest when its model is evaluated and is sent back ``evaluate``, and returns the
        RunResult. Driving several runs' generators together is what ``run_packed`` does."""
        cfg = self.cfg
        out = Path(out_dir) if out_dir is not None else None
        state = self._resume(out) if out is not None else None
        if state is None:
            state = _State(w=self.model.initial_vector().to(self.device))
            state.iterate_sum = torch.zeros_like(state.w)
        started = time.perf_counter() - state.elapsed
        w = state.w
        self.rounds_done = self.rounds_started = state.next_round
        for t in range(state.next_round, cfg.rounds):
            row, w_next = yield from self._round(w, t, state)
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
        row and the next global model)."""
        cfg, attack = self.cfg, self.cfg.attack
        users = self.participants(t)
        sizes = [int(self.train_sizes[u]) for u in users]
        pre = (yield from self._losses(w, users)) if self.needs_pre_round_loss else None
        updates, train_losses = yield self._train_request(w, t, users)
        reports = self._after_training(w, users, updates, train_losses)
        scales = torch.tensor([loss_scale(attack, u) for u in users], device=self.device)
        biases = torch.tensor([loss_bias(attack, u) for u in users], device=self.device)
        reported_total = self.aggregator.reported_loss(pre, sizes) * scales + biases if pre is not None else torch.full((len(users),), float("nan"), device=self.device)
        ctx = RoundContext(t, cfg.rounds, users, reported_total, train_losses + biases, sizes, reports)
        row: dict[str, float] = {"round": t + 1, "train_loss": float(train_losses.mean())}
        try:
            w_next, info = self.aggregator.aggregate(w, updates, ctx)
        except (FloatingPointError, ValueError, ArithmeticError):
            w_next, info = w.new_full(w.shape, float("nan")), {"eta": float("nan")}
        row["eta"] = info.get("eta", float("nan"))
        if not (torch.isfinite(w_next).all() and math.isfinite(row["train_loss"])):
            state.diverged_round = t + 1
            return row, w
        if cfg.track_improvement:
            post = yield from self._losses(w_next, users)
            row["improved_loss"] = improved_fraction(pre["loss"], post["loss"])
            row["improved_acc"] = improved_fraction(pre["acc"], post["acc"], higher_is_better=True)
        store_users = t % cfg.per_user_every == 0 or t == cfg.rounds - 1
        if t % cfg.eval_every == 0 or store_users:
            acc, loss, global_acc = yield EvalRequest(w_next, store_users)
            row.update(accuracy_stats(acc, self.test_sizes))
            if store_users:
                row.update(global_acc)
                state.per_user_rows.append(pd.DataFrame({"round": t + 1, "user": np.arange(self.num_users), "n_test": self.test_sizes, "accuracy": acc, "loss": loss}))
        return row, w_next

    def _client_state(self, user: int, w: torch.Tensor) -> Any:
        if user not in self.client_states:
            self.client_states[user] = self.aggregator.client_state(user, w)
        return self.client_states[user]

    def _train_request(self, w: torch.Tensor, t: int, users: list[int]) -> TrainRequest:
        """Round t's training request, with each participant's local term if the algorithm has one."""
        if not self.aggregator.has_local_term():
            return TrainRequest(w, t, users)
        term = self.aggregator.local_term
        return TrainRequest(w, t, users, [partial(_with_state, term, self._client_state(u, w)) for u in users])

    def _after_training(self, w: torch.Tensor, users: list[int], updates: torch.Tensor, train_losses: torch.Tensor) -> list[Any]:
        """Each participant's ``after_training``: its new state (kept) and its report (returned)."""
        if not self.aggregator.has_client_state():
            return [None] * len(users)
        reports = []
        for user, update, loss in zip(users, updates, train_losses):
            steps = self.local.epochs * self.local.batches_per_epoch(int(self.train_sizes[user]))
            client = ClientRound(user, self._client_state(user, w), update, loss, steps, self.local.lr)
            self.client_states[user], report = self.aggregator.after_training(client)
            reports.append(report)
        return reports

    def _finish(self, w: torch.Tensor, state: _State) -> RunResult:
        cfg = self.cfg
        metrics = pd.DataFrame(state.rows)
        for column in ("eta", "train_loss", "improved_loss", "improved_acc", *STAT_KEYS):
            if column not in metrics:
                metrics[column] = np.nan
        per_user = pd.concat(state.per_user_rows, ignore_index=True) if state.per_user_rows else pd.DataFrame(columns=["round", "user", "n_test", "accuracy", "loss"])
        diverged = state.diverged_round is not None
        completed = len([r for r in state.rows if state.diverged_round != r["round"]])
        summary: dict[str, Any] = {
            "config": cfg.to_dict(),
            "status": "diverged" if diverged else "ok",
            "diverged_round": state.diverged_round,
            "rounds_completed": completed,
            "runtime_s": round(state.elapsed, 3),
            "device": str(self.device) if self.device.type == "cpu" else f"{self.device} ({torch.cuda.get_device_name(self.device)})",
            "participants_per_round": self.per_round,
            "final": None,
            "protocol": None,
        }
        average = cfg.final_model == "average" or (cfg.final_model == "auto" and self.algorithm.averages_iterates)
        final_w = state.iterate_sum / cfg.rounds if average else w
        if not diverged:
            summary["final_model"] = "average of all iterates" if average else "last iterate"
            summary["final"] = self.model_stats(final_w)
            summary["protocol"] = protocol_stats(per_user, metrics, cfg.per_user_every)
        return RunResult(metrics, per_user, summary, final_w)

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, out: Path, state: _State) -> None:
        out.mkdir(parents=True, exist_ok=True)
        payload = {
            "config": self.cfg.to_dict(),
            "next_round": state.next_round,
            "w": state.w.cpu(),
            "iterate_sum": state.iterate_sum.cpu(),
            "aggregator": self.aggregator.state_dict(),
            "client_states": self.client_states,
            "rows": state.rows,
            "per_user_rows": state.per_user_rows,
            "elapsed": state.elapsed,
        }
        tmp = out / (CHECKPOINT + ".tmp")
        torch.save(payload, tmp)
        os.replace(tmp, out / CHECKPOINT)  # atomic: a kill leaves the previous checkpoint intact

    def _resume(self, out: Path) -> _State | None:
        path = out / CHECKPOINT
        if not path.exists():
            return None
        payload = torch.load(path, map_location=self.device, weights_only=False)
        if payload["config"] != self.cfg.to_dict():
            raise ConfigError(f"{path} belongs to a different run config; delete it to start this run afresh")
        self.aggregator.load_state_dict(payload["aggregator"])
        self.client_states = payload.get("client_states", {})
        return _State(
            next_round=payload["next_round"],
            w=payload["w"].to(self.device),
            iterate_sum=payload["iterate_sum"].to(self.device),
            rows=payload["rows"],
            per_user_rows=payload["per_user_rows"],
            elapsed=payload["elapsed"],
        )


def _with_state(term: Callable, state: Any, w: torch.Tensor, w_start: torch.Tensor) -> torch.Tensor:
    """An algorithm's ``local_term`` of one client: ``term(w, w_start, state)``."""
    return term(w, w_start, state)


def check_packable(sims: list[Simulation]) -> None:
    """Runs can be packed when they share the device, the model, the local hyper-parameters, the
    batched setting and the pooled samples (seeds, algorithms, their hyper-parameters, attacks and
    partitions may differ). The packed runs then share one copy of the samples."""
    lead = sims[0]
    for sim in sims[1:]:
        differ = [name for name, same in [
            ("device", sim.device == lead.device),
            ("model", type(sim.model.module) is type(lead.model.module) and sim.model.shapes == lead.model.shapes),
            ("local training (epochs, batch size, local lr, momentum, proximal mu)", sim.local == lead.local),
            ("batched", sim.cfg.batched == lead.cfg.batched),
            ("pooled samples", sim.data.x is lead.data.x or (sim.data.x.shape == lead.data.x.shape and torch.equal(sim.data.x, lead.data.x) and torch.equal(sim.data.y, lead.data.y))),
        ] if not same]
        if differ:
            raise ConfigError(f"runs {lead.cfg.dataset}/{lead.cfg.algorithm}/seed{lead.cfg.seed} and {sim.cfg.dataset}/{sim.cfg.algorithm}/seed{sim.cfg.seed} cannot be packed: they differ in {'; '.join(differ)}")
        sim.data = replace(sim.data, x=lead.data.x, y=lead.data.y)


class Progress:
    """Progress lines of a run or a pack, printed (flushed, for ``tail -f``) at most every
    ``every`` seconds, and after the first and the last round: round t/T, seconds per round, ETA,
    the mean user accuracy of the run (of a pack: min/mean/max over its runs, and how many are
    still training)."""

    def __init__(self, sims: list[Simulation], every: float):
        self.sims, self.every = sims, every
        self.start = self.last = time.perf_counter()
        self.printed_round = -1

    def __call__(self, active: int) -> None:
        now = time.perf_counter()
        total = max(sim.cfg.rounds for sim in self.sims)
        round_ = min((sim.rounds_done for sim in self.sims if sim.rounds_done < sim.cfg.rounds), default=total)
        done = sum(sim.rounds_done - sim.rounds_started for sim in self.sims) / len(self.sims)
        due = round_ != self.printed_round and (now - self.last >= self.every or round_ in (1, total))
        if not due or done <= 0:
            return
        self.last, self.printed_round = now, round_
        per_round = (now - self.start) / done
        eta = per_round * (total - round_)
        acc = np.array([sim.mean_acc for sim in self.sims if math.isfinite(sim.mean_acc)]) * 100
        if len(self.sims) == 1:
            accuracy = f"mean user acc {acc[0]:.2f} %" if len(acc) else "mean user acc n/a"
        else:
            accuracy = f"{active}/{len(self.sims)} runs active; mean user acc min {acc.min():.2f} / mean {acc.mean():.2f} / max {acc.max():.2f} %" if len(acc) else f"{active}/{len(self.sims)} runs active"
        print(f"[progress] round {round_}/{total} | {per_round:.3f} s/round | ETA {eta / 60:.1f} min | {accuracy}", flush=True)


def run_packed(sims: list[Simulation], out_dirs: list[str | Path | None], progress_every: float | None = None) -> list[RunResult]:
    """Train several runs in lockstep ("run packing"): every round, the participants of all of them
    are trained as one batched computation (``train_packed``), which keeps a large GPU busy; each
    run keeps its own sampling, aggregation, evaluation, checkpoints and outputs. A finished or
    diverged run leaves the pack. Models without dropout get the updates of unpacked runs (up to
    float rounding); with dropout, the masks differ. With one run this is ``Simulation.run``.
    ``progress_every`` (seconds): print progress lines (``Progress``); None: none."""
    if len(sims) != len(out_dirs):
        raise ValueError("run_packed needs one output folder (or None) per run")
    check_packable(sims)
    runs = [sim.steps(out) for sim, out in zip(sims, out_dirs)]
    results: list[RunResult | None] = [None] * len(sims)
    pending: dict[int, TrainRequest | LossRequest | EvalRequest] = {}

    def advance(i: int, answer) -> None:
        try:
            pending[i] = runs[i].send(answer)
        except StopIteration as done:
            results[i] = done.value
            pending.pop(i, None)

    # a linear model's operations (training and evaluation) are too small to split across threads
    with single_thread_on_cpu(sims[0].device, sims[0].trainer.analytic is not None):
        for i in range(len(runs)):
            advance(i, None)
        progress = Progress(sims, progress_every) if progress_every is not None else None
        while pending:
            order = list(pending)
            for i, answer in zip(order, serve_packed([sims[i] for i in order], [pending[i] for i in order])):
                advance(i, answer)
            if progress is not None:
                progress(len(pending))
    return results


def serve_packed(sims: list[Simulation], requests: list) -> list:
    """Answer one request of each run: training requests with ``train_packed``, LossRequests with
    ``losses_packed``, EvalRequests with ``evaluate_packed`` (each kind for all runs asking it at once)."""
    answers: list = [None] * len(sims)
    for kind, serve in ((LossRequest, losses_packed), (TrainRequest, train_packed), (EvalRequest, evaluate_packed)):
        chosen = [i for i, request in enumerate(requests) if isinstance(request, kind)]
        if chosen:
            for i, answer in zip(chosen, serve([sims[i] for i in chosen], [requests[i] for i in chosen])):
                answers[i] = answer
    return answers


def by_group(keys: list, serve) -> list:
    """``serve(members)`` (one answer per member) for the members of each group of equal keys,
    the answers in the keys' order."""
    groups: dict = {}
    for j, key in enumerate(keys):
        groups.setdefault(key, []).append(j)
    answers: list = [None] * len(keys)
    for members in groups.values():
        for j, answer in zip(members, serve(members)):
            answers[j] = answer
    return answers


def linear_batched(sims: list[Simulation]) -> bool:
    return sims[0].cfg.batched and sims[0].trainer.analytic is not None


def losses_packed(sims: list[Simulation], requests: list[LossRequest]) -> list[dict[str, torch.Tensor]]:
    """``participant_losses`` of each run. Batched linear + log_softmax models evaluate the runs
    that share the participants (and partition) in one matrix product (``linear_participant_losses``)."""
    if not linear_batched(sims):
        return [sim.participant_losses(r.w, r.users) for sim, r in zip(sims, requests)]
    keys = [(tuple(r.users), sim.partition_key) for sim, r in zip(sims, requests)]
    return by_group(keys, lambda members: linear_participant_losses([sims[j] for j in members], [requests[j].w for j in members], requests[members[0]].users))


def linear_participant_losses(sims: list[Simulation], ws: list[torch.Tensor], users: list[int]) -> list[dict[str, torch.Tensor]]:
    """``participant_losses`` of several runs' linear + log_softmax models ``ws`` (one per run, the
    same partition and participants), evaluated once per distinct sample for all runs."""
    lead = sims[0]
    pairs = lead.distinct_train(users)
    per_sample, correct = (pairs.expand(values) for values in evaluate_linear(lead.model, torch.stack(ws), pairs.x, pairs.y))  # (samples, runs)
    sizes = [len(lead.data.train_idx[user]) for user in users]
    stats = participant_stats(per_sample, correct, sizes, lead.local.batch_size)  # (users, runs) each
    return [{key: value[:, r] for key, value in stats.items()} for r in range(len(sims))]


def evaluate_packed(sims: list[Simulation], requests: list[EvalRequest]) -> list[tuple[np.ndarray, np.ndarray, dict[str, float]]]:
    """``evaluate`` of each run. Batched linear + log_softmax models evaluate the runs that share
    the partition in one matrix product (``linear_evaluate``)."""
    if not linear_batched(sims):
        return [sim.evaluate(r.w, r.with_global) for sim, r in zip(sims, requests)]
    return by_group([sim.partition_key for sim in sims], lambda members: linear_evaluate([sims[j] for j in members], [requests[j] for j in members]))


def linear_evaluate(sims: list[Simulation], requests: list[EvalRequest]) -> list[tuple[np.ndarray, np.ndarray, dict[str, float]]]:
    """``evaluate`` of several runs' linear + log_softmax models (the same partition), evaluated
    once per distinct test sample (the users' and the global test sets') for all runs."""
    lead = sims[0]
    pairs = lead.distinct_test()
    per_sample, correct = (pairs.expand(values) for values in evaluate_linear(lead.model, torch.stack([r.w for r in requests]), pairs.x, pairs.y))  # (samples, runs)
    n = len(lead.test_y)
    acc = per_owner_mean(correct[:n], lead.test_owner, lead.num_users).T.cpu().numpy()  # (runs, users)
    loss = per_owner_mean(per_sample[:n], lead.test_owner, lead.num_users).T.cpu().numpy()
    global_acc, start = {}, n
    for name, (_, gy) in lead.data.global_test.items():
        global_acc[f"test_acc_{name}"] = correct[start : start + len(gy)].mean(dim=0).tolist()
        start += len(gy)
    return [(acc[r], loss[r], {key: values[r] for key, values in global_acc.items()} if request.with_global else {}) for r, request in enumerate(requests)]


def train_packed(sims: list[Simulation], requests: list[TrainRequest]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One round's client updates of one or more runs (requests[j] of sims[j]); returns, per run,
    the updates (rows, in ``users`` order) and reported mean local losses.

    Client k of run j draws its minibatch order from (seed_j, t, user). With ``batched``, clients
    of similar size, of every run, are trained together (one vmap-ed step per local step; their
    dropout masks are drawn per client from the group's seed); a client without a partner of
    similar size takes the sequential path, which is cheaper, unless CUDA graphs make the
    batched path (a group of one) cheaper still. Linear + log_softmax models (Adult) train all
    clients in one group, with the analytic step. The clients of a run whose algorithm has a
    ``local_term`` (``Simulation.batched`` false) take the sequential path, the reference."""
    lead = sims[0]
    clients = [(j, k) for j, request in enumerate(requests) for k in range(len(request.users))]
    sequential = [c for c, (j, _) in enumerate(clients) if not sims[j].batched]
    together = [c for c, (j, _) in enumerate(clients) if sims[j].batched]
    if lead.trainer.analytic is not None:  # no padding to waste: done clients leave the steps
        groups = [together] if together else []
    else:
        groups = [[together[i] for i in group] for group in size_groups([len(sims[j].train_idx_cpu[requests[j].users[k]]) for j, k in (clients[c] for c in together)])]
    groups = [[c] for c in sequential] + groups
    results: list[list[ClientResult | None]] = [[None] * len(request.users) for request in requests]
    for group in groups:
        members = [clients[c] for c in group]
        if len(members) == 1 and (not sims[members[0][0]].batched or (lead.trainer.graphs is None and lead.trainer.analytic is None)):
            j, k = members[0]
            results[j][k] = train_one(sims[j], requests[j], k)
        else:
            for (j, k), result in zip(members, train_together([sims[j] for j, _ in members], [requests[j] for j, _ in members], [k for _, k in members])):
                results[j][k] = result
    return [(torch.stack([r.update for r in rows]), torch.stack([r.train_loss for r in rows])) for rows in results]


def client_key(sim: Simulation, request: TrainRequest, k: int) -> tuple[int, int, int]:
    """What client k of a training request draws its randomness from: (run seed, round, user)."""
    return sim.cfg.seed, request.t, request.users[k]


def train_one(sim: Simulation, request: TrainRequest, k: int) -> ClientResult:
    """Client k of ``request`` trained alone, on the sequential (reference) path."""
    user = request.users[k]
    seed = derived_seed(*client_key(sim, request, k))
    torch.manual_seed(seed)  # dropout masks
    idx = sim.data.train_idx[user]
    term = request.local_terms[k] if request.local_terms is not None else None
    return sim.trainer.train(request.w, sim.data.x[idx], sim.data.y[idx], torch.Generator().manual_seed(seed), loss_scale(sim.cfg.attack, user), term=term)


def train_together(sims: list[Simulation], requests: list[TrainRequest], ks: list[int]) -> list[ClientResult]:
    """Clients ks[i] of requests[i] (of sims[i]) trained as one batched computation."""
    keys = [client_key(sim, request, k) for sim, request, k in zip(sims, requests, ks)]
    torch.manual_seed(derived_seed(*(key for client in keys for key in client)))  # dropout, per client by vmap
    # clients of one seed, user and partition draw one minibatch plan: the same samples and generator
    plans: dict[tuple, tuple[torch.Tensor, torch.Generator]] = {}
    for sim, key in zip(sims, keys):
        if (*key, sim.partition_key) not in plans:
            plans[(*key, sim.partition_key)] = (sim.train_idx_cpu[key[2]], torch.Generator().manual_seed(derived_seed(*key)))
    shared = [plans[(*key, sim.partition_key)] for sim, key in zip(sims, keys)]
    lead = sims[0]
    return lead.trainer.train_batched(
        torch.stack([request.w for request in requests]),
        lead.data.x,
        lead.data.y,
        [idx for idx, _ in shared],
        [generator for _, generator in shared],
        torch.tensor([loss_scale(sim.cfg.attack, key[2]) for sim, key in zip(sims, keys)]),
    )


def protocol_stats(per_user: pd.DataFrame, metrics: pd.DataFrame, per_user_every: int) -> dict[str, float] | None:
    """Statistics of the last stored per-user vector at a round t (0-based) with
    t % per_user_every == 0: the vector the paper's tables were computed from (docs/protocol.md §6.3:
    round T-9 for T a multiple of 10, not the final model)."""
    stored = per_user[(per_user["round"] - 1) % per_user_every == 0]
    if stored.empty:
        return None
    last = int(stored["round"].max())
    vector = stored[stored["round"] == last]
    stats: dict[str, float] = {"round": last, **accuracy_stats(vector["accuracy"].to_numpy(), vector["n_test"].to_numpy())}
    row = metrics[metrics["round"] == last]
    for column in metrics.columns:
        if column.startswith("test_acc_") and not row.empty:
            stats[column] = float(row[column].iloc[0])
    return stats


def write_result(result: RunResult, out: Path) -> None:
    """metrics.csv, per_user.csv, then summary.json (written last: its presence marks completion)."""
    out.mkdir(parents=True, exist_ok=True)
    result.metrics.to_csv(out / "metrics.csv", index=False)
    result.per_user.to_csv(out / "per_user.csv", index=False)
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(result.summary, indent=2, default=float))
    os.replace(tmp, out / "summary.json")


def run(cfg: RunConfig, out_dir: str | Path | None = None, data: FederatedDataset | None = None, model_name: str | None = None) -> RunResult:
    """Train one run of ``cfg`` and (with ``out_dir``) write its outputs there."""
    return Simulation(cfg, data=data, model_name=model_name).run(out_dir)
