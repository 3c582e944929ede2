"""Fine-tuning (training.init_from): a new experiment starts from a trained model's weights and
subwords, with its own data, optimizer and steps; what may differ and what may not."""

import filecmp

import pytest
import torch
from safetensors.torch import load_file

from attnmt.core.config import config_from_dict
from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import subword_paths
from attnmt.info import format_info, model_info
from attnmt.training import Trainer
from conftest import pair_config, reverse, toy_config

MODEL = {"embedding_size": 16, "encoder_hidden": 16, "decoder_hidden": 32, "attention_size": 16}
QUIET = {"log": lambda message: None, "progress": False}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny model trained for a few steps on reversed strings of a-e (its last weights, of step 5, not
    its best, of a validation at step 2 or 4)."""
    folder = tmp_path_factory.mktemp("base")
    pairs = [(s, reverse(s)) for s in ("abc", "bcd", "cde", "abcde", "edcba", "aabb", "ddee")]
    config = toy_config(folder, pairs, pairs[:2], model=MODEL, training={"max_steps": 5, "validate_every": 2})
    Trainer(config, **QUIET).train()
    return config.experiment_dir


def fine_tuning_config(folder, base, model=None, training=None, data=None):
    pairs = [(s, s) for s in ("fgh", "ghij", "hij", "fghij")]  # another task, on letters the base never saw
    return toy_config(
        folder,
        pairs,
        pairs[:2],
        model={**MODEL, **(model or {})},
        data=data,
        training={"max_steps": 2, "validate_every": 10, "init_from": str(base), **(training or {})},
    )


def test_it_starts_from_the_weights_and_the_subwords_of_the_model(tmp_path, base):
    lines = []
    config = fine_tuning_config(tmp_path, base)
    trainer = Trainer(config, log=lines.append, progress=False)
    best = load_file(str(base / "best.safetensors"))
    for name, weight in trainer.model.state_dict().items():
        assert torch.equal(weight, best[name]), name  # before its first step: the base model
    for theirs, ours in zip(subword_paths(base, True), subword_paths(config.experiment_dir, True)):
        assert filecmp.cmp(theirs, ours, shallow=False)  # not trained on the new corpus
    assert trainer.train().step == 2  # a new run: step 0, its own optimizer
    assert any(f"fine-tuning the best weights of {base}" in line for line in lines)
    assert not torch.equal(trainer.model.state_dict()["generator.weight"], best["generator.weight"])
    config.training.max_steps = 3  # resumed: from its own checkpoint
    assert Trainer(config, **QUIET).train(resume=True).step == 3
    info = model_info(config.experiment_dir)
    assert info["training"]["fine_tuned_from"] == f"{base} (best)" and "fine-tuned from" in format_info(info)


def test_its_dropout_may_change_and_another_checkpoint_be_chosen(tmp_path, base):
    config = fine_tuning_config(tmp_path, base, model={"dropout": 0.3}, training={"init_checkpoint": "last"})
    trainer = Trainer(config, **QUIET)
    last = load_file(str(base / "last.safetensors"))["model.generator.weight"]
    assert torch.equal(trainer.model.state_dict()["generator.weight"], last)
    assert not torch.equal(load_file(str(base / "best.safetensors"))["generator.weight"], last)


def test_a_path_is_read_from_the_configs_folder(tmp_path, base):
    raw = {
        "experiment_dir": "exp",
        "data": {"train": {"tsv": "train.tsv"}},
        "training": {"max_steps": 1, "init_from": "../" + base.parent.name + "/" + base.name},
    }
    assert config_from_dict(raw, base.parent.parent / "ft").training.init_from == base.resolve()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": {"decoder_hidden": 48}}, "model.decoder_hidden: 48 here, 32 there"),
        ({"model": {"attention": "luong-dot"}}, "model.attention.type: 'luong-dot' here, 'bahdanau' there"),
        (
            {"model": {"attention": {"type": "bahdanau", "normalizer": "sparsemax"}}},
            "model.attention.normalizer: 'sparsemax' here, 'softmax' there",
        ),
        ({"data": {"subwords": {"type": "char", "vocab_size": 41, "joint": True}}}, "data.subwords.vocab_size: 41"),
    ],
)
def test_another_model_or_other_subwords_are_an_error_naming_the_field(tmp_path, base, change, message):
    config = fine_tuning_config(tmp_path, base, **change)
    with pytest.raises(AttnmtError, match=message):
        Trainer(config, **QUIET)


def test_a_missing_folder_other_subwords_in_the_experiment_and_another_task_are_errors(tmp_path, base):
    with pytest.raises(AttnmtError, match="is not a folder"):
        Trainer(fine_tuning_config(tmp_path / "a", base, training={"init_from": str(tmp_path / "none")}), **QUIET)
    with pytest.raises(AttnmtError, match="not a model folder"):
        Trainer(fine_tuning_config(tmp_path / "b", base, training={"init_from": str(tmp_path)}), **QUIET)
    config = fine_tuning_config(tmp_path / "c", base)
    ours = subword_paths(config.experiment_dir, True)[0]
    ours.parent.mkdir(parents=True)
    ours.write_bytes(b"another model")
    with pytest.raises(AttnmtError, match="is not the subword model of"):
        Trainer(config, **QUIET)
    (tmp_path / "d").mkdir()
    pairs = config_from_dict(pair_config(tmp_path / "d", training={"init_from": str(base)}), tmp_path)
    with pytest.raises(AttnmtError, match="cannot start from another model's weights"):
        Trainer(pairs, **QUIET)


def test_held_out_sets_are_drawn_when_attnmt_prepare_copies_the_subwords(tmp_path, base):
    from attnmt.translation.prepare import prepare

    config = fine_tuning_config(tmp_path, base, data={"dev": {"split": 1}, "test": {"split": 1}})
    prepare(config, log=lambda message: None)  # attnmt prepare, then attnmt train
    assert (config.experiment_dir / "splits" / "held-out.json").is_file()
    assert Trainer(config, **QUIET).train().step == 2


def test_a_fine_tuning_run_resumes_without_the_folder_it_started_from(tmp_path, base):
    import shutil

    start = tmp_path / "start"
    shutil.copytree(base, start)
    config = fine_tuning_config(tmp_path / "run", start)
    assert Trainer(config, **QUIET).train().step == 2
    shutil.rmtree(start)  # moved or deleted: the run has its own checkpoint and subwords
    config.training.max_steps = 3
    assert Trainer(config, **QUIET).train(resume=True).step == 3


def test_a_speech_model_is_fine_tuned_on_other_recordings(tmp_path):
    """The synthetic tones of speech_helpers: a model trained on some texts fine-tuned on others,
    with its vocabulary and its global feature statistics (the model's, not the new corpus's)."""
    from speech_helpers import random_texts, speech_config, write_tone_corpus

    texts = random_texts(24, seed=1)
    first = speech_config(
        tmp_path / "first",
        write_tone_corpus(tmp_path / "data", "first", texts[:16]),
        steps=3,
        speech={"conv_channels": 8, "n_mels": 40, "normalize": "global"},
    )
    Trainer(first, **QUIET).train()
    second = speech_config(
        tmp_path / "second",
        write_tone_corpus(tmp_path / "data", "second", texts[16:]),
        steps=2,
        speech={"conv_channels": 8, "n_mels": 40, "normalize": "global", "spec_augment": {"time_masks": 1}},
        training={"init_from": str(first.experiment_dir), "max_steps": 2, "threads": 1},
    )
    trainer = Trainer(second, **QUIET)
    best = load_file(str(first.experiment_dir / "best.safetensors"))
    for name, weight in trainer.model.state_dict().items():
        assert torch.equal(weight, best[name]), name  # the global statistics too
    assert filecmp.cmp(
        first.experiment_dir / "spm" / "tgt.model", second.experiment_dir / "spm" / "tgt.model", shallow=False
    )
    assert trainer.train().step == 2
    changed = speech_config(
        tmp_path / "third",
        second.data.train.tsv,
        steps=2,
        speech={"conv_channels": 8, "n_mels": 32, "normalize": "global"},
        training={"init_from": str(first.experiment_dir)},
    )
    with pytest.raises(AttnmtError, match="speech.n_mels: 32 here, 40 there"):
        Trainer(changed, **QUIET)
