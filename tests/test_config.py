"""Experiment configuration: loading YAML, resolving paths, and errors that name the field."""

from pathlib import Path

import pytest
import yaml

from attnmt.cli import main
from attnmt.core.config import ATTENTION_TYPES, BahdanauConfig, load_config
from attnmt.core.errors import AttnmtError

MINIMAL = {
    "experiment_dir": "runs/exp",
    "data": {"train": {"src": "data/train.de", "tgt": "data/train.en"}},
    "training": {"max_steps": 10},
}


def with_changes(base: dict, **sections) -> dict:
    """A copy of ``base`` with whole sections replaced (None removes the section)."""
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in sections.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def write_config(folder: Path, raw, name="config.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw), encoding="utf-8")
    return path


def config_error(tmp_path, raw) -> str:
    with pytest.raises(AttnmtError) as info:
        load_config(write_config(tmp_path / "cfg", raw))
    return str(info.value)


# ---------------------------------------------------------------- valid configs


def test_minimal_config_loads_with_defaults(tmp_path):
    config = load_config(write_config(tmp_path, MINIMAL))
    assert config.training.max_steps == 10
    assert config.model.attention == BahdanauConfig()
    assert config.data.subwords.type == "bpe" and config.data.subwords.joint is True
    assert config.data.dev is None
    assert config.decoding.beam == 5


def test_relative_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    folder = tmp_path / "experiments" / "de-en"
    path = write_config(
        folder,
        with_changes(
            MINIMAL,
            data={
                "train": {"src": "data/train.de", "tgt": "../shared/train.en"},
                "dev": {"tsv": "dev.tsv"},
            },
        ),
    )
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    config = load_config(path.relative_to(tmp_path))
    base = folder.resolve()
    assert config.experiment_dir == base / "runs" / "exp"
    assert config.data.train.src == base / "data" / "train.de"
    assert config.data.train.tgt == (base / ".." / "shared" / "train.en").resolve()
    assert config.data.dev.tsv == base / "dev.tsv"
    assert config.data.dev.src is None and config.data.dev.tgt is None


def test_absolute_paths_are_kept(tmp_path):
    absolute = tmp_path / "elsewhere" / "corpus.tsv"
    config = load_config(write_config(tmp_path / "cfg", with_changes(MINIMAL, data={"train": {"tsv": str(absolute)}})))
    assert config.data.train.tsv == absolute


@pytest.mark.parametrize("attention", ["none", "bahdanau", "luong-dot", "luong-general", "luong-concat", "location"])
def test_every_attention_name_is_accepted(tmp_path, attention):
    config = load_config(write_config(tmp_path, with_changes(MINIMAL, model={"attention": attention})))
    assert config.model.attention.type == attention
    assert config.model.attention == ATTENTION_TYPES[attention](type=attention)  # its options at their defaults


@pytest.mark.parametrize("limit", [{"max_steps": 5}, {"max_epochs": 1}, {"max_minutes": 0.5}])
def test_any_one_training_limit_is_enough(tmp_path, limit):
    config = load_config(write_config(tmp_path, with_changes(MINIMAL, training=limit)))
    assert config.training.model_dump(include=set(limit)) == limit


# ---------------------------------------------------------------- errors


def test_missing_training_section_is_named(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, training=None))
    assert "training" in message and "required" in message.lower()


def test_missing_train_corpus_is_named(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, data={"max_length": 50}))
    assert "data.train" in message and "required" in message.lower()


def test_missing_experiment_dir_is_named(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, experiment_dir=None))
    assert "experiment_dir" in message


def test_unknown_attention_is_named(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, model={"attention": "foo"}))
    assert "model.attention" in message
    assert "bahdanau" in message  # the allowed values are listed


def test_misspelled_field_is_an_unknown_field_with_its_path(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, model={"atention": "bahdanau"}))
    assert "model.atention: unknown field" in message


@pytest.mark.parametrize(
    "model, expected",
    [
        ({"type": "lstm"}, "model.type: Input should be 'rnn' or 'transformer'"),
        ({"type": ["rnn"]}, "model.type: Input should be 'rnn' or 'transformer'"),
        (
            {"type": "transformer", "attention": "luong-dot"},
            "model.attention: a field of model.type: rnn (this model's type is transformer)",
        ),
        ({"d_model": 512}, "model.d_model: a field of model.type: transformer (this model's type is rnn)"),
        (
            {"share_embeddings": True},
            "model.share_embeddings: a field of model.type: transformer (this model's type is rnn)",
        ),
        ({"type": "transformer", "atention": "x"}, "model.atention: unknown field"),
        ({"type": "transformer", "heads": "4"}, "model.heads: Input should be a valid integer"),
        (
            {"type": "transformer", "attention_normalizer": "csparsemax"},
            "model.attention_normalizer: Value error, csparsemax",
        ),
        (
            {"attention": {"type": "bahdanau", "local": "local-m"}},
            "model.attention.local: an option of attention types luong-dot, luong-general, luong-concat or "
            "luong-location only (this attention is bahdanau)",
        ),
        (
            {"local_attention": "local-m"},
            "model.local_attention: an option of attention types luong-dot, luong-general, luong-concat or "
            "luong-location only (model.attention.local)",
        ),
    ],
)
def test_a_field_of_the_other_model_type_is_named(tmp_path, model, expected):
    """model: is RNNConfig or TransformerConfig by its type; an error names the field, never the class."""
    message = config_error(tmp_path, with_changes(MINIMAL, model=model))
    assert expected in message
    assert "RNNConfig" not in message and "TransformerConfig" not in message


