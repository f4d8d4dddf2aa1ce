"""Every algorithm and dataset name, written once; everything else reads them from here.

The registry (``fedmgda.experiments``), the config checks, the simulator, the dataset registry
(``fedmgda.data.registry``, which adds loaders and raw files) and the Snakefile's wildcard
constraints all ask this module. It imports no torch, so the Snakefile parses fast.

Algorithms are the paper's eight (docs/protocol.md §4) plus any plug-in aggregators a config names
under ``plugins`` (docs/plugins.md): a plug-in is a subclass of ``fedmgda.aggregators.Aggregator``
that declares the same facts as an :class:`Algorithm` below on itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fedmgda.errors import ConfigError


@dataclass(frozen=True)
class HParam:
    """A server hyper-parameter: its default (None: unset), its range and how the paper writes it."""

    default: float | None
    low: float
    high: float = math.inf
    low_open: bool = False  # True: the value must be > low
    symbol: str = ""  # the paper's notation in row labels ("η"); "" = the name

    def check(self, algorithm: str, name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{algorithm}: hyper-parameter {name} must be a number, got {value!r}")
        too_low = value <= self.low if self.low_open else value < self.low
        if too_low or value > self.high:
            bracket = "(" if self.low_open else "["
            raise ConfigError(f"{algorithm}: {name} = {value} is out of range {bracket}{self.low}, {self.high}]")
        return float(value)


@dataclass(frozen=True)
class Algorithm:
    """What the registry, the config checks and the simulator need to know about one algorithm.

    implied:   hyper-parameters whose default is part of the algorithm's definition (docs/protocol.md
               §4.2): left out of run paths and row keys when equal to it, so "FedMGDA+ with
               epsilon 1" and "FedMGDA+" are one run.
    aggregator: ``module:Class`` of its ``fedmgda.aggregators.Aggregator`` (imported when a run is
               built, so that this module needs no torch).
    run_options: the run-config options (``fedmgda.config.RunConfig`` fields) its aggregator's
               ``build`` receives as keywords, e.g. AFL's ``afl_step_weights``.
    check_run: checks a run config for this algorithm (one ConfigError), e.g. AFL's reading of
               gamma_w as the clients' learning rate; None: nothing beyond the common checks.
    The flags describe the server rule (docs, tests) and tell the simulator what to compute:
    ``proximal`` (the clients add mu ||w - w_t||^2, no 1/2, mu = hyper-parameter ``mu``),
    ``needs_pre_round_losses`` (F_i of w_t on each participant before it trains) and
    ``averages_iterates`` (the run's output is the average of all iterates).
    """

    name: str
    display: str
    hparams: Mapping[str, HParam]
    aggregator: str
    implied: tuple[str, ...] = ()
    normalised_updates: bool = False
    min_norm_qp: bool = False
    proximal: bool = False
    needs_pre_round_losses: bool = False
    averages_iterates: bool = False
    run_options: tuple[str, ...] = ()
    check_run: Callable[[Any], None] | None = None
    summary: str = ""
    plugin: str | None = None  # the config's ``path.py:Class`` / ``module:Class`` of a plug-in

    def resolve(self, hparams: Mapping[str, Any] | None) -> dict[str, float | None]:
        """The hyper-parameters with defaults filled in; one clear error if invalid."""
        hparams = dict(hparams or {})
        unknown = sorted(set(hparams) - set(self.hparams))
        if unknown:
            allowed = ", ".join(self.hparams) or "none"
            raise ConfigError(f"{self.name}: unknown hyper-parameter(s) {', '.join(unknown)}; allowed: {allowed}")
        out: dict[str, float | None] = {}
        for name, rule in self.hparams.items():
            value = hparams.get(name, rule.default)
            out[name] = None if value is None else rule.check(self.name, name, value)
        return out

    @property
    def implied_values(self) -> dict[str, float]:
        return {k: float(self.hparams[k].default) for k in self.implied}

    def prox_mu(self, hparams: Mapping[str, Any] | None) -> float:
        """The clients' proximal coefficient (0 without a proximal term)."""
        if not self.proximal:
            return 0.0
        return float((hparams or {}).get("mu", self.hparams["mu"].default))


_ETA = HParam(1.0, 0.0, low_open=True, symbol="η")
_DECAY = HParam(0.0, 0.0, 1.0, symbol="decay")  # the paper's total decay over the run; 0 (or 1) = none
_BETA = HParam(None, 0.0, 1.0, low_open=True, symbol="β")  # the code's per-100-round factor; overrides decay
_EPSILON = HParam(1.0, 0.0, 1.0, symbol="ε")
_STEP = {"eta": _ETA, "decay": _DECAY, "beta": _BETA}
AVERAGING_RULE = "fedmgda.aggregators:WeightedUpdates"  # the averaging rules' aggregator (FedAvg ... MGDA-Prox)


def _algorithm(name: str, display: str, hparams: dict[str, HParam], aggregator: str = AVERAGING_RULE, **kw) -> Algorithm:
    if aggregator == AVERAGING_RULE:
        kw["run_options"] = ("aggregation_weights",)
    return Algorithm(name, display, MappingProxyType(hparams), aggregator, **kw)


def _check_afl_gamma_w(cfg: Any) -> None:
    """AFL with ``afl_gamma_w: local_lr`` reads gamma_w as the clients' learning rate (the server
    step is then 1, ``fedmgda.aggregators.AFL.build``): local_lr must equal gamma_w."""
    if cfg.afl_gamma_w == "local_lr":
        gamma_w = cfg.hparams.get("gamma_w", 1.0)
        if not math.isclose(float(gamma_w), float(cfg.local_lr)):
            raise ConfigError(f"afl_gamma_w: local_lr reads AFL's gamma_w as the clients' learning rate, so local_lr "
                              f"must equal gamma_w (got local_lr {cfg.local_lr}, gamma_w {gamma_w})")


BUILTIN_ALGORITHMS: Mapping[str, Algorithm] = MappingProxyType({a.name: a for a in (
    _algorithm("fedavg", "FedAvg", {}, summary="mean of the raw updates"),
    _algorithm("fedavg_n", "FedAvg-n", _STEP, normalised_updates=True,
               summary="mean of the normalised updates, server step eta_t"),
    _algorithm("fedprox", "FedProx", {"mu": HParam(0.01, 0.0, symbol="μ")}, proximal=True,
               summary="FedAvg with a proximal term in the clients' loss"),
    _algorithm("qfedavg", "q-FedAvg", {"q": HParam(0.1, 0.0, symbol="q"), "L": HParam(1.0, 0.0, low_open=True, symbol="L")},
               aggregator="fedmgda.aggregators:QFedAvg", needs_pre_round_losses=True, run_options=("qffl_loss",),
               summary="q-FFL weights from the participants' pre-round losses"),
    _algorithm("afl", "AFL", {"gamma_w": HParam(1.0, 0.0, low_open=True, symbol="γ_w"),
                              "gamma_lambda": HParam(0.1, 0.0, symbol="γ_λ")},
               aggregator="fedmgda.aggregators:AFL", averages_iterates=True,
               run_options=("afl_step_weights", "afl_gamma_w"), check_run=_check_afl_gamma_w,
               summary="lambda ascent on the losses; the output is the average iterate"),
    _algorithm("fedmgda", "FedMGDA", {"epsilon": _EPSILON}, implied=("epsilon",), min_norm_qp=True,
               summary="min-norm QP weights of the raw updates"),
    _algorithm("fedmgda_plus", "FedMGDA+", {**_STEP, "epsilon": _EPSILON}, implied=("epsilon",),
               normalised_updates=True, min_norm_qp=True,
               summary="min-norm QP weights of the normalised updates, server step eta_t"),
    _algorithm("mgda_prox", "MGDA-Prox", {**_STEP, "epsilon": _EPSILON, "mu": HParam(0.1, 0.0, symbol="μ")},
               implied=("epsilon", "mu"), normalised_updates=True, min_norm_qp=True, proximal=True,
               summary="FedMGDA+ with a proximal term in the clients' loss"),
)})

_PLUGINS: dict[str, Algorithm] = {}  # name -> plug-in, filled by load_plugins


def algorithms() -> dict[str, Algorithm]:
    """The built-in algorithms and the plug-ins loaded so far."""
    return {**BUILTIN_ALGORITHMS, **_PLUGINS}


def get_algorithm(name: str, plugin: str | None = None) -> Algorithm:
    """The algorithm called ``name``; ``plugin`` (``path.py:Class``) loads it first if needed."""
    if plugin is not None:
        load_plugins([plugin])
    known = algorithms()
    if name not in known:
        raise ConfigError(f"unknown algorithm {name!r}; known: {', '.join(known)} "
                          f"(a new one is a plug-in named under `plugins:`, docs/plugins.md)")
    return known[name]


def import_object(path: str) -> Any:
    """The object at ``path/to/file.py:Name`` (relative to the working directory) or ``module:Name``."""
    where, sep, attr = path.rpartition(":")
    if not sep or not where or not attr:
        raise ConfigError(f"plug-in {path!r}: expected path/to/file.py:Class or package.module:Class")
    if where.endswith(".py"):
        file = Path(where).resolve()
        if not file.is_file():
            raise ConfigError(f"plug-in {path!r}: no file {file}")
        module_name = "fedmgda_plugin_" + "".join(c if c.isalnum() else "_" for c in str(file))
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, file)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module  # dataclasses and pickling look the module up
            try:
                spec.loader.exec_module(module)
            except Exception:
                del sys.modules[module_name]
                raise
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise ConfigError(f"plug-in {path!r}: cannot import {where}: {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"plug-in {path!r}: {where} has no {attr}") from None


_AGGREGATOR_BASE = "fedmgda.aggregators.Aggregator"


def _is_aggregator(cls: Any) -> bool:
    """Whether ``cls`` subclasses fedmgda.aggregators.Aggregator, checked by name: the
    aggregators import this module (and torch), so this module never imports them."""
    return isinstance(cls, type) and any(f"{base.__module__}.{base.__qualname__}" == _AGGREGATOR_BASE
                                         for base in cls.__mro__[1:])


_DECLARED = ("normalised_updates", "min_norm_qp", "proximal", "needs_pre_round_losses", "averages_iterates")


def load_plugins(paths: Iterable[str]) -> list[Algorithm]:
    """Load and register plug-in aggregators; each declares ``name``, ``display``, ``hparams``
    (name -> HParam), optionally ``implied`` and the flags of :class:`Algorithm`."""
    loaded = []
    for path in paths:
        cls = import_object(path)
        if not _is_aggregator(cls):
            raise ConfigError(f"plug-in {path!r} is not a subclass of {_AGGREGATOR_BASE}")
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"plug-in {path!r}: declare its name as a class attribute, e.g. name = \"fedavgm\"")
        if name in BUILTIN_ALGORITHMS:
            raise ConfigError(f"plug-in {path!r}: {name!r} is a built-in algorithm; choose another name")
        if name in _PLUGINS and _PLUGINS[name].plugin != path:
            raise ConfigError(f"plug-in {path!r}: {name!r} is already declared by {_PLUGINS[name].plugin}")
        hparams = dict(getattr(cls, "hparams", {}) or {})
        bad = [k for k, v in hparams.items() if not isinstance(v, HParam)]
        if bad:
            raise ConfigError(f"plug-in {path!r}: hparams must map names to fedmgda.catalog.HParam ({', '.join(bad)})")
        implied = tuple(getattr(cls, "implied", ()) or ())
        if set(implied) - set(hparams):
            raise ConfigError(f"plug-in {path!r}: implied names unknown hyper-parameters {sorted(set(implied) - set(hparams))}")
        if getattr(cls, "proximal", False) and "mu" not in hparams:
            raise ConfigError(f"plug-in {path!r}: a proximal algorithm declares its coefficient as hyper-parameter mu")
        info = Algorithm(
            name, getattr(cls, "display", "") or name, MappingProxyType(hparams), f"{cls.__module__}:{cls.__qualname__}",
            implied=implied, summary=(cls.__doc__ or "").strip().split("\n")[0], plugin=path,
            run_options=tuple(getattr(cls, "run_options", ()) or ()), check_run=getattr(cls, "check_run", None),
            **{flag: bool(getattr(cls, flag, False)) for flag in _DECLARED})
        _PLUGINS[name] = info
        loaded.append(info)
    return loaded


