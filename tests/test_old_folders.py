"""Model folders written before the model section became a class per architecture (RNNConfig,
TransformerConfig), and before an RNN's attention became a section of its own (model.attention),
load as they did.

tests/old_folders/ holds the config.yaml of folders that attnmt wrote at commit 4a75cd7, the last
with one flat ModelConfig of both architectures' fields: models trained 2 steps by conftest's
copy_model (an RNN, an RNN with Luong's local attention, an RNN with coverage attention and
csparsemax, a Transformer), speech_helpers.speech_config (a speech model), pair_config (a pairs
model), and `attnmt import` of marian_helpers.marian_folder (a Marian model); the temporary folder
in their paths is written /old-folders. The model section of the first five holds every field of
the flat class: the other architecture's with their defaults, or (the Transformer's, from
toy_config's sizes) with values it never read.

tests/old_folders/flat-attention/ holds those that attnmt wrote at commit 2c61382, the last whose
model section spelt the attention's options as its own fields (``attention: location``,
``location_kernel: 5``): a model of every attention variant, and one with options its attention did
not use (which that version accepted), each with what that version built of it (the weights'
shapes, the attention's settings, sums of a forward pass: write_flat_attention.py, run then).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from attnmt.core.config import (
    ATTENTION_TYPES,
    FLAT_OPTIONS,
    BahdanauConfig,
    MODEL_TYPE_FIELDS,
    MODEL_TYPES,
    OTHER_TYPES_DEFAULTS,
    Config,
    PairModelConfig,
    RNNConfig,
    TransformerConfig,
    config_from_dict,
    config_to_yaml,
    load_config,
    option_default,
)
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import model_config
from attnmt.seq2seq.model import build_model
from attnmt.speech.model import build_speech_model
from old_folders import write_flat_attention

OLD = Path(__file__).parent / "old_folders"
KINDS = {
    "rnn": RNNConfig,
    "rnn-luong-local": RNNConfig,
    "rnn-coverage": RNNConfig,
    "transformer": TransformerConfig,
    "speech": RNNConfig,
    "pairs": PairModelConfig,
    "marian-import": TransformerConfig,
}


def old_folder(tmp_path: Path, name: str) -> tuple[Path, dict]:
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(OLD / f"{name}.yaml", folder / "config.yaml")
    return folder, yaml.safe_load((OLD / f"{name}.yaml").read_text(encoding="utf-8"))


def flat(model: dict) -> dict:
    """A model section as dumped (model_dump) in the flat spelling of the attention's options
    (``attention: NAME`` and its options beside it), as the older versions wrote it."""
    attention = model.get("attention")
    if not isinstance(attention, dict):
        return model
    options = {name: attention[option] for name, option in FLAT_OPTIONS.items() if option in attention}
    return {**model, "attention": attention["type"], **options}


def written(new, old, folder: Path) -> bool:
    """``new`` holds what ``old`` wrote (attnmt import writes some fields of a section, not all; its
    paths are read from the folder)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(key in new and written(new[key], old[key], folder) for key in old)
    return new == old or (isinstance(old, str) and new == str(folder / old))


def test_every_old_folder_is_here():
    assert sorted(path.stem for path in OLD.glob("*.yaml")) == sorted(KINDS)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_an_old_folder_loads_as_it_did(tmp_path, name):
    folder, old = old_folder(tmp_path, name)
    config = model_config(folder)
    assert type(config.model) is KINDS[name]
    new = config.model_dump(mode="json")
    # every field of the model section its old value; left out: the other architecture's and the
    # options of the attention variants but its own
    spelt = flat(new["model"])
    dropped = set(old["model"]) - set(spelt)
    assert {key: spelt[key] for key in old["model"] if key not in dropped} == {
        key: value for key, value in old["model"].items() if key not in dropped
    }
    if isinstance(config.model, PairModelConfig):
        assert not dropped
    else:
        others = set().union(*(MODEL_TYPE_FIELDS[t] for t in MODEL_TYPES if t != config.model.type))
        assert dropped <= (others - MODEL_TYPE_FIELDS[config.model.type]) | set(FLAT_OPTIONS)
        assert set(new["model"]) == set(type(config.model).model_fields)
    if isinstance(config.model, RNNConfig):  # of the options, those its variant lacks
        lacks = {
            name for name, option in FLAT_OPTIONS.items() if option not in type(config.model.attention).model_fields
        }
        assert dropped & set(FLAT_OPTIONS) == lacks & set(old["model"])
    # and the other sections as they were (experiment_dir: the folder, wherever it is now)
    for section in set(old) - {"model", "experiment_dir"}:
        assert written(new[section], old[section], folder), section
    assert config.experiment_dir == folder


