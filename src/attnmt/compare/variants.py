"""The variants of a comparison and their configs: a grid (``--vary FIELD=V1,V2``, every
combination) and/or a list (``--variant NAME:FIELD=V,FIELD=V`` or ``--variant NAME=OVERRIDES.yaml``),
each a partial config merged over the base config (``BaseConfig``).

A variant's name is the name of its folder in --out, so it is checked as a file name; the fields
that every variant must share (``SHARED_DATA_FIELDS``: the experiment folder and the corpora) are
refused in a variant's overrides, so that every variant is trained and scored on the same data.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from attnmt.core.config import ATTENTION_TYPES, MODEL_TYPES, Config, config_from_dict, load_config, parse_yaml
from attnmt.core.errors import AttnmtError

FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# the same for every variant
SHARED_DATA_FIELDS = ("experiment_dir", "data.train", "data.extra_train", "data.dev", "data.test")


@dataclass
class Variant:
    name: str
    overrides: dict = field(default_factory=dict)  # a partial config, merged over the base

    @property
    def folder(self) -> str:
        return re.sub(r"[^A-Za-z0-9._=+-]+", "_", self.name)


def check_name(name: str):
    """A variant's name names its folder in --out: it must be a plain file name."""
    if not name.strip() or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise AttnmtError(
            f"variant name {name!r}: a variant's name is the name of its folder in --out, so it must be "
            "a plain file name (not empty, not starting with '.', without '/' or '\\')"
        )


def check_variants(variants: list[Variant]):
    """Something to compare, under names that are plain file names and differ (as folder names too:
    two variants must never share a folder in --out)."""
    if not variants:
        raise AttnmtError("nothing to compare: give variants (--vary FIELD=V1,V2 and/or --variant ...)")
    names = [v.name for v in variants]
    for name in names:
        check_name(name)
    if len(set(names)) < len(names) or len({v.folder for v in variants}) < len(variants):
        raise AttnmtError(f"variant names must differ (as folder names too): {names}")


def check_shared_fields(variants: list[Variant]):
    """No variant overrides the fields every variant shares: the comparison would not be on the same data."""
    for variant in variants:
        shared = [f for f in touched_fields(variant.overrides) if f.startswith(SHARED_DATA_FIELDS)]
        if shared:
            raise AttnmtError(
                f"variant {variant.name}: {', '.join(shared)} must be the same for every variant "
                "(set them in the config)"
            )


