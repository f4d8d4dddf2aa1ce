"""The algorithms: server-side aggregation of FedMGDA+ and its baselines (docs/protocol.md §4),
and the ``Aggregator`` contract, whose client-side hooks let an algorithm change its clients'
local training too (a local term, per-client state, reports; docs/plugins.md §3).

Every built-in algorithm runs the same client update (``fedmgda.client``); they differ only in the
client's proximal weight and in how the server combines the returned updates u_i = w_i - w:

| algorithm    | updates     | weights lambda                       | server step        | client prox |
|--------------|-------------|--------------------------------------|--------------------|-------------|
| fedavg       | raw         | uniform 1/n                          | 1                  | -           |
| fedavg_n     | normalised  | uniform 1/n                          | eta_t (decay)      | -           |
| fedprox      | raw         | uniform 1/n                          | 1                  | mu          |
| fedmgda      | raw         | min-norm QP, epsilon (default 1)     | 1                  | -           |
| fedmgda_plus | normalised  | min-norm QP, epsilon (default 1)     | eta_t (decay)      | -           |
| mgda_prox    | normalised  | min-norm QP, epsilon (default 1)     | eta_t (decay)      | mu (0.1)    |
| qfedavg      | raw         | q-FFL weights from losses (q, L)     | 1 / sum h_i        | -           |
| afl          | raw         | lambda ascent on losses + projection | gamma_w            | -           |

The first six are one rule (``WeightedUpdates``): w <- w + eta_t * sum_i lambda_i u_i with
lambda = argmin ||sum lambda_i u_i||^2 over the simplex within epsilon of the a-priori weights
lambda0 (epsilon = 0: lambda0, no QP). lambda0 is uniform 1/n, or with ``aggregation_weights:
samples`` the participants' train sizes n_i / sum n. Normalisation divides each update by its
full-model L2 norm.

Extreme and non-finite updates (docs/protocol-choices.md, "Non-finite reports"): an aggregator
only ever sees finite values. The simulator leaves a participant out of the round when its update
has a NaN or Inf entry (every algorithm), or when a loss it reports is not finite and the
algorithm aggregates losses (``Aggregator.uses_losses``: q-FedAvg, AFL, plug-ins unless they say
otherwise). Finite updates of any magnitude are handled without overflow where the rule is
scale-free: the normalising rules (FedAvg-n, FedMGDA+, MGDA-Prox) take each direction from an
overflow-proof norm (``normalise_rows``), so an update x 1e30 has the direction of the update
itself; the min-norm QP (FedMGDA, FedMGDA+, MGDA-Prox) gets a finite Gram matrix
(``gram_matrix``); q-FedAvg's h_i is recomputed in float64 when float32 overflows. When nothing
overflows, every number is the one the plain float32 expressions give.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from fedmgda.catalog import Algorithm, HParam, get_algorithm, import_object
from fedmgda.qp import min_norm_weights, project_to_simplex


def decay_per_100_rounds(decay: float | None, beta: float | None, rounds: int) -> float:
    """The per-100-round factor beta of eta_t = eta * beta^floor(t/100) (docs/protocol.md §4.4).

    ``decay`` is the paper's notation: the total shrink factor over ``rounds`` rounds
    (beta = decay^(100/T)); 0 and 1 both mean no decay. ``beta`` gives the code's flag directly.
    """
    if beta is not None:
        return beta
    if decay is None or decay in (0.0, 1.0):
        return 1.0
    return float(decay ** (100.0 / rounds))


@dataclass
class RoundContext:
    """What the server knows about a round besides the updates."""

    round: int  # 0-based t
    rounds: int  # T
    participants: list[int]
    pre_round_losses: torch.Tensor  # F_i: reported loss of w_t on each participant's train split
    train_losses: torch.Tensor  # reported mean local training loss of each participant
    train_sizes: list[int]  # n_i: each participant's number of train samples
    client_reports: list[Any] = field(default_factory=list)  # what each participant sent beside its update (``after_training``)


@dataclass
class ClientRound:
    """What ``Aggregator.after_training`` sees of one participant's local training."""

    user: int
    state: Any  # the client's state before this round (``client_state``)
    update: torch.Tensor  # u = w_new - w_start, flat
    train_loss: torch.Tensor  # its mean local objective, as reported
    steps: int  # K: the local SGD steps it took
    lr: float  # the local learning rate


