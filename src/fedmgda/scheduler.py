"""The scheduler: drives one or several runs (``fedmgda.simulator.Simulation.steps``) and answers
their requests, choosing for each the path that serves it.

``run`` trains one run; ``run_packed`` trains several in lockstep ("run packing"), so that a
round's clients of all of them are one batched computation, which keeps a large GPU busy. Each
run keeps its own protocol (sampling, aggregation, evaluation, checkpoints, outputs: the
simulator); the scheduler only answers, per kind of request, for all runs asking it at once:

- ``TrainRequest``: the sequential reference path (``LocalTrainer.train``) for runs with
  ``batched: false``; else clients of similar size trained together (``LocalTrainer.train_batched``,
  replayed as CUDA graphs on a GPU: ``fastpaths.CudaGraphs``), or, for linear + log_softmax
  models, all clients with the analytic step (``fastpaths.LinearSoftmaxSteps``). An algorithm
  with a ``local_term`` trains each run's clients by size on ``train_batched``, the term vmap-ed
  with the step and the clients' states stacked; a term that cannot be vmap-ed sends its clients
  to the reference path (said once in the log);
- ``LossRequest``, ``EvalRequest``: each run's own evaluation, or, for batched linear + log_softmax
  models, the runs sharing a partition at once, once per distinct sample (``fastpaths.evaluate_linear``
  on ``fastpaths.DistinctSamples``, kept here per partition).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from fedmgda.attacks import loss_scale
from fedmgda.client import ClientResult, size_groups, stack_states
from fedmgda.config import RunConfig
from fedmgda.data.base import FederatedDataset
from fedmgda.errors import ConfigError, PluginError
from fedmgda.fastpaths import (
    CudaGraphs,
    DistinctSamples,
    LinearSoftmaxSteps,
    evaluate_linear,
    single_thread_on_cpu,
)
from fedmgda.metrics import participant_stats, per_owner_mean
from fedmgda.simulator import (
    EvalRequest,
    LossRequest,
    RunResult,
    Simulation,
    TrainRequest,
    derived_seed,
)

_REFERENCE_TERMS: dict[str, str] = {}  # algorithm -> why its local_term failed to vmap (from then on: the reference path)
_SAID: set[tuple[str, str]] = set()  # (algorithm, reason) of the fall-backs logged


def run(cfg: RunConfig, out_dir: str | Path | None = None, data: FederatedDataset | None = None, model_name: str | None = None) -> RunResult:
    """Train one run of ``cfg`` and (with ``out_dir``) write its outputs there, resuming from its checkpoint."""
    return run_packed([Simulation(cfg, data=data, model_name=model_name)], [out_dir])[0]


def run_packed(sims: list[Simulation], out_dirs: list[str | Path | None], progress_every: float | None = None) -> list[RunResult]:
    """Train several runs in lockstep: every round, the participants of all of them are trained
    together (``Scheduler.train``); a finished, diverged or failed run leaves the pack (a run
    fails when its algorithm's hook breaks its contract, ``fedmgda.contract``: raised inside the
    run, or, from a client's local term, here, where it is thrown into the run). Models without
    dropout get the updates of unpacked runs (up to float rounding); with dropout, the masks
    differ. ``progress_every`` (seconds): print progress lines (``Progress``); None: none."""
    if len(sims) != len(out_dirs):
        raise ValueError("run_packed needs one output folder (or None) per run")
    scheduler = Scheduler(sims)
    runs = [sim.steps(out) for sim, out in zip(sims, out_dirs)]
    results: list[RunResult | None] = [None] * len(sims)
    pending: dict[int, TrainRequest | LossRequest | EvalRequest] = {}

    def advance(i: int, answer, error: PluginError | None = None) -> None:
        try:
            pending[i] = runs[i].throw(error) if error is not None else runs[i].send(answer)
        except StopIteration as done:
            results[i] = done.value
            pending.pop(i, None)

    # a linear model's operations (training and evaluation) are too small to split across threads
    with single_thread_on_cpu(sims[0].device, scheduler.linear):
        for i in range(len(runs)):
            advance(i, None)
        progress = Progress(sims, progress_every) if progress_every is not None else None
        while pending:
            order = list(pending)
            try:
                answers = scheduler.serve([sims[i] for i in order], [pending[i] for i in order])
            except PluginError as error:  # one run's hook: that run records its failure, the others are served again
                failed = [i for i in order if sims[i] is error.owner]
                if not failed:
                    raise
                advance(failed[0], None, error)
                continue
            for i, answer in zip(order, answers):
                advance(i, answer)
            if progress is not None:
                progress([sims[i] for i in pending])
    return results


class Scheduler:
    """Answers the requests of a pack of runs (``check_packable``: one device, model, local
    training and set of samples), choosing the path of each; holds the fast paths' state (the
    analytic stepper, CUDA graphs, the distinct samples of each partition)."""

    def __init__(self, sims: list[Simulation]):
        check_packable(sims)
        lead = sims[0]
        self.linear = LinearSoftmaxSteps.eligible(lead.model)  # linear + log_softmax
        self.distinct_evaluation = self.linear and lead.cfg.batched
        self.analytic = LinearSoftmaxSteps(lead.model, lead.local) if self.distinct_evaluation else None
        self.graphs = CudaGraphs() if lead.cfg.batched and lead.cfg.cuda_graphs and lead.device.type == "cuda" else None
        self._distinct_train: dict[str, tuple[list[int], DistinctSamples]] = {}  # partition -> the latest participants'
        self._distinct_test: dict[str, DistinctSamples] = {}
        self._distinct_pool: DistinctSamples | None = None  # the pairs of all the pack's samples
        for sim in sims:
            if sim.cfg.batched and sim.aggregator.has_local_term() and not type(sim.aggregator).vmap_local_term:
                say_reference(sim.cfg.algorithm, "it declares vmap_local_term = False")

    def serve(self, sims: list[Simulation], requests: list) -> list:
        """Answer one request of each run (``sims[j]`` asks ``requests[j]``), each kind for all
        the runs asking it at once."""
        answers: list = [None] * len(sims)
        for kind, serve in ((LossRequest, self.losses), (TrainRequest, self.train), (EvalRequest, self.evaluate)):
            chosen = [i for i, request in enumerate(requests) if type(request) is kind]
            if chosen:
                for i, answer in zip(chosen, serve([sims[i] for i in chosen], [requests[i] for i in chosen])):
                    answers[i] = answer
        return answers

    # ------------------------------------------------------------------ evaluation
    def losses(self, sims: list[Simulation], requests: list[LossRequest]) -> list[dict[str, torch.Tensor]]:
        """``participant_losses`` of each run; with distinct-sample evaluation, the runs that share
        the participants (and partition) at once (``linear_participant_losses``)."""
        if not self.distinct_evaluation:
            return [sim.participant_losses(r.w, r.users) for sim, r in zip(sims, requests)]
        keys = [(tuple(sorted(r.users)), sim.partition_key) for sim, r in zip(sims, requests)]

        def group(members: list[int]) -> list[dict[str, torch.Tensor]]:
            # one product for the runs with the same participants in any order; rows back in each run's order
            users = sorted(requests[members[0]].users)
            stats = self.linear_participant_losses([sims[j] for j in members], [requests[j].w for j in members], users)
            rows = [[users.index(u) for u in requests[j].users] for j in members]
            return [{key: value[row] for key, value in s.items()} for s, row in zip(stats, rows)]

        return by_group(keys, group)

    def linear_participant_losses(self, sims: list[Simulation], ws: list[torch.Tensor], users: list[int]) -> list[dict[str, torch.Tensor]]:
        """``participant_losses`` of several runs' linear + log_softmax models ``ws`` (one per run, the
        same partition and participants), evaluated once per distinct sample for all runs."""
        lead = sims[0]
        pairs = self.distinct_train(lead, users)
        per_sample, correct = (pairs.expand(values) for values in evaluate_linear(lead.model, torch.stack(ws), pairs.x, pairs.y))  # (samples, runs)
        sizes = [len(lead.data.train_idx[user]) for user in users]
        stats = participant_stats(per_sample, correct, sizes, lead.local.batch_size)  # (users, runs) each
        return [{key: value[:, r] for key, value in stats.items()} for r in range(len(sims))]

    def evaluate(self, sims: list[Simulation], requests: list[EvalRequest]) -> list[tuple[np.ndarray, np.ndarray, dict[str, float]]]:
        """``evaluate`` of each run; with distinct-sample evaluation, the runs that share the
        partition at once (``linear_evaluate``)."""
        if not self.distinct_evaluation:
            return [sim.evaluate(r.w, r.with_global) for sim, r in zip(sims, requests)]
        return by_group([sim.partition_key for sim in sims], lambda members: self.linear_evaluate([sims[j] for j in members], [requests[j] for j in members]))

    def linear_evaluate(self, sims: list[Simulation], requests: list[EvalRequest]) -> list[tuple[np.ndarray, np.ndarray, dict[str, float]]]:
        """``evaluate`` of several runs' linear + log_softmax models (the same partition), evaluated
        once per distinct test sample (the users' and the global test sets') for all runs."""
        lead = sims[0]
        pairs = self.distinct_test(lead)
        per_sample, correct = (pairs.expand(values) for values in evaluate_linear(lead.model, torch.stack([r.w for r in requests]), pairs.x, pairs.y))  # (samples, runs)
        n = len(lead.test_y)
        acc = per_owner_mean(correct[:n], lead.test_owner, lead.num_users).T.cpu().numpy()  # (runs, users)
        loss = per_owner_mean(per_sample[:n], lead.test_owner, lead.num_users).T.cpu().numpy()
        global_acc, start = {}, n
        for name, (_, gy) in lead.data.global_test.items():
            global_acc[f"test_acc_{name}"] = correct[start : start + len(gy)].mean(dim=0).tolist()
            start += len(gy)
        return [(acc[r], loss[r], {key: values[r] for key, values in global_acc.items()} if request.with_global else {}) for r, request in enumerate(requests)]

    def distinct_train(self, sim: Simulation, users: list[int]) -> DistinctSamples:
        """The participants' pooled train samples as ``DistinctSamples``: a subset of the pack's
        samples' pairs (found once), the latest participants' kept per partition."""
        kept = self._distinct_train.get(sim.partition_key)
        if kept is None or kept[0] != users:
            if self._distinct_pool is None:
                self._distinct_pool = DistinctSamples(sim.data.x, sim.data.y)  # the pack shares one copy of the samples
            pooled = torch.cat([sim.data.train_idx[user] for user in users])
            kept = self._distinct_train[sim.partition_key] = (list(users), self._distinct_pool.subset(pooled))
        return kept[1]

    def distinct_test(self, sim: Simulation) -> DistinctSamples:
        """The users' test samples (``test_x``), then each global test set, as ``DistinctSamples``."""
        if sim.partition_key not in self._distinct_test:
            global_sets = list(sim.data.global_test.values())
            x = torch.cat([sim.test_x.flatten(1), *(gx.flatten(1) for gx, _ in global_sets)])
            self._distinct_test[sim.partition_key] = DistinctSamples(x, torch.cat([sim.test_y, *(gy for _, gy in global_sets)]))
        return self._distinct_test[sim.partition_key]

    # ------------------------------------------------------------------ training
    def train(self, sims: list[Simulation], requests: list[TrainRequest]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One round's client updates of one or more runs (requests[j] of sims[j]); returns, per run,
        the updates (rows, in ``users`` order) and reported mean local losses.

        Client k of run j draws its minibatch order from (seed_j, t, user). Batched training groups
        clients of similar size, of every run (one vmap-ed step per local step; their dropout masks
        are drawn per client from the group's seed); a client without a partner of similar size
        takes the sequential path, which is cheaper, unless CUDA graphs make the batched path (a
        group of one) cheaper still. Linear + log_softmax models train all clients in one group,
        with the analytic step. A run with a local term trains its own clients by size, the term
        vmap-ed with the step (``train_with_term``). Clients of runs without batched training take
        the sequential path."""
        clients = [(j, k) for j, request in enumerate(requests) for k in range(len(request.users))]
        results: list[list[ClientResult | None]] = [[None] * len(request.users) for request in requests]
        for group in self.client_groups(sims, requests, clients):
            members = [clients[c] for c in group]
            for (j, k), result in zip(members, self.train_group(sims, requests, members)):
                results[j][k] = result
        return [(torch.stack([r.update for r in rows]), torch.stack([r.train_loss for r in rows])) for rows in results]

    def client_groups(self, sims: list[Simulation], requests: list[TrainRequest], clients: list[tuple[int, int]]) -> list[list[int]]:
        """The round's clients (positions into ``clients``, pairs (run, client)) in the groups they
        train in: one by one on the reference path; the batched clients of the runs without a
        local term together (all in one group for the analytic step, else by size); each run with
        a local term its own clients, by size."""
        sequential = [c for c, (j, _) in enumerate(clients) if not batched_training(sims[j])]
        together = [c for c, (j, _) in enumerate(clients) if batched_training(sims[j]) and not sims[j].aggregator.has_local_term()]
        with_term: dict[int, list[int]] = {}
        for c, (j, _) in enumerate(clients):
            if batched_training(sims[j]) and sims[j].aggregator.has_local_term():
                with_term.setdefault(j, []).append(c)

        def by_size(members: list[int]) -> list[list[int]]:
            sizes = [len(sims[j].train_idx_cpu[requests[j].users[k]]) for j, k in (clients[c] for c in members)]
            return [[members[i] for i in group] for group in size_groups(sizes)]

        if self.analytic is not None:  # no padding to waste: done clients leave the steps
            groups = [together] if together else []
        else:
            groups = by_size(together)
        return [[c] for c in sequential] + groups + [group for members in with_term.values() for group in by_size(members)]

    def train_group(self, sims: list[Simulation], requests: list[TrainRequest], members: list[tuple[int, int]]) -> list[ClientResult]:
        """The clients ``members`` (pairs (run, client)) of one group of ``client_groups``."""
        j, k = members[0]
        if sims[j].cfg.batched and sims[j].aggregator.has_local_term():  # before the check below: a group
            return self.train_with_term(sims[j], requests[j], [k for _, k in members])  # may outlive its fall-back
        if not batched_training(sims[j]):
            return [train_one(sims[j], requests[j], k)]
        if len(members) == 1 and self.graphs is None and self.analytic is None:
            return [train_one(sims[j], requests[j], k)]
        return self.train_together([sims[j] for j, _ in members], [requests[j] for j, _ in members], [k for _, k in members])

    def train_with_term(self, sim: Simulation, request: TrainRequest, ks: list[int]) -> list[ClientResult]:
        """Clients ks of one run with a local term: batched (never the analytic step, which knows
        no term, nor CUDA graphs), the term vmap-ed with the step and the clients' states stacked
        along dim 0. A client alone takes the reference path, as does a group whose term or
        states cannot be vmap-ed: then the run's algorithm stays there (``refuse_vmap``)."""
        if len(ks) > 1 and batched_training(sim):  # not after a fall-back earlier in the round
            try:
                states = stack_states([request.states[k] for k in ks])
                return self.train_together([sim] * len(ks), [request] * len(ks), ks, term=request.local_term, states=states)
            except (ValueError, TypeError, RuntimeError, NotImplementedError, PluginError) as error:
                # nothing was changed yet: the reference path trains the same clients from scratch
                # (a term that breaks its contract there too fails its run, fedmgda.contract)
                cause = error.__cause__ if isinstance(error, PluginError) and error.__cause__ else error
                refuse_vmap(sim.cfg.algorithm, f"{type(cause).__name__}: {str(cause).strip().splitlines()[0]}")
        return [train_one(sim, request, k) for k in ks]

    def train_together(self, sims: list[Simulation], requests: list[TrainRequest], ks: list[int], term=None, states=None) -> list[ClientResult]:
        """Clients ks[i] of requests[i] (of sims[i]) trained as one batched computation; with a
        local ``term`` (one run's clients), vmap-ed with the step, given their stacked ``states``."""
        keys = [client_key(sim, request, k) for sim, request, k in zip(sims, requests, ks)]
        torch.manual_seed(derived_seed(*(key for client in keys for key in client)))  # dropout, per client by vmap
        # clients of one seed, user and partition draw one minibatch plan: the same samples and
        # generator; full batches are not shuffled, so there one user and partition is one plan
        lead = sims[0]
        drawn = lead.trainer.hparams.batch_size is not None
        plan_keys = [(*(key if drawn else key[2:]), sim.partition_key) for sim, key in zip(sims, keys)]
        plans: dict[tuple, tuple[torch.Tensor, torch.Generator]] = {}
        for sim, key, plan in zip(sims, keys, plan_keys):
            if plan not in plans:
                plans[plan] = (sim.train_idx_cpu[key[2]], torch.Generator().manual_seed(derived_seed(*key)))
        shared = [plans[plan] for plan in plan_keys]
        inputs = (torch.stack([request.w for request in requests]), lead.data.x, lead.data.y,
                  [idx for idx, _ in shared], [generator for _, generator in shared],
                  torch.tensor([loss_scale(sim.cfg.attack, key[2]) for sim, key in zip(sims, keys)]))
        if term is not None:
            return lead.trainer.train_batched(*inputs, term=term, states=states)
        if self.analytic is not None:
            return self.analytic.train(lead.trainer, *inputs)
        return lead.trainer.train_batched(*inputs, graphs=self.graphs)


def batched_training(sim: Simulation) -> bool:
    """Whether a run's clients may train on a batched path: ``batched``, and no local term or
    one that is vmap-ed (``reference_reason``)."""
    return sim.cfg.batched and reference_reason(sim) is None


def reference_reason(sim: Simulation) -> str | None:
    """Why a run's local term keeps its clients on the reference path, or None: the algorithm
    declares ``vmap_local_term = False``, or its term or states failed to vmap (``refuse_vmap``)."""
    if not sim.aggregator.has_local_term():
        return None
    if not type(sim.aggregator).vmap_local_term:
        return "it declares vmap_local_term = False"
    return _REFERENCE_TERMS.get(sim.cfg.algorithm)


def refuse_vmap(algorithm: str, reason: str) -> None:
    """From now on (in this process) ``algorithm``'s clients train on the reference path; said once."""
    if algorithm not in _REFERENCE_TERMS:
        _REFERENCE_TERMS[algorithm] = reason
        say_reference(algorithm, reason)


def say_reference(algorithm: str, reason: str) -> None:
    """The log line of an algorithm whose local term is not vmap-ed, once per algorithm and reason."""
    if (algorithm, reason) not in _SAID:
        _SAID.add((algorithm, reason))
        print(f"[engine] {algorithm}: its local_term is not vmap-ed ({reason}); its clients train on the reference path, "
              f"one after another", flush=True)


def training_path(sim: Simulation) -> str:
    """The path a run's clients train on, in words (benchmarks)."""
    if not sim.cfg.batched:
        return "reference (batched: false)"
    reason = reference_reason(sim)
    if reason is not None:
        return f"reference ({reason})"
    if sim.aggregator.has_local_term():
        return "batched, local_term vmap-ed"
    return "analytic" if LinearSoftmaxSteps.eligible(sim.model) else "batched"


def client_key(sim: Simulation, request: TrainRequest, k: int) -> tuple[int, int, int]:
    """What client k of a training request draws its randomness from: (run seed, round, user)."""
    return sim.cfg.seed, request.t, request.users[k]


def train_one(sim: Simulation, request: TrainRequest, k: int) -> ClientResult:
    """Client k of ``request`` trained alone, on the sequential (reference) path."""
    user = request.users[k]
    seed = derived_seed(*client_key(sim, request, k))
    torch.manual_seed(seed)  # dropout masks
    idx = sim.data.train_idx[user]
    state = request.states[k] if request.states is not None else None
    return sim.trainer.train(request.w, sim.data.x[idx], sim.data.y[idx], torch.Generator().manual_seed(seed), loss_scale(sim.cfg.attack, user), term=request.local_term, state=state)


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

    def __call__(self, training: list[Simulation]) -> None:
        now = time.perf_counter()
        total = max(sim.cfg.rounds for sim in self.sims)
        active = len(training)  # a diverged or failed run has left, its round no longer counts
        round_ = min((sim.rounds_done for sim in training), default=total)
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
