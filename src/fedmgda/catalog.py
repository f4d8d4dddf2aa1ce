"""Every algorithm and dataset name, written once; everything else reads them from here.

The registry (``fedmgda.experiments``), the config checks, the simulator, the dataset registry
(``fedmgda.data.registry``, which adds loaders and raw files) and the Snakefile's wildcard
constraints all ask this module. It imports no torch, so the Snakefile parses fast.

Datasets are ``DATASETS`` below: each names the partitions it offers, entries of the partitioner
registry ``fedmgda.partitioners.PARTITIONERS`` (``PARTITIONS``: their names), and declares the
options they and its loader read (docs/datasets.md §6: adding one).

Algorithms are the paper's eight, one module each in ``fedmgda.algorithms`` (listed in
``BUILTIN_CLASSES`` below), plus any plug-ins a config names under ``plugins`` (docs/plugins.md).
Both are subclasses of ``fedmgda.algorithms.Algorithm`` that declare their facts on the class, and
:func:`describe` reads them into an :class:`AlgorithmInfo` the same way. Reading a class imports
no torch: the algorithm modules import it only in the methods that compute.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fedmgda.algorithms import (
    afl,
    fedavg,
    fedavg_n,
    fedmgda,
    fedmgda_plus,
    fedprox,
    mgda_prox,
    qfedavg,
)
from fedmgda.algorithms.base import INTERFACE_1_REMOVED_IN, Algorithm, HParam
from fedmgda.errors import ConfigError, warn_deprecated
from fedmgda.partitioners import (  # noqa: F401  (MIN_USER_SAMPLES: imported from here too)
    LOCAL_TESTS,
    MIN_USER_SAMPLES,
    PARTITIONERS,
    SORTS,
    options_error,
)


@dataclass(frozen=True)
class AlgorithmInfo:
    """One algorithm as the registry, the config checks and the simulator see it: its class ``cls``,
    whose facts (``fedmgda.algorithms.Algorithm`` documents each) it reads, checked by
    :func:`describe`, and for a plug-in ``plugin``, the config's ``path.py:Class`` /
    ``module:Class``.

    ``cls.build`` makes the rule of one run (:func:`make_algorithm`), ``cls.check_run`` checks a
    run config (one ConfigError; AFL's reading of gamma_w as the clients' learning rate, say).
    ``implied``: hyper-parameters whose default is part of the algorithm's definition
    (docs/protocol.md §4.2), left out of run paths and row keys when equal to it, so "FedMGDA+ with
    epsilon 1" and "FedMGDA+" are one run. The flags describe the server rule (docs, tests) and
    tell the simulator what to compute: ``proximal`` (the clients add mu ||w - w_t||^2, no 1/2,
    mu = hyper-parameter ``mu``), ``needs_pre_round_losses`` (F_i of w_t on each participant
    before it trains) and ``averages_iterates`` (the run's output is the average of all iterates).
    """

    cls: type[Algorithm]
    plugin: str | None = None

    @property
    def name(self) -> str:
        return self.cls.name

    @property
    def display(self) -> str:
        return self.cls.display or self.cls.name

    @property
    def hparams(self) -> Mapping[str, HParam]:
        return MappingProxyType(self.cls.hparams or {})

    @property
    def implied(self) -> tuple[str, ...]:
        return tuple(self.cls.implied or ())

    @property
    def run_options(self) -> tuple[str, ...]:
        """The run-config options (``fedmgda.config.RunConfig`` fields) its ``build`` receives as
        keywords: those it names in ``run_options`` and those it owns (``own_options``)."""
        return tuple(dict.fromkeys((*(self.cls.run_options or ()), *self.cls.own_options)))

    @property
    def summary(self) -> str:
        """The first line of the class's docstring."""
        return (self.cls.__doc__ or "").strip().split("\n")[0]

    @property
    def proximal(self) -> bool:
        return bool(self.cls.proximal)

    @property
    def needs_pre_round_losses(self) -> bool:
        return bool(self.cls.needs_pre_round_losses)

    @property
    def averages_iterates(self) -> bool:
        return bool(self.cls.averages_iterates)

    @property
    def normalised_updates(self) -> bool:
        return bool(self.cls.normalised_updates)

    @property
    def min_norm_qp(self) -> bool:
        return bool(self.cls.min_norm_qp)

    def resolve(self, hparams: Mapping[str, Any] | None) -> dict[str, float | None]:
        """The hyper-parameters with defaults filled in; one clear error if invalid."""
        hparams = dict(hparams or {})
        unknown = sorted(set(hparams) - set(self.hparams))
        if unknown:
            allowed = ", ".join(self.hparams) or "none"
            raise ConfigError(f"{self.name}: unknown hyper-parameter(s) {', '.join(unknown)}; "
                              f"allowed: {allowed}")
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


def describe(cls: Any, plugin: str | None = None) -> AlgorithmInfo:
    """The facts an algorithm class declares, checked: one ConfigError naming the plug-in
    (``plugin``, its config path) or the built-in class."""
    where = f"plug-in {plugin!r}" if plugin else f"algorithm {getattr(cls, '__qualname__', cls)!r}"
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(f"{where} is not a subclass of fedmgda.algorithms.Algorithm")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"{where}: declare its name as a class attribute, "
                          f"e.g. name = \"fedavgm\"")
    hparams = dict(cls.hparams or {})
    bad = [k for k, v in hparams.items() if not isinstance(v, HParam)]
    if bad:
        raise ConfigError(f"{where}: hparams must map names to fedmgda.algorithms.HParam "
                          f"({', '.join(bad)})")
    implied = tuple(cls.implied or ())
    if set(implied) - set(hparams):
        raise ConfigError(f"{where}: implied names unknown hyper-parameters "
                          f"{sorted(set(implied) - set(hparams))}")
    if plugin and cls.own_options:
        raise ConfigError(f"{where}: own_options is for built-ins (a new run option is a RunConfig "
                          "field); name the run-config options it reads in run_options")
    if cls.proximal and "mu" not in hparams:
        raise ConfigError(f"{where}: a proximal algorithm declares its coefficient as "
                          "hyper-parameter mu")
    info = AlgorithmInfo(cls, plugin)
    _check_build(info, where)
    return info


