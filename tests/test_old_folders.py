"""Model folders written before the model section became a class per architecture (RNNConfig,
TransformerConfig) load as they did.

tests/old_folders/ holds the config.yaml of folders that attnmt wrote at commit 4a75cd7, the last
with one flat ModelConfig of both architectures' fields: models trained 2 steps by conftest's
copy_model (an RNN, an RNN with Luong's local attention, an RNN with coverage attention and
csparsemax, a Transformer), speech_helpers.speech_config (a speech model), pair_config (a pairs
model), and `attnmt import` of marian_helpers.marian_folder (a Marian model); the temporary folder
in their paths is written /old-folders. The model section of the first five holds every field of
the flat class: the other architecture's with their defaults, or (the Transformer's, from
toy_config's sizes) with values it never read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from attnmt.core.config import (
    MODEL_TYPES,
    OTHER_TYPES_DEFAULTS,
    Config,
    PairModelConfig,
    RNNConfig,
    TransformerConfig,
    config_from_dict,
    config_to_yaml,
    load_config,
)
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import model_config
from attnmt.seq2seq.model import build_model
from attnmt.speech.model import build_speech_model

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
    # every field of the model section its old value; left out: the other architecture's only
    dropped = set(old["model"]) - set(new["model"])
    assert {key: new["model"][key] for key in old["model"] if key not in dropped} == {
        key: value for key, value in old["model"].items() if key not in dropped
    }
    if isinstance(config.model, PairModelConfig):
        assert not dropped
    else:
        others = set().union(*(s.model_fields for t, s in MODEL_TYPES.items() if t != config.model.type))
        assert dropped <= others - set(type(config.model).model_fields)
        assert set(new["model"]) == set(type(config.model).model_fields)
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
    assert model.ctc is not None and config.model.attention == "location"


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
    assert set(OTHER_TYPES_DEFAULTS) == (set(RNNConfig.model_fields) ^ set(TransformerConfig.model_fields))
    assert OTHER_TYPES_DEFAULTS["d_model"] == 256 and OTHER_TYPES_DEFAULTS["attention"] == "bahdanau"
    assert isinstance(Config.model_fields["model"].default_factory(), dict)
