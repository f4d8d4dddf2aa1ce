"""The configuration of one training run, validated before anything is built.

One run = one dataset/partition, one algorithm with its hyper-parameters, one attack, one seed.
The workflow writes these as YAML (``fedmgda train --config run.yaml --out DIR``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedmgda.catalog import (
    ALGORITHM_OPTIONS,
    BUILTIN_ALGORITHMS,
    CONVOLUTIONS,
    DATASETS,
    MODELS,
    AlgorithmInfo,
    get_algorithm,
)
from fedmgda.errors import ConfigError  # also importable from here, as before

# fields that do not change what a run computes: never part of its identity (its run key,
# fedmgda.experiments; its config hash, :func:`config_hash`)
NON_IDENTITY_FIELDS = {"device", "checkpoint_every", "raw_dir", "partition_file", "cuda_graphs",
                       "deterministic", "plugin"}
# metrics.csv columns a run records only when a flag of its config is on (else NaN): column -> flag
RECORDED_ONLY_WITH = {"improved_loss": "track_improvement", "improved_acc": "track_improvement"}

# run-config fields with a fixed set of readings, the default first (docs/protocol-choices.md);
# those an algorithm owns are declared by it (``Algorithm.own_options``: aggregation_weights,
# qffl_loss, ...)
CHOICES: dict[str, tuple[str, ...]] = {
    "sampling": ("uniform", "size"),
    "init": ("torch", "glorot"),
    "conv": CONVOLUTIONS,
    "final_model": ("auto", "last", "average"),
    **ALGORITHM_OPTIONS,
}


# run options that only the algorithms naming them in ``run_options`` read: another algorithm given
# a value other than the default is an error, worded here ({readers}: the built-ins that read it)
SCOPED_OPTIONS: dict[str, str] = {
    "aggregation_weights": "sets the a-priori weights lambda0 of the averaging rules ({readers}); "
                           "{algorithm} weights the updates by its own rule (a plug-in reads the "
                           "participants' train sizes from its RoundContext): use {default}",
    "afl_step_weights": "changes AFL's model step only; {algorithm} is not AFL: leave it at "
                        "{default}",
}


def too_many_clients(clients_per_round: int, dataset: str, users: int) -> str:
    """The error of a ``clients_per_round`` above the run's number of users."""
    return (f"clients_per_round = {clients_per_round} but {dataset} has {users} users in this run; "
            f"use at most {users} (or participation, a fraction of the users)")


@dataclass
class AttackConfig:
    """One malicious user, forced into every round.

    kind "bias":    ``value`` is added to the loss the user reports (what q-FedAvg and AFL consume);
                    its gradient, hence its update, is unchanged.
    kind "scaling": the user's loss is multiplied by ``value``, so are its gradients, its update and
                    the loss it reports.
    """

    kind: str = "none"
    user: int = 0
    value: float = 0.0

    def validate(self) -> None:
        if self.kind not in ("none", "bias", "scaling"):
            raise ConfigError(f"attack.kind: unknown attack {self.kind!r}; choose none, bias or "
                              f"scaling")
        if isinstance(self.user, bool) or not isinstance(self.user, int) or self.user < 0:
            raise ConfigError(f"attack.user must be a user index >= 0, got {self.user!r}")
        if (isinstance(self.value, bool) or not isinstance(self.value, (int, float))
                or not math.isfinite(self.value)):
            raise ConfigError(f"attack.value must be a finite number, got {self.value!r}")
        if self.kind == "scaling" and not self.value > 0:
            raise ConfigError(f"attack.value: a scaling factor must be > 0, got {self.value}")

    @property
    def active(self) -> bool:
        return self.kind != "none"