# the classes whose interface-1 build was announced (once each)
_WARNED_OLD_BUILD: set[type] = set()


def _old_build(info: AlgorithmInfo) -> bool:
    """Whether the class's ``build`` is plug-in interface 1's: it takes ``algorithm=`` (which was
    its AlgorithmInfo), not as a run option it names."""
    param = inspect.signature(info.cls.build).parameters.get("algorithm")
    return (param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
            and "algorithm" not in info.run_options)


def _check_build(info: AlgorithmInfo, where: str) -> None:
    """One ConfigError if ``build`` cannot be called as :func:`make_algorithm` calls it; one
    deprecation (a DeprecationWarning and a line on stderr) per class if it is interface 1's."""
    old = _old_build(info)
    keywords = ["rounds", "num_users", *info.run_options, *(["algorithm"] if old else [])]
    try:
        inspect.signature(info.cls.build).bind({}, **dict.fromkeys(keywords))
    except TypeError as err:
        raise ConfigError(f"{where}: build cannot be called as build(hparams, *, "
                          f"{', '.join(k + '=' for k in keywords)}): "
                          f"{err} (docs/plugins.md §1)") from None
    if old and info.cls not in _WARNED_OLD_BUILD:
        _WARNED_OLD_BUILD.add(info.cls)
        warn_deprecated(f"{where}: build(cls, hparams, *, algorithm, rounds, num_users) is plug-in "
                        "interface 1; since interface 2 build no longer receives algorithm= (the "
                        "facts are the class's own: cls.name, cls.hparams, ...). It still gets it "
                        f"until fedmgda {INTERFACE_1_REMOVED_IN}, "
                        "which removes it: delete `algorithm` from build's parameters "
                        "(docs/plugins.md, \"Interface versions\")", stacklevel=4)


# The built-in algorithms (in the order config/README.md lists them), one module each
# (docs/plugins.md §5)
BUILTIN_CLASSES: tuple[type[Algorithm], ...] = (
    fedavg.FedAvg, fedavg_n.FedAvgN, fedprox.FedProx, qfedavg.QFedAvg, afl.AFL,
    fedmgda.FedMGDA, fedmgda_plus.FedMGDAPlus, mgda_prox.MGDAProx,
)
BUILTIN_ALGORITHMS: Mapping[str, AlgorithmInfo] = MappingProxyType({
    info.name: info for info in map(describe, BUILTIN_CLASSES)})
# the run options the built-ins own (``Algorithm.own_options``): name -> its values, the default
# first
ALGORITHM_OPTIONS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    name: values for cls in BUILTIN_CLASSES for name, values in cls.own_options.items()})

_PLUGINS: dict[str, AlgorithmInfo] = {}  # name -> plug-in, filled by load_plugins


def algorithms() -> dict[str, AlgorithmInfo]:
    """The built-in algorithms and the plug-ins loaded so far."""
    return {**BUILTIN_ALGORITHMS, **_PLUGINS}