@pytest.mark.parametrize("name", sorted(KINDS))
def test_an_old_folder_written_again_reads_as_a_new_config(tmp_path, name):
    folder, _ = old_folder(tmp_path, name)
    config = model_config(folder)
    (folder / "config.yaml").write_text(config_to_yaml(config), encoding="utf-8")
    again = load_config(folder / "config.yaml")  # (not as a saved folder's: no field to leave out)
    assert again.model == config.model
    assert again.model_dump(mode="json", exclude={"experiment_dir"}) == config.model_dump(
        mode="json", exclude={"experiment_dir"}
    )


@pytest.mark.parametrize("name", ["rnn", "rnn-luong-local", "rnn-coverage", "transformer", "marian-import"])
def test_an_old_folder_builds_its_model(tmp_path, name):
    folder, old = old_folder(tmp_path, name)
    model = build_model(model_config(folder).model, 40, 40)
    assert model.config.type == old["model"]["type"]


def test_an_old_speech_folder_builds_its_model(tmp_path):
    folder, _ = old_folder(tmp_path, "speech")
    config = model_config(folder)
    model = build_speech_model(config.model, config.speech, 40)
    assert model.ctc is not None and config.model.attention.type == "location"


def test_new_configs_keep_to_their_type(tmp_path):
    """Outside a model folder, a field of the other architecture is an error naming it, unless it is
    at that architecture's default (as every config.yaml of an older attnmt has them)."""
    _, old = old_folder(tmp_path, "transformer")
    with pytest.raises(AttnmtError) as error:
        config_from_dict(old, tmp_path, source="transformer.yaml")
    message = str(error.value)
    assert message.startswith("transformer.yaml: invalid configuration")
    for field in ("embedding_size", "encoder_hidden", "decoder_hidden", "attention_size"):
        assert f"model.{field}: a field of model.type: rnn (this model's type is transformer)" in message
    assert "model.attention:" not in message  # (bahdanau: the default)
    _, old = old_folder(tmp_path, "rnn")
    assert type(config_from_dict(old, tmp_path).model) is RNNConfig  # all the Transformer's at their defaults
    old["model"]["d_model"] = 512
    with pytest.raises(
        AttnmtError, match=r"model\.d_model: a field of model\.type: transformer \(this model's type is rnn\)"
    ):
        config_from_dict(old, tmp_path)


def test_the_other_types_fields_and_defaults():
    assert MODEL_TYPE_FIELDS["rnn"] == set(RNNConfig.model_fields) | set(FLAT_OPTIONS)
    assert set(OTHER_TYPES_DEFAULTS) == MODEL_TYPE_FIELDS["rnn"] ^ MODEL_TYPE_FIELDS["transformer"]
    assert "attention_normalizer" not in OTHER_TYPES_DEFAULTS  # (a Transformer's field, an RNN's old spelling)
    assert OTHER_TYPES_DEFAULTS["d_model"] == 256 and OTHER_TYPES_DEFAULTS["attention"] == "bahdanau"
    assert OTHER_TYPES_DEFAULTS["location_kernel"] == 31 and OTHER_TYPES_DEFAULTS["input_feeding"] is True
    assert isinstance(Config.model_fields["model"].default_factory(), dict)


# ---------------------------------------------------------------- written at 2c61382 (flat attention)

FLAT = OLD / "flat-attention"
FLAT_KINDS = sorted(path.stem for path in FLAT.glob("*.yaml"))


def test_the_flat_attention_folders_are_here():
    assert FLAT_KINDS == sorted(write_flat_attention.MODELS)
    assert all((FLAT / f"{name}.json").is_file() for name in FLAT_KINDS)


