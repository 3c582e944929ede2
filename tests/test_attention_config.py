"""model.attention of an RNN: a section whose type chooses the variant's class (attnmt.core.
attention_sections). Each variant's options are accepted with it and refused with any other, the
error naming the field; the older flat spelling (``attention: location``, ``location_kernel: 5``)
reads into the same section; a model folder's config.yaml, written nested, reads back the same."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from attnmt.core.config import (
    ATTENTION_TYPES,
    ATTENTIONS,
    FLAT_OPTIONS,
    BahdanauConfig,
    Config,
    CoverageConfig,
    LocationConfig,
    LuongConfig,
    NoAttentionConfig,
    RNNConfig,
    ScoredAttentionConfig,
    config_from_dict,
    config_to_yaml,
    load_config,
    option_default,
    types_with,
)
from attnmt.core.errors import AttnmtError

# A value of each option other than its default, valid with the other options of SETTINGS
OPTIONS = {
    "input_feeding": False,
    "local": "local-m",
    "window": 3,
    "channels": 4,
    "kernel": 5,
    "fertility": 2,
    "dim": 4,
    "normalizer": "sparsemax",
    "fertility_bound": 1.5,
}
# What an option needs set beside it to be taken (the choice it belongs to)
NEEDS = {"window": {"local": "local-m"}, "fertility_bound": {"normalizer": "csparsemax"}}
OPTION_OF_FLAT = {option: name for name, option in FLAT_OPTIONS.items()}


def options_of(kind: str) -> list[str]:
    return [name for name in ATTENTION_TYPES[kind].model_fields if name != "type"]


def config(model: dict, tmp_path: Path, saved: bool = False, **sections) -> Config:
    raw = {
        "experiment_dir": str(tmp_path / "exp"),
        "data": {"train": {"tsv": str(tmp_path / "train.tsv")}},
        "model": model,
        "training": {"max_steps": 1, **sections.pop("training", {})},
        **sections,
    }
    return config_from_dict(raw, tmp_path, source="config.yaml", saved=saved)


def error(model: dict, tmp_path: Path, **sections) -> str:
    with pytest.raises(AttnmtError) as raised:
        config(model, tmp_path, **sections)
    message = str(raised.value)
    assert message.startswith("config.yaml: invalid configuration\n")
    return message


def test_every_option_is_spelt_flat_and_valued_here():
    options = {name for section in ATTENTION_TYPES.values() for name in section.model_fields} - {"type"}
    assert options == set(OPTIONS) == set(FLAT_OPTIONS.values())
    assert all(OPTIONS[option] != option_default(option) for option in OPTIONS)


@pytest.mark.parametrize("kind", ATTENTIONS)
def test_a_name_is_the_section_with_its_defaults(tmp_path, kind):
    model = config({"attention": kind}, tmp_path).model
    assert type(model.attention) is ATTENTION_TYPES[kind] and model.attention.type == kind
    assert model.attention == config({"attention": {"type": kind}}, tmp_path).model.attention
    assert all(getattr(model.attention, name) == option_default(name) for name in options_of(kind))


def test_the_default_attention_is_bahdanau(tmp_path):
    assert config({}, tmp_path).model.attention == BahdanauConfig()
    assert config({"attention": {"normalizer": "entmax15"}}, tmp_path).model.attention == BahdanauConfig(
        normalizer="entmax15"
    )
    assert RNNConfig().attention == BahdanauConfig() and RNNConfig(attention="none").attention == NoAttentionConfig()


@pytest.mark.parametrize("kind", ATTENTIONS)
def test_each_option_of_a_variant_is_taken_nested_and_flat(tmp_path, kind):
    for option in options_of(kind):
        given = {**NEEDS.get(option, {}), option: OPTIONS[option]}
        nested = config({"attention": {"type": kind, **given}}, tmp_path).model
        assert getattr(nested.attention, option) == OPTIONS[option]
        spelt_flat = {OPTION_OF_FLAT[name]: value for name, value in given.items()}
        assert config({"attention": kind, **spelt_flat}, tmp_path).model == nested
        assert RNNConfig(attention=kind, **spelt_flat) == nested


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_an_option_is_refused_with_a_variant_without_it_naming_the_field(tmp_path, option):
    owners = types_with(option)
    others = [kind for kind in ATTENTIONS if kind not in owners]
    assert others
    of = "type location" if owners == ["location"] else None
    for kind in others:
        # nested: an error whatever its value (its default too)
        for value in (OPTIONS[option], option_default(option)):
            message = error({"attention": {"type": kind, option: value}}, tmp_path)
            assert f"\n  model.attention.{option}: an option of " in message
            assert message.endswith(f" (this attention is {kind})")
            if of:
                assert f"an option of attention {of} only" in message
        # spelt flat: an error but at its default (an older config.yaml holds every option)
        flat = OPTION_OF_FLAT[option]
        message = error({"attention": kind, flat: OPTIONS[option]}, tmp_path)
        assert f"\n  model.{flat}: an option of " in message
        assert message.endswith(f" (model.attention.{option})")
        default = config({"attention": kind, flat: option_default(option)}, tmp_path).model
        assert default.attention == ATTENTION_TYPES[kind](type=kind)


def test_the_errors_say_which_types_have_the_option(tmp_path):
    message = error({"attention": {"type": "bahdanau", "window": 3, "kernel": 5, "dim": 2}}, tmp_path)
    assert message.splitlines()[1:] == [
        "  model.attention.window: an option of attention types luong-dot, luong-general, luong-concat or "
        "luong-location only (this attention is bahdanau)",
        "  model.attention.kernel: an option of attention type location only (this attention is bahdanau)",
        "  model.attention.dim: an option of attention type coverage only (this attention is bahdanau)",
    ]
    message = error({"attention": "none", "attention_normalizer": "entmax15"}, tmp_path)
    assert message.splitlines()[1:] == [
        "  model.attention_normalizer: an option of every attention type but none (model.attention.normalizer)"
    ]
    assert error({"attention": {"type": "location", "kernal": 5}}, tmp_path).splitlines()[1:] == [
        "  model.attention.kernal: unknown field"
    ]


@pytest.mark.parametrize(
    "attention, field, says",
    [
        ({"type": "luong-dot", "window": 3}, "window", "only with local: local-m or local-p"),
        ({"type": "bahdanau", "fertility_bound": 1.5}, "fertility_bound", "only with normalizer: csparsemax"),
        ({"type": "coverage", "normalizer": "entmax15", "fertility_bound": 3.0}, "fertility_bound", "here entmax15"),
        ({"type": "luong-general", "normalizer": "csparsemax", "local": "local-p"}, "local", "global attention"),
        ({"type": "coverage", "fertility": 2, "dim": 4}, "dim", "not with fertility (here 2)"),
        ({"type": "coverage", "normalizer": "csparsemax", "dim": 4}, "dim", "not with normalizer csparsemax"),
        ({"type": "location", "kernel": 4}, "kernel", "must be odd"),
        ({"type": "location", "kernel": 0}, "kernel", "greater than 0"),
        ({"type": "coverage", "fertility": 101}, "fertility", "less than or equal to 100"),
        ({"type": "luong-dot", "window": 0, "local": "local-m"}, "window", "greater than 0"),
        ({"type": "bahdanau", "normalizer": "softermax"}, "normalizer", "'csparsemax'"),
        ({"type": "luong-dot", "input_feeding": "no"}, "input_feeding", "valid boolean"),
    ],
)
def test_each_variant_checks_its_own_options_naming_the_field(tmp_path, attention, field, says):
    message = error({"attention": attention}, tmp_path)
    assert f"\n  model.attention.{field}: " in message and says in message
    flat = {OPTION_OF_FLAT.get(k, k) if k != "type" else "attention": v for k, v in attention.items()}
    assert f"\n  model.attention.{field}: " in error(flat, tmp_path)  # (spelt flat: the same error)


def test_the_attention_type_is_checked(tmp_path):
    for attention in ("dot", {"type": "dot"}, 5, {"type": 5}, ["bahdanau"]):
        message = error({"attention": attention}, tmp_path)
        assert message.splitlines()[1].startswith("  model.attention.type: Input should be 'none', 'bahdanau',")
    with pytest.raises(ValueError, match="ScoredAttentionConfig is not the section of attention type location"):
        ScoredAttentionConfig(type="location")  # (what the variants share is no section of its own)
    with pytest.raises(ValueError, match="Input should be 'bahdanau'"):
        BahdanauConfig(type="location")


def test_an_option_given_both_ways_is_an_error(tmp_path):
    message = error({"attention": {"type": "coverage", "fertility": 2}, "coverage_fertility": 2}, tmp_path)
    assert "coverage_fertility and attention.fertility are one option, given twice" in message
    # flat options go into a nested section that lacks them
    model = config({"attention": {"type": "coverage", "fertility": 2}, "attention_normalizer": "sparsemax"}, tmp_path)
    assert model.model.attention == CoverageConfig(fertility=2, normalizer="sparsemax")


def test_a_transformer_has_no_attention_section(tmp_path):
    message = error({"type": "transformer", "attention": {"type": "bahdanau"}}, tmp_path)
    assert "model.attention: a field of model.type: rnn (this model's type is transformer)" in message
    message = error({"type": "transformer", "location_kernel": 5}, tmp_path)
    assert "model.location_kernel: a field of model.type: rnn (this model's type is transformer)" in message
    transformer = config({"type": "transformer", "attention_normalizer": "entmax15", "input_feeding": True}, tmp_path)
    assert transformer.model.attention_normalizer == "entmax15"  # (its own field; input_feeding: the default)


# What every variant's section holds away from its defaults, as configs set them
SETTINGS = {
    "none": {},
    "bahdanau": {"normalizer": "csparsemax", "fertility_bound": 1.5},
    "luong-dot": {"input_feeding": False, "local": "local-m", "window": 3, "normalizer": "sparsemax"},
    "luong-general": {"local": "local-p", "window": 2},
    "luong-concat": {"input_feeding": False, "normalizer": "entmax15"},
    "luong-location": {"normalizer": "csparsemax", "fertility_bound": 1.0},
    "location": {"channels": 4, "kernel": 5},
    "coverage": {"fertility": 2, "normalizer": "csparsemax", "fertility_bound": 3.0},
}


def test_every_variant_is_set():
    assert list(SETTINGS) == list(ATTENTIONS)


def flat_layout(model: dict) -> dict:
    """A model section as 2c61382 wrote it into config.yaml: ``attention: NAME`` and every option of
    every variant beside it, those of the others at their defaults (or at values they left unused)."""
    attention = model["attention"]
    options = {name: attention.get(option, option_default(option)) for name, option in FLAT_OPTIONS.items()}
    return {**{k: v for k, v in model.items() if k != "attention"}, "attention": attention["type"], **options}


@pytest.mark.parametrize("kind", ATTENTIONS)
def test_a_saved_folder_round_trips(tmp_path, kind):
    """A model folder's config.yaml, written nested, reads back the same as a folder's and as a new
    config; written in 2c61382's flat layout (every option of every variant), it reads the same too."""
    ours = config({"attention": {"type": kind, **SETTINGS[kind]}, "attention_size": 16}, tmp_path)
    assert all(getattr(ours.model.attention, name) == value for name, value in SETTINGS[kind].items())
    text = config_to_yaml(ours)
    written = yaml.safe_load(text)
    assert written["model"]["attention"] == {"type": kind, **ours.model.attention.model_dump(exclude={"type"})}
    (tmp_path / "config.yaml").write_text(text, encoding="utf-8")
    for saved in (True, False):
        again = load_config(tmp_path / "config.yaml", saved=saved)
        assert again.model == ours.model and again.model_dump(mode="json") == ours.model_dump(mode="json")
    # the flat layout, with options of the other variants at values they left unused (a saved folder's)
    attention = written["model"]["attention"]
    unused = {name: OPTIONS[option] for name, option in FLAT_OPTIONS.items() if option not in attention}
    old = {**written, "model": {**flat_layout(written["model"]), **unused}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False), encoding="utf-8")
    assert load_config(tmp_path / "config.yaml", saved=True).model == ours.model
    if unused:  # (not a folder's: those options are errors)
        with pytest.raises(AttnmtError, match="an option of attention"):
            load_config(tmp_path / "config.yaml")