@dataclass
class RunConfig:
    """Everything that determines one run. Same config + seed -> same metrics on the same device."""

    dataset: str
    algorithm: str
    hparams: dict[str, float] = field(default_factory=dict)
    # a plug-in algorithm's ``path.py:Class`` (fedmgda.catalog.load_plugins)
    plugin: str | None = None
    partition: str | None = None  # None: the dataset's default partition
    dataset_options: dict[str, Any] = field(default_factory=dict)
    raw_dir: str = "resources/raw"
    partition_file: str | None = None
    # local training (the one client update every algorithm shares)
    local_epochs: int = 1
    batch_size: int | str = 10  # an int, or "full" for one full-batch step per epoch
    local_lr: float = 0.01
    momentum: float = 0.5  # the authors' code hard-codes 0.5 (docs/protocol.md §3.2)
    # rounds and sampling
    rounds: int = 100
    # fraction p of users sampled per round: floor(p*m) users, at least 1
    participation: float = 0.1
    clients_per_round: int | None = None  # overrides participation (FEMNIST: 10 per round)
    # participants: "uniform", or "size": probability proportional to train size (fair_flearn)
    sampling: str = CHOICES["sampling"][0]
    attack: AttackConfig = field(default_factory=AttackConfig)
    seed: int = 1
    # evaluation and outputs
    eval_every: int = 1
    # per-user accuracies are stored at rounds t with t % per_user_every == 0
    per_user_every: int = 10
    track_improvement: bool = True  # pre/post-round participant losses (Figures 4, 8, 9)
    # server rule and model: readings of the papers' and codes' choices (docs/protocol-choices.md)
    # averaging rules' lambda0: "uniform" 1/n or "samples" n_i / sum n
    aggregation_weights: str = CHOICES["aggregation_weights"][0]
    # q-FedAvg's F_i: "batch_sum" (main code), "batch_sum_per_sample" (Adult code), "train_mean"
    # (q-FFL code)
    qffl_loss: str = CHOICES["qffl_loss"][0]
    # AFL's gamma_w: the server's step ("server_step") or the clients' lr ("local_lr"),
    # docs/protocol.md §8.11
    afl_gamma_w: str = CHOICES["afl_gamma_w"][0]
    # AFL's model step: updates weighted by "lambda" (paper) or a "uniform" mean (q-FFL code)
    afl_step_weights: str = CHOICES["afl_step_weights"][0]
    # None: the dataset's model (fedmgda.catalog.DATASETS); else a name of fedmgda.models.MODELS
    model: str | None = None
    # initial model: PyTorch's default init, or "glorot" (TensorFlow's, as the q-FFL code)
    init: str = CHOICES["init"][0]
    # the CNNs' convolutions: "torch" (cuDNN, oneDNN) or "im2col" + matrix products; equal up to
    # float rounding
    conv: str = CHOICES["conv"][0]
    # "last" iterate, "average" of all iterates, or "auto": average for AFL (its output), else last
    final_model: str = CHOICES["final_model"][0]
    device: str = "auto"
    checkpoint_every: int = 0  # 0: no checkpoints
    # train a round's clients as one vmap-ed computation; false: one after another (the reference
    # path)
    batched: bool = True
    # CUDA + batched: replay each round's client update as a CUDA graph (same numbers, fewer
    # launches)
    cuda_graphs: bool = True
    # CUDA: deterministic cuDNN algorithms, so a rerun on the same GPU gives identical metrics
    deterministic: bool = True
    # CUDA only: TF32 matmuls/convolutions (faster on Ampere+, ~1e-3 relative error)
    tf32: bool = False

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunConfig:
        if not isinstance(raw, dict):
            raise ConfigError("a run config must be a mapping")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown run config key(s): {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING and f.name not in raw]
        if missing:
            raise ConfigError(f"missing run config key(s): {', '.join(missing)}; give each, e.g. "
                              f"dataset: digits, algorithm: fedavg")
        raw = dict(raw)
        attack = raw.pop("attack", None) or {}
        if not isinstance(attack, dict):
            raise ConfigError("attack must be a mapping with kind, user, value")
        bad = sorted(set(attack) - {"kind", "user", "value"})
        if bad:
            raise ConfigError(f"unknown attack key(s): {', '.join(bad)}")
        cfg = cls(attack=AttackConfig(**attack), **raw)
        cfg.validate()
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        try:
            raw = yaml.safe_load(Path(path).read_text())
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: malformed YAML: {err}") from err
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def _check_algorithm_options(self, info: AlgorithmInfo) -> None:
        """The run options some algorithms read (``AlgorithmInfo.run_options``): a scoped one set
        for an algorithm that does not read it is an error; then the algorithm's own
        ``check_run``."""
        unknown = sorted(set(info.run_options) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ConfigError(f"{self.algorithm}: run_options names unknown run config key(s) "
                              f"{', '.join(unknown)}")
        for name, why in SCOPED_OPTIONS.items():
            default = getattr(type(self), name)
            if getattr(self, name) != default and name not in info.run_options:
                readers = ", ".join(a.name for a in BUILTIN_ALGORITHMS.values()
                                    if name in a.run_options)
                raise ConfigError(f"{name}: {getattr(self, name)} " + why.format(
                    readers=readers, algorithm=self.algorithm, default=default))
        info.cls.check_run(self)

    def validate(self) -> None:
        def positive(name: str, value: float) -> None:
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")

        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError("dataset must be a dataset name")
        for name in ("hparams", "dataset_options"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(f"{name} must be a mapping of names to values, "
                                  f"got {getattr(self, name)!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.dataset in DATASETS:  # (tests inject datasets of their own)
            self._check_dataset()
        info = get_algorithm(self.algorithm, self.plugin)
        info.resolve(self.hparams)
        if self.batch_size != "full":
            if not isinstance(self.batch_size, int) or self.batch_size < 1:
                raise ConfigError(f"batch_size must be a positive integer or 'full', "
                                  f"got {self.batch_size!r}")
        if not isinstance(self.local_epochs, int) or self.local_epochs < 1:
            raise ConfigError(f"local_epochs must be an integer >= 1, got {self.local_epochs!r}")
        positive("local_lr", self.local_lr)
        if not (isinstance(self.momentum, (int, float)) and 0 <= self.momentum < 1):
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        self._check_rounds()
        if self.model is not None and self.model not in MODELS:
            raise ConfigError(f"model must be null (the dataset's model) or one of "
                              f"{', '.join(MODELS)}, got {self.model!r}")
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, "
                                  f"got {getattr(self, name)!r}")
        self._check_algorithm_options(info)
        if self.device not in ("auto", "cpu", "cuda") and not str(self.device).startswith("cuda:"):
            raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        self.attack.validate()

    def _check_dataset(self) -> None:
        """The dataset options, partition and size a registered dataset can take."""
        dataset = DATASETS[self.dataset]
        error = dataset.option_error(self.dataset_options)
        if error:
            raise ConfigError(f"dataset_options: {error}")
        error = dataset.partition_error(self.partition)  # one it offers
        if error:
            raise ConfigError(f"partition: {error}")
        # options it cannot take, too many users
        error = dataset.size_error(self.partition, self.dataset_options)
        if error:
            raise ConfigError(f"dataset_options: {error}")

    def _check_rounds(self) -> None:
        """Rounds, participation, clients per round, and how often a run evaluates and
        checkpoints."""
        if not isinstance(self.rounds, int) or self.rounds < 1:
            raise ConfigError(f"rounds must be an integer >= 1, got {self.rounds!r}")
        if not (isinstance(self.participation, (int, float)) and 0 < self.participation <= 1):
            raise ConfigError(f"participation p must be in (0, 1], got {self.participation!r}")
        if self.clients_per_round is not None and (
            not isinstance(self.clients_per_round, int) or self.clients_per_round < 1
        ):
            raise ConfigError(f"clients_per_round must be an integer >= 1, "
                              f"got {self.clients_per_round!r}")
        if self.clients_per_round is not None and self.dataset in DATASETS:  # before any job
            users = DATASETS[self.dataset].user_count(self.partition, self.dataset_options)
            if users is not None and self.clients_per_round > users:
                raise ConfigError(too_many_clients(self.clients_per_round, self.dataset, users))
        for name in ("eval_every", "per_user_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 0:
            raise ConfigError(f"checkpoint_every must be an integer >= 0, "
                              f"got {self.checkpoint_every!r}")


def config_hash(config: Mapping[str, Any]) -> str:
    """The sha256 of a run config's identity: every :class:`RunConfig` field but
    ``NON_IDENTITY_FIELDS`` (the device, the partition file's path, ...), defaults filled in and
    numbers as floats, not validated. The registry's config of a run key, its run.yaml and the
    trainer's config (summary.json's, and its manifest's hash: ``fedmgda.results.seal``) hash the
    same."""
    identity: dict[str, Any] = {}
    for f in dataclasses.fields(RunConfig):
        if f.name in NON_IDENTITY_FIELDS:
            continue
        if f.name in config:
            identity[f.name] = config[f.name]
        elif f.default is not dataclasses.MISSING:
            identity[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            identity[f.name] = f.default_factory()
    attack = identity.get("attack")
    attack = dataclasses.asdict(attack) if dataclasses.is_dataclass(attack) else dict(attack or {})
    identity["attack"] = {**dataclasses.asdict(AttackConfig()), **attack}
    text = json.dumps(_plain_numbers(identity), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _plain_numbers(value: Any) -> Any:
    """``value`` with every number a float (1 and 1.0 are one config); booleans stay booleans."""
    if isinstance(value, Mapping):
        return {str(k): _plain_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_numbers(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value
