"""Export of a Transformer to CTranslate2: the exported model translates as attnmt does."""

import pytest
import torch

import attnmt
from attnmt.cli import main
from attnmt.seq2seq.decoding import length_penalty, max_output_lengths
from attnmt.training import train
from conftest import random_strings, require, toy_config

try:  # an optional dependency (the [test] and [ct2] extras): its absence must not stop the collection of the others
    import ctranslate2
except ImportError:
    ctranslate2 = None

pytestmark = pytest.mark.slow  # every test here trains models (or starts processes that do)


@pytest.fixture(autouse=True)
def _needs_ctranslate2():
    """Skipped without ctranslate2 (failed under ATTNMT_STRICT=1, as in CI)."""
    require(ctranslate2 is not None, "pip install ctranslate2 (attnmt[ct2] or attnmt[test])")


def trained(folder, **model):
    """A tiny model trained for 60 steps to reverse strings (a few seconds): enough for outputs
    of varied lengths, most ending in </s> before attnmt's length limit."""
    src = random_strings(500, 3, 8, seed=1)
    config = toy_config(
        folder,
        [(s, s[::-1]) for s in src],
        model=model,
        training={"max_steps": 60, "validate_every": 1000, "learning_rate": 0.005, "threads": 1},
        data={"subwords": {"type": "char", "vocab_size": 40, "joint": model.get("share_embeddings", True)}},
    )
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


def transformer(folder, **changes):
    return trained(
        folder,
        **{
            "type": "transformer",
            "d_model": 32,
            "heads": 4,
            "feed_forward": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            **changes,
        },
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"norm": "pre", "positions": "sinusoidal", "share_embeddings": True},
        {"norm": "post", "positions": "learned", "share_embeddings": False, "tie_embeddings": True},
        {"norm": "pre", "positions": "learned", "share_embeddings": False},
        # Marian's (attnmt import): unscaled embeddings, positions in halves, swish
        {"norm": "post", "positions": "sinusoidal-halves", "scale_embeddings": False, "activation": "silu"},
    ],
    ids=["pre-sinusoidal-shared", "post-learned-tied", "pre-learned-separate", "marian-like"],
)
def test_ctranslate2_greedy_equals_attnmt_greedy(tmp_path, changes):
    model_dir = transformer(tmp_path, **changes)
    out = tmp_path / "ct2"
    assert main(["export", str(model_dir), "--ct2", str(out)]) == 0
    ours = attnmt.load(model_dir)
    theirs = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    texts = random_strings(30, 3, 8, seed=5)
    ids = ours.src_subwords.encode(texts)
    limits = max_output_lengths(
        torch.tensor([len(s) + 1 for s in ids]),
        ours.config.decoding.max_length_ratio,
        ours.config.decoding.max_length_offset,
    )
    ended = 0
    for text, source_ids, limit in zip(texts, ids, limits):
        [t] = ours.translate([text], beam=1)
        # CTranslate2 adds </s> to the source itself (add_source_eos) and leaves it out of the output.
        # At its limit attnmt writes </s> (the only token allowed there); CTranslate2 stops after
        # max_decoding_length tokens without one: the same tokens, one fewer allowed.
        [result] = theirs.translate_batch(
            [ours.src_subwords.pieces(source_ids)],
            beam_size=1,
            return_scores=True,
            length_penalty=0,
            max_decoding_length=limit - 1,
        )
        assert t.tokens[-1] == "</s>" and len(t.tokens) <= limit
        assert result.hypotheses[0] == t.tokens[:-1], text
        if len(t.tokens) < limit:  # ended by the model: the same log-probability, </s> included
            ended += 1
            log_prob = t.score * length_penalty(len(t.tokens), ours.config.decoding.length_penalty)
            [scored] = theirs.score_batch([ours.src_subwords.pieces(source_ids)], [t.tokens[:-1]])
            assert sum(scored.log_probs) == pytest.approx(log_prob, abs=2e-3, rel=1e-3)
            # (CTranslate2's step-by-step search computes swish a little apart from its own scoring,
            # which is attnmt's: a score 0.2-0.6 % away, the same tokens)
            if changes.get("activation") != "silu":
                assert result.scores[0] == pytest.approx(log_prob, abs=2e-3, rel=1e-3)
    assert ended >= 20  # the comparison covers finished translations, not only cut ones