class Aggregator(ABC):
    """Base class of every algorithm: the server rule that combines the round's updates (rows of
    ``updates``) into the next global model, and what the clients do besides the shared local SGD.

    The built-in rules are described in ``fedmgda.catalog``. A plug-in (docs/plugins.md) declares
    the same facts on its class, is named in a config's ``plugins:`` list and then runs like a
    built-in: ``name`` (as written in grids and run paths), ``display`` (tables, figures),
    ``hparams`` (name -> HParam: default and range), optionally ``implied``, ``run_options``,
    ``check_run`` and the flags ``proximal`` (clients use hyper-parameter ``mu``),
    ``needs_pre_round_losses``, ``averages_iterates``, ``normalised_updates``, ``min_norm_qp``.

    The clients' side (docs/plugins.md §3), all optional: ``proximal_mu`` (set from hyper-parameter
    ``mu`` of a ``proximal`` algorithm; every training path serves it), ``local_term`` (a term of
    the local objective; vmap-ed over the clients on the batched path unless ``vmap_local_term``
    is False), ``client_state`` (per-client state kept across rounds and in checkpoints) and
    ``after_training`` (the new state and a value sent beside the update,
    ``RoundContext.client_reports``).

    ``aggregate`` only sees finite updates (and, with ``uses_losses``, finite losses): the
    simulator leaves out of the round every participant whose report is not (docs/plugins.md).
    """

    name: ClassVar[str]
    display: ClassVar[str] = ""
    # whether ``aggregate`` reads the participants' reported losses (ctx.pre_round_losses,
    # ctx.train_losses): then a participant reporting a non-finite loss is left out of the round,
    # as one with a non-finite update always is. True unless a rule says it ignores them.
    uses_losses: ClassVar[bool] = True
    hparams: ClassVar[dict[str, HParam]] = {}
    run_options: ClassVar[tuple[str, ...]] = ()  # RunConfig options its ``build`` receives as keywords
    proximal_mu: float = 0.0  # the clients add proximal_mu * ||w - w_start||^2 (no 1/2) to their objective
    vmap_local_term: ClassVar[bool] = True  # False: the local term cannot be vmap-ed; its clients train on the reference path

    @classmethod
    def build(cls, hparams: dict[str, float | None], *, algorithm: Algorithm, rounds: int, num_users: int) -> Aggregator:
        """The rule of one run: by default ``cls(**hparams)`` with the resolved hyper-parameters
        (and, as keywords, the values of the run options it names in ``run_options``)."""
        return cls(**hparams)

    @classmethod  # noqa: B027 (nothing to check by default)
    def check_run(cls, cfg: Any) -> None:
        """Reject a run config (``fedmgda.config.RunConfig``) this algorithm cannot run, with one
        ``ConfigError``; called by the config's checks, before any job starts."""

    def reported_loss(self, stats: dict[str, torch.Tensor], sizes: list[int]) -> torch.Tensor:
        """F_i, the loss of w_t each participant reports before training (``ctx.pre_round_losses``,
        before an attack changes it), from its ``participant_stats``: by default the sum of its
        minibatch-mean losses (``total``)."""
        return stats["total"]

    # ------------------------------------------------------------------ the clients' side
    def local_term(self, w: torch.Tensor, w_start: torch.Tensor, state: Any) -> torch.Tensor:
        """A term added to the client's local objective at ``w`` (differentiated with it), given
        the round's start ``w_start`` and the client's ``state``. Not overridden: no term (zero;
        the engine then skips it, ``has_local_term``). On the batched path it is vmap-ed over a
        round's clients (``w``, ``w_start`` and every tensor of ``state`` one client's slice), so
        it must be a pure function of its arguments and of attributes that stay put during the
        round; a term that cannot be vmap-ed (``.item()``, control flow on tensor values) makes
        the engine fall back to the reference path, saying why (docs/plugins.md §3)."""
        return w.new_zeros(())

    def client_state(self, user: int, w: torch.Tensor) -> Any:
        """Client ``user``'s state before its first round (``w``: the global model then); the run
        keeps each client's state across rounds and in its checkpoints. None: stateless."""
        return None

    def after_training(self, client: ClientRound) -> tuple[Any, Any]:
        """After a participant's local training, on the client: its new state and the value it
        sends beside its update (``ctx.client_reports``). By default: unchanged, nothing."""
        return client.state, None

    def has_local_term(self) -> bool:
        return type(self).local_term is not Aggregator.local_term

    def has_client_state(self) -> bool:
        return type(self).client_state is not Aggregator.client_state or type(self).after_training is not Aggregator.after_training

    @abstractmethod
    def aggregate(self, w: torch.Tensor, updates: torch.Tensor, ctx: RoundContext) -> tuple[torch.Tensor, dict[str, Any]]:
        """The next global model and what to log about the round (``eta``, ``lambda``)."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must hold to resume this rule (JSON-able); {} when stateless."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore what ``state_dict`` returned (from a checkpoint)."""


