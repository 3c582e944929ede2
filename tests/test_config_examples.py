"""The configs users copy from load: every file of configs/ (a whole config, or a variant's partial
config merged over the experiments' base as attnmt compare merges it), every YAML example of the
README and the guides that is a config or part of one, and the variants of the documented `attnmt
compare` commands; all in this version's spelling, an RNN's attention options in model.attention
(not in the model section as before model.attention was a section: that spelling still reads, for
older configs and model folders, tests/test_old_folders.py and tests/test_attention_config.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnmt.compare.variants import BaseConfig, grid, parse_variant, read_overrides_file
from attnmt.core.config import FLAT_OPTIONS, Config, config_from_dict, load_config, parse_yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))
E1 = ROOT / "configs" / "experiments" / "e1-de-en.yaml"
GUIDES = [ROOT / "README.md", *sorted(path for path in (ROOT / "docs").glob("*.md"))]
YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)
# A config's sections around a partial example
MINIMAL = {"experiment_dir": "runs/example", "data": {"train": {"tsv": "corpus.tsv"}}, "training": {"max_steps": 1}}


def flat_spelling(raw: dict) -> set[str]:
    """The attention options that an RNN's model section of ``raw`` spells as its own fields."""
    model = raw.get("model")
    if raw.get("task") == "pairs" or not isinstance(model, dict) or model.get("type", "rnn") != "rnn":
        return set()
    return set(model) & set(FLAT_OPTIONS)


def examples() -> list[tuple[str, dict]]:
    """(where, the example) of every YAML block of the guides that is a mapping of config sections,
    but those with placeholders ("...")."""
    found = []
    for path in GUIDES:
        text = path.read_text(encoding="utf-8")
        for match in YAML_BLOCK.finditer(text):
            block = match.group(1)
            raw = parse_yaml(block, str(path))
            placeholders = "..." in re.sub(r"#.*", "", block)
            if not isinstance(raw, dict) or not set(raw) <= set(Config.model_fields) or placeholders:
                continue
            line = text[: match.start()].count("\n") + 1
            found.append((f"{path.relative_to(ROOT)}:{line}", raw))
    return found


def test_the_examples_are_found():
    where = [name.split(":")[0] for name, _ in examples()]
    assert {"README.md", "docs/config.md", "docs/speech.md"} <= set(where)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_config_file_loads(path):
    raw = read_overrides_file(path)
    assert not flat_spelling(raw)
    if "experiment_dir" in raw:
        assert load_config(path).model.type in ("rnn", "transformer", "decomposable")
    else:  # a variant's partial config (attnmt compare --variant NAME=FILE), merged over the experiments' base
        assert BaseConfig(E1).with_overrides(raw).model.type == raw["model"].get("type", "rnn")


@pytest.mark.parametrize("where, raw", examples(), ids=[name for name, _ in examples()])
def test_every_config_example_of_the_guides_loads(tmp_path, where, raw):
    assert not flat_spelling(raw), where
    whole = {**MINIMAL, **raw}  # (the sections it lacks)
    limits = {"max_steps", "max_epochs", "max_minutes"}
    if isinstance(whole["training"], dict) and not limits & set(whole["training"]):
        whole["training"] = {**whole["training"], "max_steps": 1}
    config_from_dict(whole, tmp_path, source=where)