def test_a_field_of_the_other_model_type_at_its_default_is_left_out(tmp_path):
    """(as a config.yaml of an older attnmt has them: one class held both types' fields)"""
    config = load_config(
        write_config(tmp_path, with_changes(MINIMAL, model={"d_model": 256, "heads": 4, "attention": "bahdanau"}))
    )
    assert type(config.model).__name__ == "RNNConfig" and "d_model" not in config.model.model_dump()
    config = load_config(
        write_config(tmp_path, with_changes(MINIMAL, model={"type": "transformer", "attention": "bahdanau"}))
    )
    assert type(config.model).__name__ == "TransformerConfig" and "attention" not in config.model.model_dump()


def test_unknown_nested_field_has_its_dotted_path(tmp_path):
    data = {"train": {"src": "a", "tgt": "b"}, "subwords": {"vocab": 500}}
    message = config_error(tmp_path, with_changes(MINIMAL, data=data))
    assert "data.subwords.vocab: unknown field" in message


def test_unknown_top_level_section(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, optimiser={"lr": 1}))
    assert "optimiser: unknown field" in message


def test_all_problems_are_reported_at_once(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, model={"attention": "foo", "hiden": 3}, training=None))
    for field in ("model.attention", "model.hiden", "training"):
        assert field in message


def test_invalid_value_names_the_field(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, model={"dropout": 1.5}))
    assert "model.dropout" in message


def test_training_without_any_limit_is_refused(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, training={"learning_rate": 0.001}))
    assert "training" in message
    assert "max_steps" in message and "max_epochs" in message and "max_minutes" in message


def test_train_src_without_tgt_is_refused(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, data={"train": {"src": "a"}}))
    assert "data.train" in message and "tgt" in message


def test_train_with_both_forms_is_refused(tmp_path):
    message = config_error(tmp_path, with_changes(MINIMAL, data={"train": {"src": "a", "tgt": "b", "tsv": "c"}}))
    assert "data.train" in message and "not both" in message


def test_invalid_yaml_names_the_file(tmp_path):
    path = write_config(tmp_path, "data: [unclosed\n  training: {max_steps: 3\n", name="broken.yaml")
    with pytest.raises(AttnmtError, match="broken.yaml") as info:
        load_config(path)
    assert "YAML" in str(info.value)


def test_yaml_that_is_not_a_mapping(tmp_path):
    path = write_config(tmp_path, "- just\n- a list\n", name="list.yaml")
    with pytest.raises(AttnmtError, match="list.yaml"):
        load_config(path)


def test_empty_config_file(tmp_path):
    path = write_config(tmp_path, "", name="empty.yaml")
    with pytest.raises(AttnmtError, match="empty.yaml"):
        load_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(AttnmtError, match="no such config file") as info:
        load_config(tmp_path / "nothere.yaml")
    assert "nothere.yaml" in str(info.value)


def test_config_path_that_is_a_directory(tmp_path):
    with pytest.raises(AttnmtError, match="cannot read config"):
        load_config(tmp_path)


# ---------------------------------------------------------------- through the CLI


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "raw, expected",
    [
        (with_changes(MINIMAL, model={"attention": "foo"}), "model.attention"),
        (with_changes(MINIMAL, model={"atention": "bahdanau"}), "model.atention: unknown field"),
        (with_changes(MINIMAL, training=None), "training"),
        (with_changes(MINIMAL, training={"seed": 1}), "max_steps"),
        ("experiment_dir: [a\n", "not valid YAML"),
    ],
)
@pytest.mark.parametrize("command", ["prepare", "train"])
def test_cli_reports_config_errors_without_traceback(tmp_path, capsys, raw, expected, command):
    path = write_config(tmp_path, raw)
    code, err = run_cli(capsys, command, str(path))
    assert code == 2
    assert err.startswith("attnmt: error:")
    assert expected in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing was created


def test_cli_missing_config_file(tmp_path, capsys):
    code, err = run_cli(capsys, "train", str(tmp_path / "missing.yaml"))
    assert code == 2
    assert err.startswith("attnmt: error:") and "missing.yaml" in err and "no such config file" in err
    assert "Traceback" not in err


def test_attention_window_is_checked(tmp_path):
    assert load_config(
        write_config(tmp_path / "ok", with_changes(MINIMAL, decoding={"attention_window": [2, 8]}))
    ).decoding.attention_window == (2, 8)
    message = config_error(tmp_path, with_changes(MINIMAL, decoding={"attention_window": [-1, 8]}))
    assert "decoding.attention_window" in message
    message = config_error(tmp_path, with_changes(MINIMAL, decoding={"attention_window": [2]}))
    assert "decoding.attention_window" in message
    for model in ({"type": "transformer"}, {"attention": "none"}):
        message = config_error(tmp_path, with_changes(MINIMAL, model=model, decoding={"attention_window": [2, 8]}))
        assert "decoding.attention_window is for RNN decoders with attention" in message
