"""The ``Algorithm`` contract every algorithm follows, built-in or plug-in (docs/plugins.md), and
what it is handed: ``HParam`` (a declared hyper-parameter), ``RoundContext`` (a round, on the
server) and ``ClientRound`` (one participant's local training).

No torch or numpy at import: the catalog reads the algorithms' class attributes while the
Snakefile parses (``fedmgda.catalog``), so only the methods that compute touch tensors.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fedmgda.errors import ConfigError

if TYPE_CHECKING:
    import torch

# The version of the plug-in interface, what a plug-in declares and how the engine calls it
# (docs/plugins.md, "Interface versions"). 2: ``build`` no longer receives ``algorithm=`` and the
# names are imported from ``fedmgda.algorithms``; interface 1's forms still work, each with a
# DeprecationWarning, until fedmgda ``INTERFACE_1_REMOVED_IN``.
PLUGIN_INTERFACE = 2
INTERFACE_1_REMOVED_IN = "0.2.0"


@dataclass(frozen=True)
class HParam:
    """A server hyper-parameter: its default (None: unset), its range and how the paper writes
    it."""

    default: float | None
    low: float
    high: float = math.inf
    low_open: bool = False  # True: the value must be > low
    symbol: str = ""  # the paper's notation in row labels ("η"); "" = the name

    def check(self, algorithm: str, name: str, value: Any) -> float:
        if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value)):
            raise ConfigError(f"{algorithm}: hyper-parameter {name} must be a number, "
                              f"got {value!r}")
        too_low = value <= self.low if self.low_open else value < self.low
        if too_low or value > self.high:
            bracket = "(" if self.low_open else "["
            raise ConfigError(f"{algorithm}: {name} = {value} is out of range {bracket}{self.low}, "
                              f"{self.high}]")
        return float(value)


@dataclass
class RoundContext:
    """What the server knows about a round besides the updates."""

    round: int  # 0-based t
    rounds: int  # T
    participants: list[int]
    pre_round_losses: torch.Tensor  # F_i: reported loss of w_t on each participant's train split
    train_losses: torch.Tensor  # reported mean local training loss of each participant
    train_sizes: list[int]  # n_i: each participant's number of train samples
    # what each participant sent beside its update (``after_training``)
    client_reports: list[Any] = field(default_factory=list)


@dataclass
class ClientRound:
    """What ``Algorithm.after_training`` sees of one participant's local training."""

    user: int
    state: Any  # the client's state before this round (``client_state``)
    update: torch.Tensor  # u = w_new - w_start, flat
    train_loss: torch.Tensor  # its mean local objective, as reported
    steps: int  # K: the local SGD steps it took
    lr: float  # the local learning rate


class Algorithm(ABC):
    """Base class of every algorithm: the server rule that combines the round's updates (rows of
    ``updates``) into the next global model, and what the clients do besides the shared local SGD.

    An algorithm declares its facts on its class; the catalog reads them (``fedmgda.catalog``),
    for the built-ins (``fedmgda/algorithms/``) and the plug-ins a config names under ``plugins:``
    (docs/plugins.md) alike: ``name`` (as written in grids and run paths), ``display`` (tables,
    figures), ``hparams`` (name -> HParam: default and range), optionally ``implied``,
    ``run_options``, ``check_run`` and the flags ``proximal`` (clients use hyper-parameter ``mu``),
    ``needs_pre_round_losses``, ``averages_iterates``, ``normalised_updates``, ``min_norm_qp``; a
    built-in also ``own_options``.
    The first line of its docstring is its summary (config/README.md).

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
    hparams: ClassVar[dict[str, HParam]] = {}
    # hyper-parameters whose default is part of the algorithm's definition (docs/protocol.md §4.2):
    # left out of run paths and row keys when equal to it ("FedMGDA+ with epsilon 1" = "FedMGDA+")
    implied: ClassVar[tuple[str, ...]] = ()
    # the clients add mu ||w - w_t||^2 (no 1/2), mu = hyper-parameter ``mu``
    proximal: ClassVar[bool] = False
    # F_i of w_t on each participant, before it trains
    needs_pre_round_losses: ClassVar[bool] = False
    averages_iterates: ClassVar[bool] = False  # the run's output is the average of all iterates
    # each update divided by its norm (the averaging rules act on it)
    normalised_updates: ClassVar[bool] = False
    min_norm_qp: ClassVar[bool] = False  # weights from the min-norm QP (descriptive)
    # whether ``aggregate`` reads the participants' reported losses (ctx.pre_round_losses,
    # ctx.train_losses): then a participant reporting a non-finite loss is left out of the round,
    # as one with a non-finite update always is. True unless a rule says it ignores them.
    uses_losses: ClassVar[bool] = True
    # RunConfig options its ``build`` receives as keywords
    run_options: ClassVar[tuple[str, ...]] = ()
    # a built-in's own run options (RunConfig fields that only it reads, which its ``build`` also
    # receives): name -> the values allowed, the default first; fedmgda.config and the schema read
    # them
    own_options: ClassVar[dict[str, tuple[str, ...]]] = {}
    # the clients add proximal_mu * ||w - w_start||^2 (no 1/2) to their objective
    proximal_mu: float = 0.0
    # False: the local term cannot be vmap-ed; its clients train on the reference path
    vmap_local_term: ClassVar[bool] = True

    @classmethod
    def build(cls, hparams: dict[str, float | None], *, rounds: int, num_users: int) -> Algorithm:
        """The rule of one run: by default ``cls(**hparams)`` with the resolved hyper-parameters
        (and, as keywords, the values of the run options it names in ``run_options`` and
        ``own_options``). A ``build`` that still takes ``algorithm`` (plug-in interface 1) gets its
        ``fedmgda.catalog.AlgorithmInfo`` there, with a DeprecationWarning, until fedmgda
        ``INTERFACE_1_REMOVED_IN``."""
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
        return type(self).local_term is not Algorithm.local_term

    def has_client_state(self) -> bool:
        return (type(self).client_state is not Algorithm.client_state
                or type(self).after_training is not Algorithm.after_training)

    @abstractmethod
    def aggregate(self, w: torch.Tensor, updates: torch.Tensor,
                  ctx: RoundContext) -> tuple[torch.Tensor, dict[str, Any]]:
        """The next global model and what to log about the round (``eta``, ``lambda``)."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must hold to resume this rule (JSON-able); {} when stateless."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore what ``state_dict`` returned (from a checkpoint)."""