def get_algorithm(name: str, plugin: str | None = None) -> AlgorithmInfo:
    """The algorithm called ``name``; ``plugin`` (``path.py:Class``) loads it first if needed."""
    if plugin is not None:
        load_plugins([plugin])
    known = algorithms()
    if name not in known:
        raise ConfigError(f"unknown algorithm {name!r}; known: {', '.join(known)} "
                          f"(a new one is a plug-in named under `plugins:`, docs/plugins.md)")
    return known[name]


def make_algorithm(name: str, hparams: Mapping[str, Any] | None, rounds: int, num_users: int,
                   plugin: str | None = None, **options: str) -> Algorithm:
    """The algorithm ``name`` of a run of ``rounds`` rounds, with validated hyper-parameters.
    ``options``: values of the run-config options it reads (``run_options``), passed to its
    ``build`` (an own option not given: its default); the clients' ``proximal_mu`` is set from a
    proximal algorithm's ``mu``."""
    info = get_algorithm(name, plugin)
    resolved = info.resolve(hparams)
    options = {**{option: values[0] for option, values in info.cls.own_options.items()}, **options}
    if _old_build(info):  # plug-in interface 1 (describe announced it): its AlgorithmInfo, as then
        options["algorithm"] = info
    rule = info.cls.build(resolved, rounds=rounds, num_users=num_users, **options)
    if info.proximal:
        rule.proximal_mu = info.prox_mu(resolved)
    return rule


def import_object(path: str) -> Any:
    """The object at ``path/to/file.py:Name`` (relative to the working directory) or
    ``module:Name``."""
    where, sep, attr = path.rpartition(":")
    if not sep or not where or not attr:
        raise ConfigError(f"plug-in {path!r}: expected path/to/file.py:Class or "
                          "package.module:Class")
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


def load_plugins(paths: Iterable[str]) -> list[AlgorithmInfo]:
    """Load and register plug-in algorithms; each declares the facts :func:`describe` reads."""
    loaded = []
    for path in paths:
        info = describe(import_object(path), plugin=path)
        if info.name in BUILTIN_ALGORITHMS:
            raise ConfigError(f"plug-in {path!r}: {info.name!r} is a built-in algorithm; choose "
                              "another name")
        if info.name in _PLUGINS and _PLUGINS[info.name].plugin != path:
            raise ConfigError(f"plug-in {path!r}: {info.name!r} is already declared by "
                              f"{_PLUGINS[info.name].plugin}")
        _PLUGINS[info.name] = info
        loaded.append(info)
    return loaded


# the least value of each numeric dataset option (its type: its default's); 0 means "all" for
# max_users and max_samples; alpha and beta are synthetic's standard deviations
OPTION_MINIMA = {"num_users": 1, "num_shards": 1, "shard_size": 1, "shards_per_user": 1,
                 "max_users": 0,
                 "max_samples": 0, "data_seed": 0, "alpha": 0, "beta": 0, "dirichlet_alpha": 0,
                 "dirichlet_min_samples": 2}

# F-MNIST's shard settings: (shards, images a shard) of its 60 000 training images. code: the
# authors' code; paper: the paper's text; fedmdfg: zibinpan/FedMDFG fedplat/main.py L33-34 (--SN
# 200, --PN 2) and DataLoader_fashion.py L83 (60 000 // 200 = 300 images a shard), 2 per user
FMNIST_SHARD_SETTINGS = {"code": (300, 200), "paper": (500, 120), "fedmdfg": (200, 300)}