# The variants of the commands of docs/experiments.md and benchmarks/experiments.sh, as written there
VARIES = [
    ["model.attention.type=luong-dot,luong-general", "model.attention.input_feeding=true,false"],
    ["model.attention.type=luong-dot,luong-general,luong-concat", "model.attention.input_feeding=true,false"],
]
NO_FEED = "model.attention.input_feeding=false"
VARIANTS = [
    f"dot:model.attention.type=luong-dot,{NO_FEED}",
    "none:model.attention=none",
    "bahdanau:model.attention=bahdanau",
    "location:model.attention=location",
    f"global-location:model.attention.type=luong-location,{NO_FEED}",
    f"local-p-general:model.attention.type=luong-general,model.attention.local=local-p,{NO_FEED}",
    f"local-m-general-D3:model.attention.type=luong-general,model.attention.local=local-m,model.attention.window=3,"
    f"{NO_FEED}",
    "bahdanau-sparsemax:model.attention.type=bahdanau,model.attention.normalizer=sparsemax",
    f"luong-general-entmax15:model.attention.type=luong-general,model.attention.normalizer=entmax15,{NO_FEED}",
    "coverage-fertility:model.attention.type=coverage,model.attention.fertility=2",
    "coverage-nn:model.attention.type=coverage,model.attention.dim=10",
    "coverage-loss:model.attention=coverage,training.coverage_loss=1",
    "bahdanau-csparsemax-1:model.attention.type=bahdanau,model.attention.normalizer=csparsemax,"
    "model.attention.fertility_bound=1",
    "transformer=configs/experiments/transformer.yaml",
    "transformer-entmax=configs/experiments/transformer.yaml:model.attention_normalizer=entmax15",
]


@pytest.mark.parametrize("text", VARIANTS)
def test_the_documented_variants_load(text, monkeypatch):
    monkeypatch.chdir(ROOT)
    variant = parse_variant(text)
    config = BaseConfig(E1).with_overrides(variant.overrides)
    model = variant.overrides["model"]
    attention = model.get("attention")
    if config.model.type == "rnn":
        given = attention if isinstance(attention, dict) else {"type": attention}
        assert config.model.attention.model_dump(include=set(given)) == given


@pytest.mark.parametrize("varies", VARIES)
def test_the_documented_grids_load(varies):
    variants = grid(varies)
    assert [variant.name for variant in variants][:2] == [
        "attention=luong-dot,input_feeding=true",
        "attention=luong-dot,input_feeding=false",
    ]
    for variant in variants:
        config = BaseConfig(E1).with_overrides(variant.overrides)
        assert config.model.attention.input_feeding == variant.overrides["model"]["attention"]["input_feeding"]
        assert config.model.attention_size == 256  # (E1's, for every variant)


def test_a_variant_of_another_attention_keeps_the_options_of_its_type():
    """Over a base whose attention has options, a variant of another attention type keeps those of
    its type (as a variant of another model type keeps the fields of its type); options merge into
    an attention given by name."""
    base = BaseConfig(E1)
    base.raw["model"]["attention"] = {"type": "luong-dot", "input_feeding": False, "local": "local-m", "window": 3}
    general = base.with_overrides({"model": {"attention": {"type": "luong-general"}}}).model.attention
    assert (general.type, general.input_feeding, general.local, general.window) == (
        "luong-general",
        False,
        "local-m",
        3,
    )
    location = base.with_overrides({"model": {"attention": {"type": "location", "kernel": 5}}}).model.attention
    assert location.model_dump() == {
        "type": "location",
        "normalizer": "softmax",
        "fertility_bound": 2.0,
        "channels": 10,
        "kernel": 5,
    }
    assert base.with_overrides({"model": {"attention": "bahdanau"}}).model.attention.type == "bahdanau"
    base.raw["model"]["attention"] = "luong-dot"
    variant = parse_variant("x:model.attention=luong-general,model.attention.input_feeding=false")
    assert variant.overrides == {"model": {"attention": {"type": "luong-general", "input_feeding": False}}}
    feeding = base.with_overrides({"model": {"attention": {"input_feeding": False}}}).model.attention
    assert (feeding.type, feeding.input_feeding) == ("luong-dot", False)


def test_the_documented_commands_are_among_these():
    """The variants above are those the guides and benchmarks/experiments.sh write (so that a new
    one written there in another spelling is looked at here)."""
    written = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8") + (
        ROOT / "benchmarks" / "experiments.sh"
    ).read_text(encoding="utf-8")
    options = set(re.findall(r"model\.([a-z_.]+)=", written))
    tested = {name for text in VARIANTS + sum(VARIES, []) for name in re.findall(r"model\.([a-z_.]+)=", text)}
    assert options <= tested
