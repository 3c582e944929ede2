"""Training loop: resume equals an uninterrupted run, checkpoints and logs, early stopping, refusals."""

import json

import pytest
import torch
from safetensors.torch import load_file

from attnmt.core.errors import AttnmtError
from attnmt.training import Trainer, train
from attnmt.translation.training import translation_batch
from conftest import random_strings, reverse, toy_config

PAIRS = [(s, reverse(s)) for s in random_strings(300, 3, 8, seed=5)]
DEV = [(s, reverse(s)) for s in random_strings(30, 3, 8, seed=6)]


RNN = {"dropout": 0.2}
# Dropout everywhere, shared embeddings and the warm-up schedule: all of it must resume exactly.
TRANSFORMER = {
    "type": "transformer",
    "d_model": 32,
    "heads": 4,
    "feed_forward": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "dropout": 0.2,
    "attention_dropout": 0.1,
    "share_embeddings": True,
}
NOAM = {"schedule": "noam", "warmup_steps": 5, "adam_betas": [0.9, 0.98]}


def config_for(folder, model=RNN, **training):
    return toy_config(folder, PAIRS, DEV, model=model, training={"validate_every": 7, "log_every": 3, **training})


def weights(folder, name="last.safetensors"):
    return {k: v for k, v in load_file(str(folder / name)).items() if k.startswith("model.")}


@pytest.mark.parametrize("model, schedule", [(RNN, {}), (TRANSFORMER, NOAM)], ids=["rnn", "transformer-noam"])
def test_resume_equals_uninterrupted_run(tmp_path, model, schedule):
    # 14 steps straight, against 7 steps + resume to 14 (an epoch is 10 batches: resuming mid-epoch).
    straight = config_for(tmp_path / "straight", model, max_steps=14, **schedule)
    train(straight, log=lambda m: None, progress=False)

    interrupted = config_for(tmp_path / "resumed", model, max_steps=7, **schedule)
    train(interrupted, log=lambda m: None, progress=False)
    resumed = config_for(tmp_path / "resumed", model, max_steps=14, **schedule)
    state = Trainer(resumed, log=lambda m: None, progress=False).train(resume=True)

    assert state.step == 14 and state.epoch == 1 and state.batch_in_epoch == 4
    a, b = weights(straight.experiment_dir), weights(resumed.experiment_dir)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_experiment_folder_holds_checkpoints_and_metrics(tmp_path):
    config = config_for(tmp_path, max_steps=14)
    train(config, log=lambda m: None, progress=False)
    folder = config.experiment_dir
    for name in ("config.yaml", "spm/joint.model", "best.safetensors", "last.safetensors", "metrics.jsonl"):
        assert (folder / name).is_file(), name
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["type"] == "train"]
    valid_records = [r for r in records if r["type"] == "valid"]
    assert [r["step"] for r in train_records] == [3, 6, 9, 12]
    assert [r["step"] for r in valid_records] == [7, 14]
    for r in valid_records:
        assert {"loss", "perplexity", "bleu", "lr", "best"} <= r.keys()
        assert r["perplexity"] == pytest.approx(2.718281828 ** r["loss"], rel=1e-6)
    assert all(r["tokens_per_s"] > 0 for r in train_records)
    # No pickle anywhere: checkpoints are safetensors.
    assert not list(folder.rglob("*.pt")) and not list(folder.rglob("*.pkl"))


def test_training_again_into_a_trained_folder_is_refused_and_keeps_it(tmp_path):
    config = config_for(tmp_path, max_steps=3)
    train(config, log=lambda m: None, progress=False)
    before = (config.experiment_dir / "last.safetensors").read_bytes()
    with pytest.raises(AttnmtError, match="--resume"):
        train(config, log=lambda m: None, progress=False)
    assert (config.experiment_dir / "last.safetensors").read_bytes() == before