@dataclass(frozen=True)
class Dataset:
    """What the registry and the workflow need to know about a dataset (loaders: fedmgda.data).

    partitions: the partitions it offers (``fedmgda.partitioners.PARTITIONERS``), the default one
        (``default_partition``) among them; whether one depends on the run seed is the
        partitioner's (``is_seeded``).
    offline: generated or shipped with a library, so it needs no download.
    raw_files_of: the dataset whose raw files (``<raw_dir>/<that name>/``) it reads; "" = its own.
    options: its dataset options and their defaults: those its loader and its partitions read
        (a partitioner's ``reads``).
    option_values: for options with a closed set of values, the allowed values.
    presets: options whose value stands for values of other options, expanded before a
        partitioner reads them: ``{option: {value: {other option: its value, ...}}}``
        (F-MNIST's ``shard_setting: code`` is ``num_shards: 300, shard_size: 200``).
    samples: how many samples its shards and iid partitions deal out to users (its training
        file's), known without loading them, so that too many users are caught before any job
        (``size_error``); 0: nothing to check (generated data, natural users).
    """

    name: str
    model: str
    default_partition: str
    partitions: tuple[str, ...]
    offline: bool = False
    description: str = ""
    raw_files_of: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    option_values: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    presets: Mapping[str, Mapping[Any, Mapping[str, Any]]] = field(default_factory=dict)
    samples: int = 0

    def option_error(self, options: Mapping[str, Any] | None) -> str | None:
        """What is wrong with ``options`` (an unknown name, a value outside its set), or None."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            return f"{self.name}: unknown option(s) {unknown}; valid: { dict(self.options) }"
        out = {**self.options, **options}
        for key, allowed in self.option_values.items():
            if out[key] not in allowed:
                return f"{self.name}: option {key}={out[key]!r} not in {list(allowed)}"
        # counts and numbers: typed and ranged here, not in a job's traceback
        for key, least in OPTION_MINIMA.items():
            if key in options:
                kind, value = type(self.options[key]), options[key]
                typed = (isinstance(value, int) if kind is int
                         else isinstance(value, (int, float)) and math.isfinite(value))
                if isinstance(value, bool) or not typed or value < least:
                    what = "an integer" if kind is int else "a finite number"
                    return f"{self.name}: option {key} must be {what} >= {least}, got {value!r}"
        return None

    def partition_error(self, partition: str | None) -> str | None:
        """``partition`` (None: the default) if it is not one the dataset offers, or None."""
        if (partition or self.default_partition) in self.partitions:
            return None
        return f"{self.name}: unknown partition {partition!r}; valid: {list(self.partitions)}"

    def expand(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with each preset option replaced by the options it stands for."""
        out = dict(options)
        for key, table in self.presets.items():
            if key in out:
                if out[key] not in table:
                    raise ConfigError(f"{self.name}: option {key}={out[key]!r} "
                                      f"not in {list(table)}")
                out.update(table[out.pop(key)])
        return out

    def size_error(self, partition: str | None, options: Mapping[str, Any] | None) -> str | None:
        """What makes ``options`` (valid ones, ``option_error``) unusable under ``partition`` (one
        it offers; None: the default), or None: an option value that only another partition
        honours, a combination its partitioner refuses (``check``), or a user left fewer than
        MIN_USER_SAMPLES of the dataset's ``samples``: too many users, or shards that need more
        samples than it has (``size_error`` of the partitioner)."""
        scheme = partition or self.default_partition
        if scheme not in PARTITIONERS:
            return None
        partitioner, out = PARTITIONERS[scheme], self.expand({**self.options, **(options or {})})
        error = options_error(scheme, out, self.options)
        if error:
            return f"{self.name}: {error}"
        return (partitioner.size_error(self.name, self.samples, partitioner.select(out))
                if self.samples else None)

    def user_count(self, partition: str | None, options: Mapping[str, Any] | None) -> int | None:
        """How many users ``partition`` (None: the default) makes under ``options`` (valid ones),
        where that is known before the data are loaded: ``num_users`` of a partitioner that deals
        the samples out to that many (shards, iid), or of a dataset whose loader generates that
        many natural users (synthetic); None where the data decide (writers, roles, domains)."""
        scheme = partition or self.default_partition
        if "num_users" not in self.options or scheme not in PARTITIONERS:
            return None
        if "num_users" in PARTITIONERS[scheme].reads or scheme == "natural":
            return int({**self.options, **(options or {})}["num_users"])
        return None

    def is_seeded(self, partition: str | None, options: Mapping[str, Any] | None = None) -> bool:
        """Whether ``partition`` (None: the default) under ``options`` depends on the run seed (its
        partitioner's ``seeded``); a partition that does not is stored once, with seed 0."""
        partitioner = PARTITIONERS.get(partition or self.default_partition)
        return (partitioner is not None
                and partitioner.is_seeded({**self.options, **(options or {})}))

    @property
    def seeded_partitions(self) -> tuple[str, ...]:
        """The partitions it offers whose partitioner is always seeded (``is_seeded`` with options
        says it for a given run)."""
        return tuple(p for p in self.partitions if p in PARTITIONERS
                     and PARTITIONERS[p].seeded is True)

    @property
    def raw_folder(self) -> str:
        """The folder under the raw-data directory that holds its raw files."""
        return self.raw_files_of or self.name


_SORT = {"sort": SORTS}  # the authors' label sort or a stable one (fedmgda.partitioners.SORTS)
# the dirichlet partition's defaults: NIID-Bench's --beta 0.5 and min_require_size 10 (Li et al.
# 2021, experiments.py), flwr-datasets' min_partition_size 10
_DIRICHLET = {"dirichlet_alpha": 0.5, "dirichlet_min_samples": 10}