def merged(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` merged in, section by section (a value that is not a mapping
    replaces); an attention given by name (``attention: luong-dot``) is the section of that type
    (``{type: luong-dot}``) that options merge into (``model.attention.input_feeding=false``)."""
    out = dict(base)
    for key, value in overrides.items():
        if key == "attention" and isinstance(out.get(key), str) and isinstance(value, dict):
            out[key] = {"type": out[key]}
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def assignment(text: str, where: str) -> dict:
    """ "model.attention=bahdanau" -> {"model": {"attention": "bahdanau"}} (the value read as YAML)."""
    name, equals, value = text.partition("=")
    if not equals or not FIELD.fullmatch(name.strip()):
        raise AttnmtError(f"{where}: expected FIELD=VALUE (e.g. model.attention=bahdanau), got {text!r}")
    result: Any = _yaml_value(value, where)
    for key in reversed(name.strip().split(".")):
        result = {key: result}
    return result


def attention_over(base, changes: dict):
    """model.attention of a variant whose overrides give some of its fields (``changes``, a
    mapping) over the base config's (``base``: a variant's name, or a section): of the base's
    options, those of the variant's type (that of ``changes``, or else the base's), with
    ``changes`` on top; as a variant of another model type keeps the fields of its type."""
    base = {"type": base} if isinstance(base, str) else base
    if not isinstance(base, dict):
        return changes
    kind = changes.get("type", base.get("type", "bahdanau"))
    section = ATTENTION_TYPES.get(kind) if isinstance(kind, str) else None
    kept = {k: v for k, v in base.items() if k != "type" and (section is None or k in section.model_fields)}
    return {"type": kind, **kept, **changes}


def _yaml_value(text: str, where: str):
    try:
        return parse_yaml(text, where) if text.strip() else ""
    except yaml.YAMLError as e:
        raise AttnmtError(f"{where}: {text!r} is not a value ({e})") from None


def _label(field_name: str, value) -> str:
    """``attention=none`` of ``model.attention=none``; ``attention=none`` of ``model.attention.type=none`` too."""
    if field_name.strip() == "model.attention.type":
        field_name = "model.attention"
    return f"{field_name.rsplit('.', 1)[-1]}={json.dumps(value) if not isinstance(value, str) else value}"


def grid(varies: list[str]) -> list[Variant]:
    """Every combination of the values of each ``FIELD=V1,V2,...``."""
    axes = []
    for text in varies:
        name, equals, values = text.partition("=")
        if not equals or not values:
            raise AttnmtError(f"--vary {text}: expected FIELD=V1,V2,...")
        axes.append([(name.strip(), value) for value in values.split(",")])
    variants = []
    for combination in itertools.product(*axes):
        overrides: dict = {}
        for name, value in combination:
            overrides = merged(overrides, assignment(f"{name}={value}", f"--vary {name}"))
        label = ",".join(_label(name, _yaml_value(value, name)) for name, value in combination)
        variants.append(Variant(label, overrides))
    return variants


def parse_variant(text: str) -> Variant:
    """``NAME:FIELD=V,FIELD=V`` (values may not hold ",FIELD="), ``NAME=OVERRIDES.yaml``, or both:
    ``NAME=OVERRIDES.yaml:FIELD=V,...`` (the fields set over the file's)."""
    name, colon, rest = text.partition(":")
    if colon and "=" not in name:
        return Variant(name.strip(), _inline(rest, name))
    name, equals, path = text.partition("=")
    if not equals or not name.strip():
        raise AttnmtError(f"--variant {text}: expected NAME:FIELD=VALUE,... or NAME=OVERRIDES.yaml")
    path, colon, rest = path.partition(":")
    overrides = read_overrides_file(Path(path))
    return Variant(name.strip(), merged(overrides, _inline(rest, name)) if colon else overrides)


def _inline(text: str, name: str) -> dict:
    """The overrides of ``FIELD=V,FIELD=V``."""
    overrides: dict = {}
    for part in re.split(r",(?=\s*[A-Za-z_][A-Za-z0-9_.]*=)", text):
        overrides = merged(overrides, assignment(part, f"--variant {name}"))
    return overrides


def read_overrides_file(path: Path) -> dict:
    """A YAML file of config sections as written (a partial config: a variant's overrides, or the
    base config that they merge over)."""
    try:
        raw = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    except OSError as e:
        raise AttnmtError(f"{path}: cannot read the variant's overrides: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise AttnmtError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise AttnmtError(f"{path}: expected a mapping of config sections (a partial config)")
    return raw


def touched_fields(overrides: dict, prefix: str = "") -> list[str]:
    """The dotted fields an override sets."""
    out = []
    for key, value in overrides.items():
        name = f"{prefix}{key}"
        out += touched_fields(value, name + ".") if isinstance(value, dict) else [name]
        out += [name] if isinstance(value, dict) and not value else []
    return out


class BaseConfig:
    """The config file of a comparison, which every variant's overrides merge over: checked as a
    whole config (``config``) and kept as written (``raw``), so that a variant's config is the file
    with its overrides, not the file's defaults filled in and then overridden."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config = load_config(self.path)  # checks the file (and names what is wrong)
        self.raw = read_overrides_file(self.path)  # as written: variants merge over it
        if not self.config.data.test:
            raise AttnmtError(f"{self.path}: no test set to compare on (data.test)")

    def with_overrides(self, overrides: dict, data: dict | None = None) -> Config:
        """The base config with ``overrides`` merged in and the corpora of ``data`` (train, dev, test) put in."""
        raw = merged(self.raw, overrides)
        model, changes = self.raw.get("model"), overrides.get("model")
        kind = changes.get("type") if isinstance(changes, dict) else None
        if isinstance(model, dict) and kind in MODEL_TYPES and kind != model.get("type", "rnn"):
            # a variant of another architecture: of the base's model section, the fields of its type
            raw["model"] = {**{k: v for k, v in model.items() if k in MODEL_TYPES[kind].model_fields}, **changes}
        attention = changes.get("attention") if isinstance(changes, dict) else None
        if isinstance(model, dict) and isinstance(attention, dict) and "attention" in model:
            raw["model"]["attention"] = attention_over(model["attention"], attention)
        if data is not None:
            raw["data"] = {**raw["data"], **data}
        return config_from_dict(raw, self.path.resolve().parent, str(self.path))