def test_the_checks_across_sections_read_the_attention(tmp_path):
    local = {"attention": {"type": "luong-dot", "local": "local-m"}}
    assert "model.attention.local local-m already keeps each step to its own window (model.attention.window)" in (
        error(local, tmp_path, decoding={"attention_window": [1, 2]})
    )
    assert "model.attention none has none" in error(
        {"attention": "none"}, tmp_path, training={"guided_alignment": {"links": "eflomal"}}
    )
    message = error(
        {"attention": {"type": "bahdanau", "normalizer": "sparsemax"}},
        tmp_path,
        training={"guided_alignment": {"links": "eflomal"}},
    )
    assert "cannot train model.attention.normalizer: sparsemax" in message
    assert "model.attention: none" in error({"attention": "none"}, tmp_path, training={"coverage_loss": 1.0})
    assert config({"attention": "location"}, tmp_path, decoding={"attention_window": [1, 2]}).decoding.attention_window


def test_names_in_words():
    assert RNNConfig(attention={"type": "luong-general", "local": "local-p"}).attention_name == (
        "luong-general local-p (D=10)"
    )
    assert RNNConfig(attention={"type": "coverage", "fertility": 2, "normalizer": "csparsemax"}).attention_name == (
        "coverage (fertility N=2) csparsemax (fertility 2)"
    )
    assert RNNConfig(attention={"type": "coverage", "dim": 3}).attention_name == "coverage (NN-based, d=3)"
    assert LocationConfig(kernel=5).name == "location" and LuongConfig(type="luong-dot").name == "luong-dot"


def test_the_flat_spellings_table_of_docs_config_is_the_codes():
    """docs/config.md's table of the older spelling (``| spelt in the model section | in
    model.attention | of the types |``) is FLAT_OPTIONS, each row naming the types that have it."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "config.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = lines.index("| spelt in the model section | in `model.attention` | of the types |")
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        flat, nested, types = (cell.strip() for cell in line.strip("|").split("|"))
        rows[flat.strip("`")] = (nested.strip("`"), types)
    assert {flat: nested for flat, (nested, _) in rows.items()} == FLAT_OPTIONS
    for flat, (option, types) in rows.items():
        owners = types_with(option)
        if len(owners) == len(ATTENTIONS) - 1:
            assert types == f"every type but `{(set(ATTENTIONS) - set(owners)).pop()}`", flat
        elif all(kind.startswith("luong-") for kind in owners) and len(owners) == 4:
            assert types == "`luong-*`", flat
        else:
            assert types == ", ".join(f"`{kind}`" for kind in owners), flat