def normalise_rows(updates: torch.Tensor) -> torch.Tensor:
    """Each (finite) update divided by its full-model L2 norm (a zero update stays zero).

    Overflow-proof: a float32 norm overflows once the update's entries reach about 1e19 (a scaling
    attacker) and loses its precision below about 1e-19; such rows are scaled by their largest
    entry and normalised in float64 (``unit_rows``), so any finite nonzero update gives its own
    direction. The other rows are exactly ``u / ||u||`` in the updates' dtype."""
    norms = updates.norm(dim=1, keepdim=True)
    directions = updates / torch.where(norms > 0, norms, torch.ones_like(norms))
    tiny = math.sqrt(torch.finfo(updates.dtype).tiny)  # below: the squares are subnormal or zero
    redo = ~torch.isfinite(norms[:, 0]) | ((norms[:, 0] < tiny) & (updates != 0).any(dim=1))
    if redo.any():
        directions[redo] = unit_rows(updates[redo]).to(updates.dtype)
    return directions


def unit_rows(rows: torch.Tensor) -> torch.Tensor:
    """Finite nonzero rows as unit vectors in float64, each scaled by its largest |entry| first
    (no square can overflow or underflow)."""
    scaled = rows.double() / rows.abs().amax(dim=1, keepdim=True).double()
    return scaled / scaled.norm(dim=1, keepdim=True)


def gram_matrix(directions: torch.Tensor) -> np.ndarray:
    """K_ij = <d_i, d_j> of finite rows as a float64 array, for the min-norm QP. Computed in the rows'
    dtype; when an entry overflows it (raw updates of a scaling attacker) or the largest one is
    below the dtype's normal range, in float64 from the rows divided by their largest |entry|:
    the QP's minimiser does not change when K is scaled (``fedmgda.qp.min_norm_weights``)."""
    gram = (directions @ directions.T).double().cpu().numpy()
    if np.isfinite(gram).all() and not (np.max(np.diag(gram)) < torch.finfo(directions.dtype).tiny and bool((directions != 0).any())):
        return gram
    scaled = directions.double() / directions.abs().max().double()
    return (scaled @ scaled.T).cpu().numpy()


