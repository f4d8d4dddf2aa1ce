"""The registry's schema (``config.schema.yaml``, shipped inside this package) as the one source
of the config's defaults and documentation, and what the Snakefile checks a config against.

- :func:`config_error`: what is wrong with a config, on one line (the Snakefile stops on it).
- :func:`with_defaults`: a config with the defaults of the top-level keys (and of ``report``)
  filled in; the Snakefile and :func:`fedmgda.experiments.expand` both use it.
- :func:`def_defaults`: the defaults of a ``$defs`` object (``resources``, ``runfields``), which
  the code applies where it merges the layers (never filled into one layer).
- :func:`config_docs`: the key tables of ``config/README.md``; ``python -m fedmgda.schema
  [--check] [config/README.md]`` (``make config-docs``) writes or checks them.

PyYAML, and jsonschema (a Snakemake dependency) in ``config_error`` only; no torch.
"""

from __future__ import annotations

import argparse
import copy
import functools
import sys
from pathlib import Path
from typing import Any

import yaml

# package data (pyproject.toml)
SCHEMA_PATH = Path(__file__).resolve().with_name("config.schema.yaml")
README_PATH = Path(__file__).resolve().parents[2] / "config" / "README.md"  # in a source checkout
START, END = "<!-- schema:start -->", "<!-- schema:end -->"


@functools.lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def load_schema() -> dict[str, Any]:
    """A fresh copy of the schema (callers may change it)."""
    return copy.deepcopy(_schema())


