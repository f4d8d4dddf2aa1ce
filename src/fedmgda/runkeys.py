"""A run's identity as text: the canonical run path below ``results/<profile>/runs/``
(``run_key``: ``<setting>/<algorithm>/<hparams>/<attack>/seed<k>``), the partition file stem
(``partition_key``), and the key and label of a table row (``row_key``, ``row_label``); the
short, stable text of numbers and values they are made of (``fmt_num``, ``fmt_value``,
``fmt_display``). The registry (``fedmgda.experiments``) names every run and row with these.

Nothing here imports torch, so the Snakefile parses fast.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

from fedmgda.catalog import AlgorithmInfo, Dataset, get_algorithm, get_dataset
from fedmgda.config import NON_IDENTITY_FIELDS, RunConfig  # no torch import
from fedmgda.errors import ConfigError, RegistryError

# symbols of run fields a grid entry may set (hyper-parameters carry theirs: fedmgda.catalog)
RUN_FIELD_SYMBOL = {"local_lr": "lr", "momentum": "momentum"}

# RunConfig fields (src/fedmgda/config.py) and their defaults; fields that change results but
# are not in the setting's standard name are appended to it when they differ from these.
# (NON_IDENTITY_FIELDS, config.py: the fields that never are part of a run's identity)
RUN_DEFAULTS: dict[str, Any] = {
    f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    for f in dataclasses.fields(RunConfig)
    if f.name not in NON_IDENTITY_FIELDS | {"dataset", "algorithm", "hparams", "attack", "seed"}
}
RUN_FIELDS = (set(RUN_DEFAULTS) | NON_IDENTITY_FIELDS
              | {"dataset", "algorithm", "hparams", "attack", "seed"})
SHORT = {"local_epochs": "k", "momentum": "m", "eval_every": "ev", "per_user_every": "pu",
         "track_improvement": "impr", "qffl_loss": "qloss", "final_model": "final",
         "batched": "batched", "tf32": "tf32", "afl_gamma_w": "gammaw", "sampling": "sampling",
         "aggregation_weights": "aggw", "afl_step_weights": "aflstep", "init": "init",
         "conv": "conv"}


# --------------------------------------------------------------------------- number formatting
def to_number(value: Any) -> float:
    """A float from a YAML value: numbers, or fraction strings such as ``"1/10"`` (paper
    notation)."""
    if isinstance(value, bool):
        raise RegistryError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(Fraction(value.strip()))
        except (ValueError, ZeroDivisionError) as err:
            raise RegistryError(f"expected a number or a fraction like 1/10, "
                                f"got {value!r}") from err
    raise RegistryError(f"expected a number, got {value!r}")


def fmt_num(x: float) -> str:
    """Short, stable text of a number for paths and keys: 0.1 -> '0.1', 2.0 -> '2', 1/3 ->
    '0.333333'."""
    return format(float(x), "g")


def fmt_display(x: float, name: str = "") -> str:
    """A number as the paper prints it: decay factors 1/k as fractions, others plainly."""
    if name == "decay" and 0 < x < 1:
        frac = Fraction(x).limit_denominator(100)
        if frac.numerator == 1 and math.isclose(float(frac), x, rel_tol=1e-6):
            return f"1/{frac.denominator}"
    return fmt_num(x)


def fmt_value(v: Any) -> str:
    """Short, stable text of any value for paths and keys: booleans as 1 / 0, numbers as
    :func:`fmt_num`, anything else as its text without slashes and spaces."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return fmt_num(v)
    return str(v).replace("/", "-").replace(" ", "")


# --------------------------------------------------------------------------- run identity
def hparam_values(algorithm: str, hparams: dict[str, Any] | None) -> dict[str, float]:
    """Hyper-parameters as floats, without the implied defaults (``AlgorithmInfo.implied``)."""
    out = {}
    implied = algorithm_info(algorithm).implied_values
    for k, v in sorted((hparams or {}).items()):
        x = to_number(v)
        if k in implied and math.isclose(x, implied[k]):
            continue
        out[k] = x
    return out


def hparam_dirname(hp: dict[str, float]) -> str:
    return "_".join(f"{k}{fmt_num(v)}" for k, v in sorted(hp.items())) or "default"


def attack_dirname(attack: dict[str, Any]) -> str:
    kind = attack.get("kind", "none")
    if kind == "none":
        return "clean"
    return f"{kind}{fmt_num(to_number(attack.get('value', 0)))}-u{int(attack.get('user', 0))}"