def test_early_stopping_and_learning_rate_decay(tmp_path):
    # With a learning rate this small nothing improves after the first validation.
    config = config_for(
        tmp_path,
        max_steps=200,
        validate_every=2,
        learning_rate=1e-7,
        early_stopping_patience=3,
        lr_decay_patience=0,
        early_stopping_metric="bleu",
        min_learning_rate=0.0,
    )
    state = train(config, log=lambda m: None, progress=False)
    assert state.stopped_early and state.step < 200
    records = [json.loads(x) for x in (config.experiment_dir / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in records if r["type"] == "valid"]
    assert lrs[-1] < lrs[0]


def test_bf16_training_runs_and_learns(tmp_path):
    config = config_for(tmp_path, max_steps=20, precision="bf16", validate_every=20)
    trainer = Trainer(config, log=lambda m: None, progress=False)
    batches = trainer.loop.epoch_batches(0)
    first_loss, tokens = trainer.loop.train_step(translation_batch(trainer.data.train, batches[0]))
    for indices in batches[1:] * 2:
        trainer.loop.train_step(translation_batch(trainer.data.train, indices))
    last_loss, last_tokens = trainer.loop.train_step(translation_batch(trainer.data.train, batches[0]))
    assert last_loss / last_tokens < first_loss / tokens
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # fp32 master weights


def test_time_limit_stops_training(tmp_path):
    config = config_for(tmp_path, max_minutes=0.001, validate_every=1000)
    state = train(config, log=lambda m: None, progress=False)
    assert 1 <= state.step < 50


def test_prepare_refuses_subwords_trained_with_other_settings(tmp_path):
    from attnmt.translation.prepare import prepare

    prepare(config_for(tmp_path, max_steps=1), log=lambda m: None)
    changed = toy_config(
        tmp_path, PAIRS, DEV, data={"subwords": {"type": "bpe", "vocab_size": 30}}, training={"max_steps": 1}
    )
    with pytest.raises(AttnmtError, match="--force"):
        prepare(changed, log=lambda m: None)
    prepare(changed, log=lambda m: None, force=True)  # retrains
    assert "bpe" in (changed.experiment_dir / "spm" / "settings.yaml").read_text()


@pytest.mark.parametrize("model", [RNN, TRANSFORMER], ids=["rnn", "transformer"])
def test_source_padding_of_training_batches_changes_no_loss(tmp_path, model):
    """Training rounds the source width up (masked padding): the loss and its gradients are those
    of the unpadded batch."""
    from attnmt.data.batching import make_batch, training_batch
    from attnmt.seq2seq.training import sequence_loss

    trainer = Trainer(config_for(tmp_path, model), log=lambda m: None, progress=False)
    trainer.model.eval()
    src, tgt = trainer.data.train.src_ids[:9], trainer.data.train.tgt_ids[:9]
    results = []
    for make in (make_batch, training_batch):
        trainer.model.zero_grad()
        batch = make(src, tgt)
        loss = sequence_loss(trainer.model, batch)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]))
    assert training_batch(src, tgt).src.size(1) > make_batch(src, tgt).src.size(1)
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    for plain, padded in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(plain, padded, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("what", ["loss", "gradient norm"])
def test_a_diverging_run_stops_with_a_clear_message_and_keeps_its_last_checkpoint(tmp_path, monkeypatch, capsys, what):
    import attnmt.seq2seq.training as seq2seq_training
    from attnmt.cli import main
    from attnmt.core.config import config_to_yaml

    config = config_for(tmp_path, max_steps=20, checkpoint_every=4)
    calls, loss = [0], seq2seq_training.sequence_loss

    def diverging(model, batch, label_smoothing=0.0, **options):
        calls[0] += 1
        value = loss(model, batch, label_smoothing, **options)
        if calls[0] <= 7:  # the memory check's pass before the first step, then steps 1 to 6
            return value
        if what == "loss":
            return value * float("nan")
        weights = sum(p.sum() for p in model.parameters())
        return value + 1e38 * (weights - weights.detach())  # the same finite loss, an infinite gradient

    monkeypatch.setattr(seq2seq_training, "sequence_loss", diverging)
    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(config))
    assert main(["train", str(path), "--no-progress"]) == 2
    assert f"step 7: the training {what} is " in capsys.readouterr().err
    checkpoint = weights(config.experiment_dir)
    assert all(torch.isfinite(t).all() for t in checkpoint.values())
    records = [json.loads(line) for line in (config.experiment_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) <= 6


def test_bf16_on_a_cpu_without_bf16_units_is_warned_about(tmp_path, monkeypatch):
    from attnmt.core import speed

    monkeypatch.setattr(speed, "cpu_has_bf16", lambda: False)
    lines = []
    Trainer(config_for(tmp_path, max_steps=1, precision="bf16"), log=lines.append, progress=False)
    assert any("without bf16 units" in line and "precision: fp32" in line for line in lines)
    lines.clear()
    Trainer(config_for(tmp_path / "fp32", max_steps=1), log=lines.append, progress=False)
    assert not any("without bf16 units" in line for line in lines)  # (the folder's name holds "bf16")


def test_training_with_an_attention_window_trains_and_decodes_within_it(tmp_path):
    """training.attention_window restricts the attention in training; the model folder decodes with
    it (decoding.attention_window follows unless given)."""
    from attnmt.api import load
    from attnmt.seq2seq.attention import window_mask

    config = config_for(tmp_path, max_steps=10, attention_window=[1, 2])
    trainer = Trainer(config, log=lambda message: None, progress=False)
    assert trainer.loop.loss.window == (1, 2)  # the loss passes it to the model at every batch
    batch = translation_batch(trainer.data.train, list(range(8)))
    _, weights = trainer.model(batch.src, batch.src_lengths, batch.tgt_in, window=trainer.loop.loss.window)
    assert torch.all(weights[:, 0, 3:] == 0)  # the first step: from position 0, at most 2 further
    trainer.train()
    translator = load(config.experiment_dir)
    assert translator.attention_window == (1, 2) and translator.config.decoding.attention_window == (1, 2)
    [t] = translator.translate(["abcdefg"], beam=1)
    weights = torch.as_tensor(t.attention)
    for before, row in zip(weights, weights[1:]):
        inside = window_mask(before[None], torch.ones(1, weights.size(1), dtype=torch.bool), 1, 2)[0]
        assert row[~inside].sum() == 0