def _fill(instance: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    out = dict(instance)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        # inline objects only: a $ref'd one (run fields) is a layer merged with others
        if isinstance(out.get(key), dict) and "properties" in sub and "$ref" not in sub:
            out[key] = _fill(out[key], sub)
    return out


def config_error(config: dict[str, Any]) -> str | None:
    """What is wrong with a registry config under the schema, on one line (the key's path, and
    what its value breaks), or None. A config breaking several rules gets the one jsonschema
    judges most relevant (``best_match``)."""
    import jsonschema

    schema = _schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return None
    where = ".".join(map(str, error.absolute_path)) or "top level"
    return f"{where}: {error.message} (config/README.md describes every key)"


def with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (not changed) with the schema's defaults of absent top-level keys and of the
    inline objects below them (``report.notebook``)."""
    return _fill(config, _schema())


def def_defaults(name: str) -> dict[str, Any]:
    """``{property: default}`` of ``$defs/<name>`` (properties without a default left out)."""
    props = _schema()["$defs"][name]["properties"]
    return {k: copy.deepcopy(v["default"]) for k, v in props.items() if "default" in v}


# --------------------------------------------------------------------------- documentation
def _anchor(title: str) -> str:
    return "#" + "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def _code(value: Any) -> str:
    if isinstance(value, str):
        return f"`{value}`"
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1000)
    return f"`{text.strip().removesuffix('...').strip()}`"


def _bounded(name: str, s: dict[str, Any]) -> str:
    low = (f"{s['minimum']} ≤ " if "minimum" in s else f"{s['exclusiveMinimum']} < "
           if "exclusiveMinimum" in s else "")
    high = (f" ≤ {s['maximum']}" if "maximum" in s else f" < {s['exclusiveMaximum']}"
            if "exclusiveMaximum" in s else "")
    if low and not high:  # "integer ≥ 1" reads better than "1 ≤ integer"
        return (f"{name} {'≥' if 'minimum' in s else '>'} "
                f"{s.get('minimum', s.get('exclusiveMinimum'))}")
    return f"{low}{name}{high}"


def type_text(s: dict[str, Any], defs: dict[str, Any]) -> str:
    """A short, readable type of a subschema (links to the sections of titled objects)."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        target = defs[name]
        if "title" in target and "properties" in target:
            return f"[{target['title']}]({_anchor(target['title'])})"
        return target.get("title") or type_text(target, defs)
    if "enum" in s:
        return ", ".join(_code(v) for v in s["enum"])
    if "const" in s:
        return _code(s["const"])
    for key in ("oneOf", "anyOf"):
        if key in s and "type" not in s:
            return " or ".join(type_text(b, defs) for b in s[key])
    types = s.get("type", "any")
    parts = []
    for t in types if isinstance(types, list) else [types]:
        if t in ("integer", "number"):
            parts.append(_bounded(t, s))
        elif t == "array":
            parts.append("list of " + type_text(s["items"], defs) if "items" in s else "list")
        elif t == "object" and isinstance(s.get("additionalProperties"), dict):
            parts.append("name → " + type_text(s["additionalProperties"], defs))
        elif t == "object":
            parts.append("mapping")
        elif t == "boolean":
            parts.append("bool")
        elif t == "null":
            parts.append("`null`")
        else:
            parts.append(t)
    return " or ".join(parts)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _rows(props: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> list[str]:
    rows = []
    for key, sub in props.items():
        default = _code(sub["default"]) if "default" in sub else ""
        rows.append(f"| `{prefix}{key}` | {_cell(type_text(sub, defs))} | {_cell(default)} | "
                    f"{_cell(sub.get('description', ''))} |")
        if "properties" in sub and "$ref" not in sub:
            rows += _rows(sub["properties"], defs, f"{prefix}{key}.")
    return rows


def _table(props: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    return ["| key | type | default | meaning |", "|---|---|---|---|", *_rows(props, defs)]


def config_docs(schema: dict[str, Any] | None = None) -> str:
    """The generated part of config/README.md: the top-level keys, then one section per titled
    object of ``$defs``, each a table of key, type, default and description."""
    schema = schema or _schema()
    defs = schema["$defs"]
    lines = ["## Top-level keys", "", *_table(schema["properties"], defs)]
    for d in defs.values():
        if "title" not in d or "properties" not in d:
            continue
        lines += ["", f"### {d['title']}", "", _cell(d.get("description", "")), ""]
        if isinstance(d.get("additionalProperties"), dict):
            lines += [f"Other keys: {_cell(type_text(d['additionalProperties'], defs))}.", ""]
        lines += _table(d["properties"], defs)
    return "\n".join(lines + ["", *algorithm_docs()]) + "\n"


def _range(h) -> str:
    low = "(" if h.low_open else "["
    high = "∞)" if h.high == float("inf") else f"{h.high:g}]"
    return f"{low}{h.low:g}, {high}"


def algorithm_docs() -> list[str]:
    """The built-in algorithms of ``fedmgda.catalog`` (a plug-in declares its own:
    docs/plugins.md)."""
    from fedmgda.catalog import BUILTIN_ALGORITHMS

    lines = ["### algorithms", "",
             "A grid entry's `algorithm` and its `hparams` (from src/fedmgda/catalog.py; a "
             "hyper-parameter left out takes its default; *implied* defaults are left out of run "
             "paths).", "",
             "| algorithm | shown as | hyper-parameters: default, range | server rule |",
             "|---|---|---|---|"]
    for a in BUILTIN_ALGORITHMS.values():
        hps = "; ".join(f"`{k}`: {'unset' if h.default is None else f'{h.default:g}'}, {_range(h)}"
                        + (" (implied)" if k in a.implied else "") for k, h in a.hparams.items())
        lines.append(f"| `{a.name}` | {a.display} | {_cell(hps) or '—'} | {_cell(a.summary)} |")
    return lines


def render_readme(text: str, schema: dict[str, Any] | None = None) -> str:
    """``text`` with the block between the schema markers replaced by :func:`config_docs`."""
    head, sep, rest = text.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"no {START} ... {END} block")
    notice = ("<!-- generated from src/fedmgda/config.schema.yaml by `make config-docs`; "
              "edit the schema, not this block -->")
    return f"{head}{START}\n{notice}\n\n{config_docs(schema)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or --check) the key tables of "
                                                 "config/README.md from the config schema.")
    parser.add_argument("readme", nargs="?", default=str(README_PATH))
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not current")
    args = parser.parse_args(argv)
    path = Path(args.readme)
    text = path.read_text()
    new = render_readme(text)
    if args.check:
        if new != text:
            print(f"{path} is out of date with {SCHEMA_PATH.name}: run `make config-docs`",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        path.write_text(new)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