DATASETS: Mapping[str, Dataset] = MappingProxyType({d.name: d for d in (
    Dataset("cifar10", "cnn_cifar", "shards", ("shards", "iid", "dirichlet"),
            description="CIFAR-10, 100 users, 500 label-sorted shards of 100, 5 per user",
            options={"num_users": 100, "num_shards": 500, "shard_size": 100, "sort": "stable",
                     **_DIRICHLET},
            option_values=_SORT, samples=50_000),
    Dataset("fmnist", "cnn_fmnist", "shards", ("shards", "iid", "dirichlet"),
            description="Fashion-MNIST, 100 users; code: 300 shards of 200, 3 per user; "
                        "paper text: 500 shards of 120, 5 per user; fedmdfg: 200 shards of 300, 2 "
            "per user",
            options={"num_users": 100, "shard_setting": "code", "sort": "stable",
                     "local_test": "own_shard", **_DIRICHLET},
            option_values={**_SORT, "shard_setting": tuple(FMNIST_SHARD_SETTINGS),
                           "local_test": LOCAL_TESTS},
            presets={"shard_setting": {
                setting: {"num_shards": shards, "shard_size": size}
                for setting, (shards, size) in FMNIST_SHARD_SETTINGS.items()}},
            samples=60_000),
    Dataset("fmnist3", "logreg", "natural", ("natural",), raw_files_of="fmnist",
            description="q-FFL's Fashion-MNIST: classes T-shirt/top, pullover, shirt, one user per "
                        "class, pixels standardised over all training images (fair_flearn "
                        "data/fmnist/create_dataset.py)",
            options={"split": "source"}, option_values={"split": ("source",)}),
    Dataset("femnist", "cnn_femnist", "natural", ("natural",),
            description="TFF federated EMNIST-62, one user per writer (3 400)",
            options={"split": "source", "max_users": 0, "shuffle": False},
            option_values={"split": ("source", "80_10_10"), "shuffle": (False, True)}),
    Dataset("shakespeare", "lstm_shakespeare", "natural", ("natural",),
            description="LEAF Shakespeare, 31 roles (q-FFL subsample), next-character prediction",
            options={"split": "source", "shuffle": False},
            option_values={"split": ("source", "80_10_10"), "shuffle": (False, True)}),
    Dataset("adult", "logreg", "domain", ("domain", "iid"),
            description="UCI Adult, 99 binary features; client 0 = PhD, client 1 = non-PhD",
            options={"shift_by_one": False, "num_users": 2, "clients": "both", "split": "80_10_10"},
            option_values={"shift_by_one": (False, True), "clients": ("both", "phd"),
                           "split": ("80_10_10", "source")}, samples=32_561),
    Dataset("synthetic", "logreg", "natural", ("natural",), offline=True,
            description="q-FFL Synthetic(alpha, beta), one user per generated device",
            options={"alpha": 1.0, "beta": 1.0, "num_users": 30, "data_seed": 0, "max_samples": 500,
                     "split": "80_10_10", "shuffle": False, "sizes": "script"},
            option_values={"split": ("80_10_10",), "shuffle": (False, True),
                           "sizes": ("script", "table4")}),
    Dataset("digits", "mlp_digits", "shards", ("shards", "iid", "dirichlet"), offline=True,
            description="scikit-learn digits (1 797 8x8 images), 20 users x 2 label-sorted shards",
            options={"num_users": 20, "shards_per_user": 2, "sort": "stable", **_DIRICHLET},
            option_values=_SORT, samples=1_797),
)})
# the names of fedmgda.models.MODELS (kept here without torch; tests/test_models.py checks they
# agree)
MODELS = ("cnn_cifar", "cnn_fmnist", "cnn_femnist", "lstm_shakespeare", "logreg", "mlp_digits",
          "mlp_fmnist")
# fedmgda.models.CONVOLUTIONS (the run config's ``conv``, the default first; tests/test_models.py
# checks they agree)
CONVOLUTIONS = ("torch", "im2col")
OFFLINE_DATASETS = tuple(name for name, d in DATASETS.items() if d.offline)
DOWNLOADED_DATASETS = tuple(name for name, d in DATASETS.items() if not d.offline)
RAW_FOLDERS = tuple(dict.fromkeys(d.raw_folder for d in DATASETS.values() if not d.offline))
PARTITIONS = tuple(PARTITIONERS)  # every partition a run config can name (the schema's enum)


def get_dataset(name: str) -> Dataset:
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]