def test_int8_export_scores_as_ctranslate2s_own_int8_of_the_float_export(tmp_path):
    """Weights stored as int8 (smaller; the float position table is most of this tiny model), and
    the same scores as CTranslate2 quantizing the float32 export itself when loading it: the int8
    export is the float model, quantized. (How far int8 scores are from float32 ones depends on
    the CPU's int8 kernels, and on a barely trained model with d_model 32 it can exceed a nat:
    the float32 export is what must equal attnmt, and does, in the test above.)"""
    model_dir = transformer(tmp_path, share_embeddings=True)
    assert main(["export", str(model_dir), "--ct2", str(tmp_path / "fp32")]) == 0
    assert main(["export", str(model_dir), "--ct2", str(tmp_path / "int8"), "--quantization", "int8"]) == 0
    assert (tmp_path / "int8" / "model.bin").stat().st_size < 0.75 * (tmp_path / "fp32" / "model.bin").stat().st_size
    ours = attnmt.load(model_dir)
    texts = random_strings(30, 3, 8, seed=5)
    sources = [ours.src_subwords.pieces(s) for s in ours.src_subwords.encode(texts)]
    targets = [t.tokens[:-1] if t.tokens[-1] == "</s>" else t.tokens for t in ours.translate(texts, beam=1)]
    scores = {
        folder: [
            sum(r.log_probs)
            for r in ctranslate2.Translator(str(tmp_path / folder), device="cpu", compute_type="int8").score_batch(
                sources, targets
            )
        ]
        for folder in ("int8", "fp32")
    }
    assert scores["int8"] == pytest.approx(scores["fp32"], abs=1e-4)
    float_scores = ctranslate2.Translator(str(tmp_path / "fp32"), device="cpu").score_batch(sources, targets)
    assert scores["int8"] != pytest.approx([sum(r.log_probs) for r in float_scores], abs=1e-4)  # int8 did run


def test_export_of_an_rnn_is_a_clear_error(tmp_path, capsys):
    model_dir = trained(tmp_path, attention="bahdanau")
    assert main(["export", str(model_dir), "--ct2", str(tmp_path / "ct2")]) == 2
    err = capsys.readouterr().err
    assert "attnmt: error:" in err and "Transformer models only" in err and "RNN" in err
    assert not (tmp_path / "ct2").exists()


def test_export_of_a_sparse_transformer_is_a_clear_error(tmp_path, capsys):
    model_dir = transformer(tmp_path, attention_normalizer="entmax15")
    assert main(["export", str(model_dir), "--ct2", str(tmp_path / "ct2")]) == 2
    err = capsys.readouterr().err
    assert "attends with entmax15 (model.attention_normalizer)" in err and "softmax only" in err
    assert not (tmp_path / "ct2").exists()


def test_export_does_not_overwrite(tmp_path, capsys):
    model_dir = transformer(tmp_path)
    (tmp_path / "ct2").mkdir()
    assert main(["export", str(model_dir), "--ct2", str(tmp_path / "ct2")]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["export", str(model_dir), "--ct2", str(tmp_path / "ct2"), "--force"]) == 0
    assert (tmp_path / "ct2" / "model.bin").is_file()
    assert main(["export", str(model_dir), "--ct2", str(tmp_path / "ct2"), "--force", "--checkpoint", "averaged"]) == 2
    assert "attnmt average" in capsys.readouterr().err  # the weights asked for, which do not exist here


def test_an_exported_transformer_takes_a_tag_as_its_first_source_piece(tmp_path):
    """A model trained with a tag (data.extra_train) translates in CTranslate2 with the tag's piece
    before the source's, as attnmt's translate(tag=...) puts it."""
    from test_extra_corpora import extra_config

    config = extra_config(
        tmp_path,
        training={"max_steps": 20},
        model={
            "type": "transformer",
            "d_model": 16,
            "heads": 2,
            "feed_forward": 32,
            "encoder_layers": 1,
            "decoder_layers": 1,
        },
    )
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    assert main(["export", str(config.experiment_dir), "--ct2", str(tmp_path / "ct2")]) == 0
    ours = attnmt.load(config.experiment_dir)
    theirs = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", compute_type="float32")
    for text in ("abc", "bcde", "cd"):
        [t] = ours.translate([text], beam=1, tag="<BT>")
        pieces = t.source_tokens[:-1]  # "<BT>", then the text's pieces (CTranslate2 adds "</s>" itself)
        assert pieces[0] == "<BT>"
        [limit] = max_output_lengths(
            torch.tensor([len(t.source_tokens)]),
            ours.config.decoding.max_length_ratio,
            ours.config.decoding.max_length_offset,
        )
        [result] = theirs.translate_batch([pieces], beam_size=1, max_decoding_length=limit)
        assert result.hypotheses[0] == [token for token in t.tokens if token != "</s>"], text
