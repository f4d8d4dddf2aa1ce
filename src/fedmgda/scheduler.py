"""The scheduler: drives one or several runs (``fedmgda.simulator.Simulation.steps``) and answers
their requests, choosing for each the path that serves it.

``run`` trains one run; ``run_packed`` trains several in lockstep ("run packing"), so that a
round's clients of all of them are one batched computation, which keeps a large GPU busy;
``run_round`` plays one round of a run from a given model (checks). Each
run keeps its own protocol (sampling, aggregation, evaluation, checkpoints, outputs: the
simulator); the scheduler only answers, per kind of request, for all runs asking it at once.

A request carries what answering it takes (``fedmgda.simulator``): its run's ``RunInputs`` (model
and local training, samples on the device, a digest of the partition, the algorithm's local term)
and, for training, each participant's seed key, loss scale and state. The scheduler reads nothing
else of a run: it groups several runs' requests by what they carry (partition, participants,
sizes) and turns seed keys into generators (``derived_seed``, ``dropout_generator``). Per kind:

- ``TrainRequest``: the sequential reference path (``LocalTrainer.train``) for runs with
  ``batched: false``; else one batched path (``client.ClientSteps``, chosen once: ``batched_path``)
  trains the clients together from one minibatch plan (``minibatches.ClientsPlan``): the
  ``vmap`` path (``client.VmapSteps``, replayed as CUDA graphs on a GPU: ``fastpaths.CudaGraphs``)
  clients of similar size; for linear + log_softmax models the ``linear-softmax`` path
  (``fastpaths.LinearSoftmaxSteps``) all clients; for the small CNNs on the CPU the ``conv-net``
  path (``fastpaths.ConvNetSteps``) clients of similar size (a client alone too, so that it gets
  the numbers it gets in a group). An algorithm with a ``local_term`` trains each run's clients by
  size on the ``vmap`` path, the term vmap-ed with the step and the clients' states stacked; a term
  that cannot be vmap-ed sends its clients to the reference path for the rest of the pack
  (``Scheduler.refuse_vmap``; said once per pack in the log);
- ``LossRequest``, ``EvalRequest``: each run's own evaluation, or, for batched linear + log_softmax
  models, the runs sharing a partition at once, once per distinct sample
  (``fastpaths.LinearSoftmaxEvaluation``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from fedmgda.client import (
    MAX_PADDING,
    ClientResult,
    ClientSteps,
    VmapSteps,
    size_groups,
    stack_states,
)
from fedmgda.config import RunConfig
from fedmgda.data.base import FederatedDataset
from fedmgda.errors import ConfigError, PluginError, TrainingStopped
from fedmgda.fastpaths.convnet import ConvNetSteps
from fedmgda.fastpaths.cuda_graphs import CudaGraphs
from fedmgda.fastpaths.linear import LinearSoftmaxSteps
from fedmgda.fastpaths.linear_evaluation import LinearSoftmaxEvaluation
from fedmgda.fastpaths.threads import single_thread_on_cpu
from fedmgda.models import convolution
from fedmgda.results import RunResult
from fedmgda.simulator import (
    EvalRequest,
    LossRequest,
    RoundRecord,
    RunInputs,
    Simulation,
    TrainRequest,
)


def run(cfg: RunConfig, out_dir: str | Path | None = None, data: FederatedDataset | None = None,
        model_name: str | None = None) -> RunResult:
    """Train one run of ``cfg`` and (with ``out_dir``) write its outputs there, resuming from its
    checkpoint."""
    return run_packed([Simulation(cfg, data=data, model_name=model_name)], [out_dir])[0]


def run_packed(sims: list[Simulation], out_dirs: list[str | Path | None],
               progress_every: float | None = None,
               fresh_if_unreadable: bool = False,
               should_stop: Callable[[], bool] | None = None) -> list[RunResult]:
    """Train several runs in lockstep: every round, the participants of all of them are trained
    together (``Scheduler.train``); a finished, diverged or failed run leaves the pack (a run
    fails when its algorithm's hook breaks its contract, ``fedmgda.contract``: raised inside the
    run, or, from a client's local term, here, where it is thrown into the run). The runs share
    one copy of the samples (``Simulation.share_samples``). A run gets the updates it gets
    unpacked: every client's minibatch order and dropout masks come from its own seed key.
    ``progress_every`` (seconds): print progress lines (``Progress``); None: none.
    ``fresh_if_unreadable``: a checkpoint a run cannot resume from is set aside and the run starts
    from round 0 (``Simulation.steps``); else it stops the pack
    (``checkpoints.UnusableCheckpoint``).
    ``should_stop`` (asked at each run's round end, ``Simulation.steps``): once True, every run
    still training checkpoints at the end of its round and leaves; then ``TrainingStopped``
    names them all (the runs that finished before have written their outputs)."""
    if len(sims) != len(out_dirs):
        raise ValueError("run_packed needs one output folder (or None) per run")
    scheduler = Scheduler([sim.inputs for sim in sims])
    for sim in sims[1:]:
        sim.share_samples(sims[0])
    runs = [sim.steps(out, fresh_if_unreadable, should_stop) for sim, out in zip(sims, out_dirs)]
    results: list[RunResult | None] = [None] * len(sims)
    pending: dict[int, TrainRequest | LossRequest | EvalRequest] = {}
    stopped: list[tuple[str, int]] = []

    def advance(i: int, answer, error: PluginError | None = None) -> None:
        try:
            pending[i] = runs[i].throw(error) if error is not None else runs[i].send(answer)
        except StopIteration as done:
            results[i] = done.value
            pending.pop(i, None)
        except TrainingStopped as stop:
            stopped.extend(stop.runs)
            pending.pop(i, None)

    # a linear model's operations (training and evaluation) are too small to split across threads
    with single_thread_on_cpu(scheduler.device, scheduler.linear):
        for i in range(len(runs)):
            advance(i, None)
        progress = Progress(sims, progress_every) if progress_every is not None else None
        while pending:
            order = list(pending)
            try:
                answers = scheduler.serve([pending[i] for i in order])
            # one run's hook: that run records its failure, the others are served again
            except PluginError as error:
                failed = [i for i in order if sims[i] is error.owner]
                if not failed:
                    raise
                advance(failed[0], None, error)
                continue
            for i, answer in zip(order, answers):
                advance(i, answer)
            if progress is not None and not stopped:  # a stopped pack reports no last round
                progress([sims[i] for i in pending])
    if stopped:
        raise TrainingStopped(stopped)
    return results


def run_round(sim: Simulation, w: torch.Tensor, t: int,
              scheduler: Scheduler | None = None) -> RoundRecord:
    """Round t of ``sim`` from the global model ``w``, on its own (``Simulation.round``: its
    participants, their updates, the new global model), answered by ``scheduler`` (a pack of
    ``sim`` alone, kept across rounds by the caller; default: a new one). Nothing is written; the
    run's algorithm and client states advance. For checks that start each round from a model of
    their own (scripts/lockstep_authors_fmnist.py: the authors' model of the round before)."""
    scheduler = scheduler if scheduler is not None else Scheduler([sim.inputs])
    playing, answer = sim.round(w, t), None
    with single_thread_on_cpu(scheduler.device, scheduler.linear):
        while True:
            try:
                request = playing.send(answer)
            except StopIteration as done:
                return done.value
            answer = scheduler.serve([request])[0]


class Scheduler:
    """One pack's request server: answers its runs' requests, choosing for each the path that
    computes it.

    A pack (``check_packable``: one device, model, local training and set of samples) has one, for
    its lifetime (``run_packed``). It holds the paths' state (the batched path, CUDA graphs, the
    distinct samples of each partition) and what the pack learnt of its runs' local terms
    (``refuse_vmap``). It knows the runs only by what their requests carry
    (``fedmgda.simulator.RunInputs``)."""

    def __init__(self, runs: list[RunInputs]):
        check_packable(runs)
        # each run's algorithm and fall-back (not the runs: a pack's runs then share one copy of
        # the samples)
        self.fallbacks = [(run.algorithm, run.fallback) for run in runs]
        self.said: set[tuple[str, str]] = set()  # (algorithm, reason) of the fall-backs logged
        lead = runs[0]
        self.device = lead.device
        self.linear = LinearSoftmaxSteps.eligible(lead.trainer.model)  # linear + log_softmax
        graphs = (CudaGraphs() if lead.batched and lead.cuda_graphs and lead.device.type == "cuda"
                  else None)
        # also the path of the clients with a local term
        self.vmap = VmapSteps(lead.trainer, graphs)
        path = batched_path(lead)
        self.steps: ClientSteps = (self.vmap if path is VmapSteps
                                   else path(lead.trainer.model, lead.trainer.hparams))
        self.linear_evaluation = LinearSoftmaxEvaluation() if self.linear and lead.batched else None
        # the padding a size group may carry (``client.size_groups``); a benchmark may set it
        # (bench_rounds --max-padding measures others: on a GPU a step may cost the same at any
        # width)
        self.max_padding = MAX_PADDING
        for run in runs:
            if run.batched and run.local_term is not None and not run.vmap_local_term:
                self.say_reference(run.algorithm, "it declares vmap_local_term = False")

    def refuse_vmap(self, run: RunInputs, reason: str) -> None:
        """From now on, the clients of ``run`` and of the pack's other runs of its algorithm train
        on the reference path (their ``fallback``, read by ``reference_reason``); said once."""
        for algorithm, fallback in [(run.algorithm, run.fallback), *self.fallbacks]:
            if algorithm == run.algorithm and fallback.reason is None:
                fallback.reason = reason
        self.say_reference(run.algorithm, reason)

    def say_reference(self, algorithm: str, reason: str) -> None:
        """The log line of an algorithm whose local term is not vmap-ed, once per pack, algorithm
        and reason."""
        if (algorithm, reason) not in self.said:
            self.said.add((algorithm, reason))
            print(f"[engine] {algorithm}: its local_term is not vmap-ed ({reason}); its clients "
                  f"train on the reference path, one after another", flush=True)

    def serve(self, requests: list) -> list:
        """Answer one request of each run, each kind for all the runs asking it at once."""
        answers: list = [None] * len(requests)
        for kind, serve in ((LossRequest, self.losses), (TrainRequest, self.train),
                            (EvalRequest, self.evaluate)):
            chosen = [i for i, request in enumerate(requests) if type(request) is kind]
            if chosen:
                for i, answer in zip(chosen, serve([requests[i] for i in chosen])):
                    answers[i] = answer
        return answers

    # ------------------------------------------------------------------ evaluation
    def losses(self, requests: list[LossRequest]) -> list[dict[str, torch.Tensor]]:
        """``participant_losses`` of each run; with distinct-sample evaluation, the runs that share
        the participants (and partition) at once (``LinearSoftmaxEvaluation``)."""
        if self.linear_evaluation is None:
            return [r.run.participant_losses(r.w, r.users) for r in requests]
        keys = [(tuple(sorted(r.users)), r.run.partition) for r in requests]

        def group(members: list[int]) -> list[dict[str, torch.Tensor]]:
            # one product for the runs with the same participants in any order; rows back in each
            # run's order
            users = sorted(requests[members[0]].users)
            stats = self.linear_evaluation.participant_losses(
                requests[members[0]].run, [requests[j].w for j in members], users)
            rows = [[users.index(u) for u in requests[j].users] for j in members]
            return [{key: value[row] for key, value in s.items()} for s, row in zip(stats, rows)]

        return by_group(keys, group)

    def evaluate(self, requests: list[EvalRequest]
                 ) -> list[tuple[np.ndarray, np.ndarray, dict[str, float]]]:
        """``evaluate`` of each run; with distinct-sample evaluation, the runs that share the
        partition at once (``LinearSoftmaxEvaluation``)."""
        if self.linear_evaluation is None:
            return [r.run.evaluate(r.w, r.with_global) for r in requests]

        def group(members: list[int]) -> list[tuple[np.ndarray, np.ndarray, dict[str, float]]]:
            chosen = [requests[j] for j in members]
            return self.linear_evaluation.evaluate(chosen[0].run, [r.w for r in chosen],
                                                   [r.with_global for r in chosen])

        return by_group([r.run.partition for r in requests], group)

    # ------------------------------------------------------------------ training
    def train(self, requests: list[TrainRequest]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One round's client updates of one or more runs (a request each); returns, per run, the
        updates (rows, in ``users`` order) and reported mean local losses.

        Client k of a request draws its minibatch order from its seed key. Batched training groups
        clients of similar size, of every run (each client's dropout masks drawn from its own
        generator, ``dropout_generator``); a client without a partner of similar size takes the
        sequential path, which is cheaper, unless the batched path trains one alone too
        (``trains_one_alone``: CUDA graphs, the fast paths). The linear-softmax path trains all
        clients in one group. A run with a local term trains its own clients by size, the term
        vmap-ed with the step (``train_with_term``). Clients of runs without batched training take
        the sequential path."""
        clients = [(j, k) for j, request in enumerate(requests) for k in range(len(request.users))]
        results: list[list[ClientResult | None]] = [[None] * len(request.users)
                                                    for request in requests]
        for group in self.client_groups(requests, clients):
            members = [clients[c] for c in group]
            for (j, k), result in zip(members, self.train_group(requests, members)):
                results[j][k] = result
        return [(torch.stack([r.update for r in rows]), torch.stack([r.train_loss for r in rows]))
                for rows in results]

    def client_groups(self, requests: list[TrainRequest],
                      clients: list[tuple[int, int]]) -> list[list[int]]:
        """The round's clients (positions into ``clients``, pairs (request, client)) in the groups
        they train in: one by one on the reference path; the batched clients of the runs without a
        local term together (by size, or all in one group where the batched path does not pad:
        ``groups_by_size``); each run with a local term its own clients, by size."""
        runs = [request.run for request in requests]
        sequential = [c for c, (j, _) in enumerate(clients) if not batched_training(runs[j])]
        together = [c for c, (j, _) in enumerate(clients)
                    if batched_training(runs[j]) and runs[j].local_term is None]
        with_term: dict[int, list[int]] = {}
        for c, (j, _) in enumerate(clients):
            if batched_training(runs[j]) and runs[j].local_term is not None:
                with_term.setdefault(j, []).append(c)

        def by_size(members: list[int]) -> list[list[int]]:
            sizes = [len(runs[j].train_idx_cpu[requests[j].users[k]])
                     for j, k in (clients[c] for c in members)]
            return [[members[i] for i in group] for group in size_groups(sizes, self.max_padding)]

        if not self.steps.groups_by_size:
            groups = [together] if together else []
        else:
            groups = by_size(together)
        return [[c] for c in sequential] + groups + [group for members in with_term.values()
                                                     for group in by_size(members)]

    def train_group(self, requests: list[TrainRequest],
                    members: list[tuple[int, int]]) -> list[ClientResult]:
        """The clients ``members`` (pairs (request, client)) of one group of ``client_groups``."""
        j, k = members[0]
        run = requests[j].run
        # before the check below: a group may outlive its fall-back
        if run.batched and run.local_term is not None:
            return self.train_with_term(requests[j], [k for _, k in members])
        if not batched_training(run):
            return [train_one(requests[j], k)]
        if len(members) == 1 and not self.steps.trains_one_alone:
            return [train_one(requests[j], k)]
        return self.train_together([requests[j] for j, _ in members], [k for _, k in members])

    def train_with_term(self, request: TrainRequest, ks: list[int]) -> list[ClientResult]:
        """Clients ks of one run with a local term: batched on the vmap path (no fast path knows a
        term; no CUDA graphs), the term vmap-ed with the step and the clients' states stacked
        along dim 0. A client alone takes the reference path, as does a group whose term or
        states cannot be vmap-ed: then the run's algorithm stays there (``refuse_vmap``)."""
        # not after a fall-back earlier in the round
        if len(ks) > 1 and batched_training(request.run):
            try:
                states = stack_states([request.states[k] for k in ks])
                return self.train_together([request] * len(ks), ks, term=request.run.local_term,
                                           states=states)
            except (ValueError, TypeError, RuntimeError, NotImplementedError, PluginError) as error:
                # nothing was changed yet: the reference path trains the same clients from scratch
                # (a term that breaks its contract there too fails its run, fedmgda.contract)
                cause = (error.__cause__ if isinstance(error, PluginError) and error.__cause__
                         else error)
                self.refuse_vmap(request.run, f"{type(cause).__name__}: "
                                              f"{str(cause).strip().splitlines()[0]}")
        return [train_one(request, k) for k in ks]

    def train_together(self, requests: list[TrainRequest], ks: list[int], term=None,
                       states=None) -> list[ClientResult]:
        """Clients ks[i] of requests[i] trained as one batched computation; with a local ``term``
        (one run's clients), vmap-ed with the step, given their stacked ``states``."""
        keys = [request.seed_keys[k] for request, k in zip(requests, ks)]
        lead = requests[0].run
        shared = shared_plans(requests, ks, keys)
        masks = ([dropout_generator(key, self.device) for key in keys]
                 if lead.trainer.minibatches.sites else None)
        plan = lead.trainer.minibatches.plan([idx for idx, _ in shared],
                                             [generator for _, generator in shared], masks)
        inputs = (plan, torch.stack([request.w for request in requests]), lead.data.x, lead.data.y,
                  torch.tensor([request.loss_scales[k] for request, k in zip(requests, ks)]))
        if term is not None:
            return self.vmap.train(*inputs, term=term, states=states)
        return self.steps.train(*inputs)


def shared_plans(requests: list[TrainRequest], ks: list[int],
                 keys: list[tuple[int, int, int]]) -> list[tuple[torch.Tensor, torch.Generator]]:
    """The (train indices, generator) each client ks[i] of requests[i] draws its minibatch plan
    from: clients of one seed, user and partition share one, the same samples and generator; full
    batches are not shuffled, so there one user and partition is one plan."""
    drawn = requests[0].run.trainer.hparams.batch_size is not None
    plan_keys = [(*(key if drawn else key[2:]), request.run.partition)
                 for request, key in zip(requests, keys)]
    plans: dict[tuple, tuple[torch.Tensor, torch.Generator]] = {}
    for request, k, key, plan_key in zip(requests, ks, keys, plan_keys):
        if plan_key not in plans:
            plans[plan_key] = (request.run.train_idx_cpu[request.users[k]],
                               torch.Generator().manual_seed(derived_seed(*key)))
    return [plans[plan_key] for plan_key in plan_keys]


def batched_training(run: RunInputs) -> bool:
    """Whether a run's clients may train on a batched path: ``batched``, and no local term or
    one that is vmap-ed (``reference_reason``)."""
    return run.batched and reference_reason(run) is None


def batched_path(run: RunInputs
                 ) -> type[LinearSoftmaxSteps] | type[ConvNetSteps] | type[VmapSteps]:
    """The one choice of the batched path (``client.ClientSteps``) of a run's clients without a
    local term: ``LinearSoftmaxSteps`` for linear + log_softmax models, ``ConvNetSteps`` for the
    small CNNs on the CPU (on a GPU the vmap-ed step replayed as CUDA graphs is faster), else
    ``VmapSteps``."""
    model = run.trainer.model
    if LinearSoftmaxSteps.eligible(model):
        return LinearSoftmaxSteps
    if run.device.type == "cpu" and ConvNetSteps.eligible(model):
        return ConvNetSteps
    return VmapSteps


def reference_reason(run: RunInputs) -> str | None:
    """Why a run's local term keeps its clients on the reference path, or None: the algorithm
    declares ``vmap_local_term = False``, or its term or states failed to vmap in its pack
    (``Scheduler.refuse_vmap``)."""
    if run.local_term is None:
        return None
    if not run.vmap_local_term:
        return "it declares vmap_local_term = False"
    return run.fallback.reason


def training_path(run: RunInputs) -> str:
    """The path a run's clients train on, in words (benchmarks): ``reference (why)``, a batched
    path's ``name``, or ``vmap, local_term vmap-ed``."""
    if not run.batched:
        return "reference (batched: false)"
    reason = reference_reason(run)
    if reason is not None:
        return f"reference ({reason})"
    if run.local_term is not None:
        return f"{VmapSteps.name}, local_term vmap-ed"
    return batched_path(run).name


def derived_seed(*keys: int) -> int:
    """A 63-bit seed determined by ``keys`` (e.g. a client's seed key: run seed, round, user)."""
    state = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, dtype=np.uint32)
    return int(state.astype(np.uint64) @ np.array([1 << 31, 1], dtype=np.uint64))


# appended to a client's seed key: its dropout masks' stream, apart from its minibatch order's
DROPOUT_STREAM = 1


def dropout_generator(key: tuple[int, ...], device: torch.device) -> torch.Generator:
    """The generator of a client's dropout masks (``Minibatches.dropout_masks``), on the run's
    device, seeded from the client's seed key (run seed, round, user) alone: the same masks
    whichever path trains the client and whoever trains beside it (a pack's other runs, a resumed
    run's partners at other rounds)."""
    return torch.Generator(device=device).manual_seed(derived_seed(*key, DROPOUT_STREAM))


def train_one(request: TrainRequest, k: int) -> ClientResult:
    """Client k of ``request`` trained alone, on the sequential (reference) path."""
    run, user = request.run, request.users[k]
    seed = derived_seed(*request.seed_keys[k])
    torch.manual_seed(seed)  # any draw of an algorithm's local term on this path, per client
    idx = run.data.train_idx[user]
    state = request.states[k] if request.states is not None else None
    masks = (dropout_generator(request.seed_keys[k], run.device) if run.trainer.minibatches.sites
             else None)
    return run.trainer.train(request.w, run.data.x[idx], run.data.y[idx],
                             torch.Generator().manual_seed(seed), request.loss_scales[k],
                             term=run.local_term, state=state, dropout_generator=masks)


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


def check_packable(runs: list[RunInputs]) -> None:
    """Runs can be packed when they share the device, the model, the local hyper-parameters, the
    batched setting and the pooled samples (seeds, algorithms, their hyper-parameters, attacks and
    partitions may differ). The packed runs then share one copy of the samples
    (``Simulation.share_samples``)."""
    lead = runs[0]
    for run in runs[1:]:
        model, lead_model = run.trainer.model, lead.trainer.model
        differ = [name for name, same in [
            ("device", run.device == lead.device),
            ("model", type(model.module) is type(lead_model.module)
             and model.shapes == lead_model.shapes),
            ("conv", convolution(model.module) == convolution(lead_model.module)),
            ("local training (epochs, batch size, local lr, momentum, proximal mu)",
             run.trainer.hparams == lead.trainer.hparams),
            ("batched", run.batched == lead.batched),
            ("pooled samples", run.data.x is lead.data.x or (
                run.data.x.shape == lead.data.x.shape and torch.equal(run.data.x, lead.data.x)
                and torch.equal(run.data.y, lead.data.y))),
        ] if not same]
        if differ:
            raise ConfigError(f"runs {lead.name} and {run.name} cannot be packed: they differ in "
                              f"{'; '.join(differ)}")


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
        due = round_ != self.printed_round and (now - self.last >= self.every
                                                or round_ in (1, total))
        if not due or done <= 0:
            return
        self.last, self.printed_round = now, round_
        per_round = (now - self.start) / done
        eta = per_round * (total - round_)
        acc = np.array([sim.mean_acc for sim in self.sims if math.isfinite(sim.mean_acc)]) * 100
        if len(self.sims) == 1:
            accuracy = f"mean user acc {acc[0]:.2f} %" if len(acc) else "mean user acc n/a"
        else:
            accuracy = (f"{active}/{len(self.sims)} runs active; mean user acc min "
                        f"{acc.min():.2f} / mean {acc.mean():.2f} / max {acc.max():.2f} %"
                        if len(acc) else f"{active}/{len(self.sims)} runs active")
        print(f"[progress] round {round_}/{total} | {per_round:.3f} s/round | "
              f"ETA {eta / 60:.1f} min | {accuracy}", flush=True)