@dataclass(frozen=True)
class Dataset:
    """What the registry and the workflow need to know about a dataset (loaders: fedmgda.data).

    seeded_partitions: the partitions whose result depends on the run seed (others are fixed).
    offline: generated or shipped with a library, so it needs no download.
    raw_files_of: the dataset whose raw files (``<raw_dir>/<that name>/``) it reads; "" = its own.
    """

    name: str
    model: str
    default_partition: str
    partitions: tuple[str, ...]
    seeded_partitions: tuple[str, ...] = ("shards", "iid")
    offline: bool = False
    description: str = ""
    raw_files_of: str = ""

    @property
    def raw_folder(self) -> str:
        """The folder under the raw-data directory that holds its raw files."""
        return self.raw_files_of or self.name


DATASETS: Mapping[str, Dataset] = MappingProxyType({d.name: d for d in (
    Dataset("cifar10", "cnn_cifar", "shards", ("shards", "iid"),
            description="CIFAR-10, 100 users, 500 label-sorted shards of 100, 5 per user"),
    Dataset("fmnist", "cnn_fmnist", "shards", ("shards", "iid"),
            description="Fashion-MNIST, 100 users; code: 300 shards of 200, 3 per user; "
                        "paper text: 500 shards of 120, 5 per user"),
    Dataset("fmnist3", "logreg", "natural", ("natural",), seeded_partitions=(), raw_files_of="fmnist",
            description="q-FFL's Fashion-MNIST: classes T-shirt/top, pullover, shirt, one user per "
                        "class, pixels standardised over all training images (fair_flearn "
                        "data/fmnist/create_dataset.py)"),
    Dataset("femnist", "cnn_femnist", "natural", ("natural",), seeded_partitions=(),
            description="TFF federated EMNIST-62, one user per writer (3 400)"),
    Dataset("shakespeare", "lstm_shakespeare", "natural", ("natural",), seeded_partitions=(),
            description="LEAF Shakespeare, 31 roles (q-FFL subsample), next-character prediction"),
    Dataset("adult", "logreg", "domain", ("domain", "iid"),
            description="UCI Adult, 99 binary features; client 0 = PhD, client 1 = non-PhD"),
    Dataset("synthetic", "logreg", "natural", ("natural",), seeded_partitions=(), offline=True,
            description="q-FFL Synthetic(alpha, beta), one user per generated device"),
    Dataset("digits", "mlp_digits", "shards", ("shards", "iid"), offline=True,
            description="scikit-learn digits (1 797 8x8 images), 20 users x 2 label-sorted shards"),
)})
OFFLINE_DATASETS = tuple(name for name, d in DATASETS.items() if d.offline)
DOWNLOADED_DATASETS = tuple(name for name, d in DATASETS.items() if not d.offline)
RAW_FOLDERS = tuple(dict.fromkeys(d.raw_folder for d in DATASETS.values() if not d.offline))
PARTITIONS = tuple(dict.fromkeys(p for d in DATASETS.values() for p in d.partitions))


def get_dataset(name: str) -> Dataset:
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]