@dataclass
class WeightedUpdates(Aggregator):
    """FedAvg, FedAvg-n, FedProx, FedMGDA, FedMGDA+, MGDA-Prox: w + eta_t * sum_i lambda_i u_i.

    ``aggregation_weights`` (run config) is lambda0, the a-priori weights at the centre of the
    epsilon-box: "uniform" 1/n, or "samples" n_i / sum n. FedMGDA+ paper §3: "setting epsilon = 0
    recovers FedAvg with a priori weighting lambda0" (eq. 25), and FedAvg's weights are "typically
    ... the dataset size at each user, ..., or simply uniform" (§2); epsilon = 0 with "samples" is
    FedAvg as McMahan et al. define it (fair_flearn fedbase.py:L152-167, ``aggregate`` with
    sampling 1). With epsilon >= 1 the box is the whole simplex and lambda0 does not matter.

    Extreme updates: the normalising rules (FedAvg-n, FedMGDA+, MGDA-Prox) use overflow-proof
    norms (``normalise_rows``): a finite update gives its own direction whatever its magnitude, so
    a scaling attacker of any factor weighs as an honest user; the QP's Gram matrix is finite
    (``gram_matrix``). The raw rules (FedAvg, FedProx, FedMGDA) add the raw updates: a huge finite
    update moves the model by as much (FedMGDA's QP gives it a small weight). These rules read no
    losses (``uses_losses`` False): a participant is left out only for a non-finite update.
    """

    uses_losses: ClassVar[bool] = False
    normalize: bool = False
    epsilon: float = 0.0
    eta: float = 1.0
    beta: float = 1.0
    aggregation_weights: str = "uniform"

    @classmethod
    def build(cls, hparams, *, algorithm, rounds, num_users, aggregation_weights="uniform"):
        return cls(normalize=algorithm.normalised_updates, epsilon=hparams.get("epsilon") or 0.0,
                   eta=hparams.get("eta") or 1.0,
                   beta=decay_per_100_rounds(hparams.get("decay"), hparams.get("beta"), rounds),
                   aggregation_weights=aggregation_weights)

    def step_size(self, t: int) -> float:
        return self.eta * self.beta ** (t // 100)

    def prior_weights(self, ctx: RoundContext) -> np.ndarray:
        """lambda0 of the round: uniform 1/n, or the participants' train sizes n_i / sum n."""
        if self.aggregation_weights == "samples":
            sizes = np.asarray(ctx.train_sizes, dtype=np.float64)
            return sizes / sizes.sum()
        n = len(ctx.participants)
        return np.full(n, 1.0 / n)

    def aggregate(self, w, updates, ctx):
        directions = normalise_rows(updates) if self.normalize else updates
        lambda0 = self.prior_weights(ctx)
        if self.epsilon > 0:
            gram = gram_matrix(directions)
            weights = min_norm_weights(gram, self.epsilon, lambda0)
        else:
            weights = lambda0
        lam = torch.as_tensor(weights, dtype=directions.dtype, device=directions.device)
        eta_t = self.step_size(ctx.round)
        return w + eta_t * (lam @ directions), {"eta": eta_t, "lambda": weights.tolist()}


@dataclass
class QFedAvg(Aggregator):
    """q-FedAvg (docs/protocol.md §4.5): Delta_i = F_i^q L u_i, h_i = q F_i^(q-1) ||L u_i||^2 + L F_i^q,
    w <- w + sum Delta_i / sum h_i, with F_i the participant's pre-round loss.

    It reads the reported losses F_i: a participant whose F_i is not finite is left out of the
    round (``uses_losses``). A huge finite update overflows ||L u_i||^2 in float32; h is then
    recomputed in float64 and the step is that of the float64 values (an update of 1e30 makes
    sum h_i about 1e60 and the step about 0, as the rule says)."""

    q: float = 0.1
    L: float = 1.0
    loss: str = "batch_sum"

    @classmethod
    def build(cls, hparams, *, algorithm, rounds, num_users, qffl_loss="batch_sum"):
        return cls(**hparams, loss=qffl_loss)

    def reported_loss(self, stats, sizes):
        """F_i by the run option ``qffl_loss``: batch_sum, the sum of minibatch means as computed;
        batch_sum_per_sample, that divided by the participant's train samples; train_mean, the
        mean loss over its whole train split (``loss``), as the q-FFL code's ``loss = c.get_loss()``
        ("compute loss on the whole training data", fair_flearn qffedavg.py:L52; qffedsgd.py's
        loss of the full-split batch)."""
        if self.loss == "batch_sum_per_sample":
            return stats["total"] / torch.tensor(sizes, device=stats["total"].device, dtype=stats["total"].dtype)
        if self.loss == "train_mean":
            return stats["loss"]
        return stats["total"]

    def aggregate(self, w, updates, ctx):
        losses = ctx.pre_round_losses.to(updates.dtype)
        deltas = self.L * updates
        h = self.q * losses ** (self.q - 1) * (deltas**2).sum(dim=1) + self.L * losses**self.q
        step = (losses**self.q) @ deltas / h.sum()
        if not (torch.isfinite(h).all() and torch.isfinite(step).all()):  # float32 overflow: the same in float64
            losses, deltas = losses.double(), deltas.double()
            h = self.q * losses ** (self.q - 1) * (deltas**2).sum(dim=1) + self.L * losses**self.q
            step = ((losses**self.q) @ deltas / h.sum()).to(updates.dtype)
        return w + step, {"eta": float("nan"), "h_sum": float(h.sum())}


@dataclass
class AFL(Aggregator):
    """Agnostic FL as in the authors' Adult code (docs/protocol.md §4.5): w <- w + gamma_w sum lambda_i u_i
    with the current lambda over all users, then lambda_i += gamma_lambda * loss_i for the round's
    participants and lambda is projected onto the simplex. The output is the average iterate.

    ``step_weights`` (run config ``afl_step_weights``): "lambda", the rule above (AFL's gradient
    step on sum lambda_i f_i); "uniform", the model step takes the plain mean of the updates,
    sum u_i / n, while lambda moves as above. The q-FFL paper's code runs AFL so (fair_flearn
    afl.py passes (lambda_i, gradient_i) pairs to fedbase.py's ``aggregate``, which with
    sampling 2 sets every weight to 1.0: fedbase.py:L157-159).

    It reads the participants' local losses (lambda ascent): a participant reporting a non-finite
    loss is left out of the round, its lambda unchanged (``uses_losses``).
    """

    gamma_w: float = 1.0
    gamma_lambda: float = 0.1
    num_users: int = 2
    lam: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_weights: str = "lambda"

    @classmethod
    def build(cls, hparams, *, algorithm, rounds, num_users, afl_step_weights="lambda", afl_gamma_w="server_step"):
        """With run option ``afl_gamma_w: local_lr`` gamma_w is the clients' learning rate (the
        config checks local_lr equals it) and the server adds the weighted updates with step 1,
        as the authors' example command does (docs/protocol.md §4.5, §8.11)."""
        hparams = {**hparams, "gamma_w": 1.0} if afl_gamma_w == "local_lr" else hparams
        return cls(**hparams, num_users=num_users, step_weights=afl_step_weights)

    def __post_init__(self) -> None:
        if len(self.lam) == 0:
            self.lam = np.full(self.num_users, 1.0 / self.num_users)

    def aggregate(self, w, updates, ctx):
        if self.step_weights == "uniform":
            new_w = w + self.gamma_w * updates.mean(dim=0)
        else:
            weights = torch.as_tensor(self.lam[ctx.participants], dtype=updates.dtype, device=updates.device)
            new_w = w + self.gamma_w * (weights @ updates)
        ascent = self.lam.copy()
        ascent[ctx.participants] += self.gamma_lambda * ctx.train_losses.double().cpu().numpy()
        self.lam = project_to_simplex(ascent)
        return new_w, {"eta": self.gamma_w, "lambda": self.lam.tolist()}

    def state_dict(self):
        return {"lam": self.lam.tolist()}

    def load_state_dict(self, state):
        self.lam = np.asarray(state["lam"], dtype=np.float64)


def make_aggregator(algorithm: str, hparams: dict[str, Any] | None, rounds: int, num_users: int,
                    plugin: str | None = None, **options: str) -> Aggregator:
    """The aggregator of ``algorithm`` with validated hyper-parameters for a run of ``rounds`` rounds.
    ``options``: values of the run-config options the algorithm names (``Algorithm.run_options``),
    passed to its ``build``; the clients' ``proximal_mu`` is set from a proximal algorithm's ``mu``."""
    info = get_algorithm(algorithm, plugin)
    resolved = info.resolve(hparams)
    rule = import_object(info.aggregator).build(resolved, algorithm=info, rounds=rounds, num_users=num_users, **options)
    if info.proximal:
        rule.proximal_mu = info.prox_mu(resolved)
    return rule