def setting_dirname(cfg: dict[str, Any]) -> str:
    """The folder name of a run's setting:
    ``<dataset>-<partition>_b<b>_lr<lr>_p<p>|n<clients>_T<rounds>[_<other non-default fields>]``."""
    part = cfg.get("partition") or dataset_info(cfg["dataset"]).default_partition
    parts = [f"{cfg['dataset']}-{part}", f"b{cfg.get('batch_size', RUN_DEFAULTS['batch_size'])}",
             f"lr{fmt_num(cfg.get('local_lr', RUN_DEFAULTS['local_lr']))}"]
    if cfg.get("clients_per_round") is not None:
        parts.append(f"n{cfg['clients_per_round']}")
    else:
        parts.append(f"p{fmt_num(cfg.get('participation', RUN_DEFAULTS['participation']))}")
    parts.append(f"T{cfg.get('rounds', RUN_DEFAULTS['rounds'])}")
    standard = {"dataset", "partition", "batch_size", "local_lr", "participation",
                "clients_per_round", "rounds", "algorithm", "hparams", "attack", "seed",
                "dataset_options"}
    for key in sorted(set(cfg) - standard - NON_IDENTITY_FIELDS):
        if key in RUN_DEFAULTS and cfg[key] == RUN_DEFAULTS[key]:
            continue
        parts.append(f"{SHORT.get(key, key)}{fmt_value(cfg[key])}")
    for key, value in sorted((cfg.get("dataset_options") or {}).items()):
        parts.append(f"{key}{fmt_value(value)}")
    return "_".join(parts)


def run_key(cfg: dict[str, Any]) -> str:
    """The run's path below ``results/<profile>/runs/``."""
    hp = hparam_values(cfg["algorithm"], cfg.get("hparams"))
    return "/".join([setting_dirname(cfg), cfg["algorithm"], hparam_dirname(hp),
                     attack_dirname(cfg.get("attack") or {"kind": "none"}), f"seed{cfg['seed']}"])


def partition_key(cfg: dict[str, Any]) -> str:
    """Partition file stem: a partition depends on dataset, scheme, options and (maybe) the seed."""
    options = cfg.get("dataset_options") or {}
    opts = "_".join(f"{k}{fmt_value(v)}" for k, v in sorted(options.items()))
    dataset = dataset_info(cfg["dataset"])
    scheme = cfg.get("partition") or dataset.default_partition
    name = f"{cfg['dataset']}-{scheme}" + (f"_{opts}" if opts else "")
    # its partitioner's ``seeded`` (fedmgda.partitioners)
    seeded = dataset.is_seeded(scheme, options)
    return f"{name}/seed{cfg['seed']}" if seeded else f"{name}/fixed"


def row_key(algorithm: str, hparams: dict[str, Any] | None, entry_run: dict[str, Any] | None,
            attack: dict[str, Any] | None) -> str:
    """The row identity tables match paper rows with: ``"fedmgda_plus decay=0.1 eta=1.5"``.

    Contains the algorithm, its hyper-parameters and the run fields the grid entry itself sets
    (e.g. Table 14's local lr and momentum), sorted, then the attack (``bias=1000``).
    """
    items = {k: fmt_num(v) for k, v in hparam_values(algorithm, hparams).items()}
    for k, v in (entry_run or {}).items():
        items[k] = fmt_value(v)
    key = " ".join([algorithm] + [f"{k}={v}" for k, v in sorted(items.items())])
    if attack and attack.get("kind", "none") != "none":
        key += f" {attack['kind']}={fmt_num(to_number(attack.get('value', 0)))}"
    return key


def row_label(algorithm: str, hparams: dict[str, Any] | None, entry_run: dict[str, Any] | None,
              attack: dict[str, Any] | None) -> str:
    """Human-readable row label, paper notation: ``FedMGDA+ η=1.5, decay=1/10``."""
    raw = dict(hparams or {})
    info = algorithm_info(algorithm)
    bits = []
    order = list(info.hparams)  # the order the algorithm declares them in: "η=1.5, decay=1/10"
    for k, v in sorted(hparam_values(algorithm, hparams).items(),
                       key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order),
                                       kv[0])):
        shown = raw[k] if isinstance(raw.get(k), str) else fmt_display(v, k)
        symbol = info.hparams[k].symbol if k in info.hparams else ""
        bits.append(f"{symbol or k}={shown}")
    for k, v in sorted((entry_run or {}).items()):
        bits.append(f"{RUN_FIELD_SYMBOL.get(k, k)}={fmt_value(v)}")
    label = info.display + (" " + ", ".join(bits) if bits else "")
    if attack and attack.get("kind", "none") != "none":
        label += f" [{attack['kind']} {fmt_num(to_number(attack.get('value', 0)))}]"
    return label


def dataset_info(name: str) -> Dataset:
    try:
        return get_dataset(name)
    except ConfigError as err:
        raise RegistryError(str(err)) from None


def algorithm_info(algorithm: str) -> AlgorithmInfo:
    """The catalog's entry of ``algorithm`` (a built-in, or a plug-in the config loaded)."""
    try:
        return get_algorithm(algorithm)
    except ConfigError as err:
        raise RegistryError(str(err)) from None
