"""Protocol variants: the choices the paper leaves open, as named readings of run-config fields.

The catalog (``reference/protocol_variants.yaml``) names each ambiguity of docs/protocol.md §8 that
can move a number, the run-config field it sets, the runs it concerns and its readings, each with
its source. An experiment picks one reading per variant (``variants: {afl_gamma_w: local_lr}``);
:func:`apply_readings` writes the chosen values into a run config, leaving runs a variant does not
concern untouched (so they stay one run). Nothing here imports torch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml


class VariantError(ValueError):
    """An unknown variant or reading; the message lists the known ones."""


@dataclass(frozen=True)
class Reading:
    name: str
    value: Any
    source: str


@dataclass(frozen=True)
class Variant:
    name: str
    question: str
    protocol: str
    field: str  # a run-config key, or dataset_options.<option>
    datasets: tuple[str, ...]  # empty: every dataset
    algorithms: tuple[str, ...]  # empty: every algorithm
    not_algorithms: tuple[str, ...]
    readings: dict[str, Reading]

    def concerns(self, cfg: dict[str, Any]) -> bool:
        """Whether this variant changes the run ``cfg`` at all."""
        return ((not self.datasets or cfg["dataset"] in self.datasets)
                and (not self.algorithms or cfg["algorithm"] in self.algorithms)
                and cfg["algorithm"] not in self.not_algorithms)

    def reading(self, name: str) -> Reading:
        if name not in self.readings:
            raise VariantError(f"variant {self.name}: unknown reading {name!r}; readings: "
                               f"{', '.join(self.readings)}")
        return self.readings[name]

    def value_for(self, cfg: dict[str, Any], reading: str) -> Any:
        """``reading``'s value for the run ``cfg``: one value, or one per algorithm (a mapping
        with a ``default``)."""
        value = self.reading(reading).value
        if isinstance(value, dict):
            return value.get(cfg["algorithm"], value["default"])
        return value

    def apply(self, cfg: dict[str, Any], reading: str) -> dict[str, Any]:
        """A copy of ``cfg`` with this variant's field set to ``reading``'s value (when it concerns
        the run)."""
        value = self.value_for(cfg, reading)
        if not self.concerns(cfg):
            return cfg
        out = copy.deepcopy(cfg)
        section, _, option = self.field.partition(".")
        if option:
            out[section] = {**(out.get(section) or {}), option: value}
        else:
            out[section] = value
        return out


@cache
def catalog() -> dict[str, Variant]:
    """Every protocol variant, by name, in the catalog's order."""
    text = resources.files("fedmgda").joinpath("reference", "protocol_variants.yaml").read_text()
    out = {}
    for name, spec in yaml.safe_load(text).items():
        scope = spec.get("applies_to") or {}
        readings = {str(r): Reading(str(r), body["value"], body["source"])
                    for r, body in spec["readings"].items()}
        out[name] = Variant(name, spec["question"], str(spec["protocol"]), spec["field"],
                            tuple(scope.get("datasets", ())), tuple(scope.get("algorithms", ())),
                            tuple(scope.get("not_algorithms", ())), readings)
    return out


def get_variant(name: str) -> Variant:
    variants = catalog()
    if name not in variants:
        raise VariantError(f"unknown protocol variant {name!r}; known: {', '.join(variants)}")
    return variants[name]


def check_readings(choices: dict[str, str]) -> None:
    """Every chosen variant and reading exists (one clear error otherwise)."""
    for name, reading in choices.items():
        get_variant(name).reading(str(reading))


def apply_readings(cfg: dict[str, Any], choices: dict[str, str]) -> dict[str, Any]:
    """``cfg`` with every chosen reading applied, in the catalog's order."""
    for name, reading in choices.items():
        cfg = get_variant(name).apply(cfg, str(reading))
    return cfg