def flat_folder(tmp_path: Path, name: str) -> tuple[Path, dict, dict]:
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(FLAT / f"{name}.yaml", folder / "config.yaml")
    old = yaml.safe_load((FLAT / f"{name}.yaml").read_text(encoding="utf-8"))
    return folder, old, json.loads((FLAT / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", FLAT_KINDS)
def test_a_flat_attention_folder_loads_as_it_did(tmp_path, name):
    folder, old, _ = flat_folder(tmp_path, name)
    config = model_config(folder)
    new = config.model_dump(mode="json")
    assert new["training"].pop("memory_check") is True  # (added since: its default)
    assert {section: new[section] for section in old if section not in ("model", "experiment_dir")} == {
        section: value for section, value in old.items() if section not in ("model", "experiment_dir")
    }
    spelt = flat(new["model"])
    if config.model.type == "transformer":
        assert spelt == old["model"]
        return
    # the options of its variant as they were, in model.attention; those of the others left out
    attention = type(config.model.attention)
    assert config.model.attention.type == old["model"]["attention"]
    kept = {key for key in old["model"] if key not in FLAT_OPTIONS or FLAT_OPTIONS[key] in attention.model_fields}
    assert set(spelt) == kept
    assert {key: spelt[key] for key in kept} == {key: old["model"][key] for key in kept}


@pytest.mark.parametrize("name", FLAT_KINDS)
def test_a_flat_attention_folder_builds_the_same_model(tmp_path, name):
    """The model built from the folder's config is the one that version built: the same weights
    (names, shapes, and with the same seed the same values: the same scores and weights of a
    forward pass), the same decoder path and the same attention settings; its name the same."""
    folder, _, record = flat_folder(tmp_path, name)
    config = model_config(folder)
    model = write_flat_attention.built(config)
    found = write_flat_attention.structure(model)
    assert found == {key: record[key] for key in found}
    forward = write_flat_attention.forward(model)
    assert forward.keys() == record["forward"].keys()
    for key, value in forward.items():
        assert (value is None) == (record["forward"][key] is None), key
        assert value is None or value == pytest.approx(record["forward"][key], rel=1e-5, abs=1e-6), key
    assert getattr(config.model, "attention_name", None) == record["attention_name"]


@pytest.mark.parametrize("name", FLAT_KINDS)
def test_a_flat_attention_folder_written_again_reads_the_same(tmp_path, name):
    """Written again by this version (model.attention nested), the folder's config reads the same,
    as a folder's and as a new config."""
    folder, _, _ = flat_folder(tmp_path, name)
    config = model_config(folder)
    text = config_to_yaml(config)
    if config.model.type == "rnn":
        assert isinstance(yaml.safe_load(text)["model"]["attention"], dict)
    (folder / "config.yaml").write_text(text, encoding="utf-8")
    for saved in (True, False):
        again = load_config(folder / "config.yaml", saved=saved)
        assert again.model == config.model
        assert again.model_dump(mode="json") == config.model_dump(mode="json")


@pytest.mark.parametrize("name", FLAT_KINDS)
def test_the_config_a_flat_attention_folder_came_from_reads_as_the_folder(name):
    """The config that 2c61382 wrote the folder of (its attention's options spelt flat) reads today,
    not as a folder's config, as the folder does; but for the options of other variants that it set
    (2c61382 took them and left them unused): each is an error naming it, and without them it does."""
    model = write_flat_attention.MODELS[name]
    kind = model.get("attention", "bahdanau") if model.get("type", "rnn") == "rnn" else None
    unused = [  # (an option at its default is left out, as an older config.yaml has them all)
        key
        for key, value in model.items()
        if kind
        and key in FLAT_OPTIONS
        and FLAT_OPTIONS[key] not in ATTENTION_TYPES[kind].model_fields
        and value != option_default(FLAT_OPTIONS[key])
    ]
    raw = write_flat_attention.raw_config(name, model)
    if unused:
        with pytest.raises(AttnmtError) as error:
            config_from_dict(raw, Path("/"))
        assert all(f"model.{key}: an option of attention" in str(error.value) for key in unused)
        raw = write_flat_attention.raw_config(name, {k: v for k, v in model.items() if k not in unused})
    ours = config_from_dict(raw, Path("/"))
    text = (FLAT / f"{name}.yaml").read_text(encoding="utf-8")
    folder = config_from_dict(yaml.safe_load(text), Path("/"), saved=True)
    assert ours.model_dump(mode="json") == folder.model_dump(mode="json")


def test_options_an_attention_left_unused_are_errors_in_a_new_config(tmp_path):
    """The folder's config of a Bahdanau model with options of other variants (which 2c61382 took
    and left unused) loads as a folder's; as a new config, each of them is an error naming it."""
    folder, old, _ = flat_folder(tmp_path, "bahdanau-unused-options")
    assert type(model_config(folder).model.attention) is BahdanauConfig
    with pytest.raises(AttnmtError) as error:
        config_from_dict(old, tmp_path, source="config.yaml")
    message = str(error.value)
    for name, option, types in (
        ("input_feeding", "input_feeding", "types luong-dot, luong-general, luong-concat or luong-location"),
        ("location_kernel", "kernel", "type location"),
        ("location_channels", "channels", "type location"),
        ("local_window", "window", "types luong-dot, luong-general, luong-concat or luong-location"),
    ):
        assert f"  model.{name}: an option of attention {types} only (model.attention.{option})" in message
    assert "coverage_fertility" not in message  # (0: its default)
    assert message.count("\n") == 4
