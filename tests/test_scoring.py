"""Scoring given translations (forced decoding): each token's log-probability is what the decoder's
step gives it, a search's output scores what the search said, an ensemble scores with the mean of
its members' distributions; Translator.score, `attnmt score` and POST /score."""

import io
import json
import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attnmt.cli import main
from attnmt.core.config import model_config_of
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.data.subwords import BOS, PAD
from attnmt.seq2seq import build_model
from attnmt.seq2seq.decoding import length_penalty
from attnmt.seq2seq.ensemble import Ensemble
from attnmt.seq2seq.results import ScoredTranslation
from attnmt.serve import ServerLimits, create_app
from attnmt.serve.schemas import request_models
from attnmt.translation.filtering import DualScore, dual_scores
from attention_helpers import rnn_fields
from conftest import local_client, reverse

TRANSFORMER = {
    "type": "transformer",
    "d_model": 32,
    "heads": 4,
    "feed_forward": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}


RNN_SIZES = {"embedding_size": 16, "encoder_hidden": 8, "decoder_hidden": 16, "attention_size": 8, "location_kernel": 3}


def untrained(**config):
    return build_model(
        model_config_of(
            **rnn_fields(
                **({} if config.get("type") == "transformer" else RNN_SIZES),
                **{"dropout": 0.0, **config},
            )
        ),
        20,
        20,
    ).eval()


def pairs_batch(n=5, seed=0):
    """Sources and targets of different lengths: padding on both sides."""
    g = torch.Generator().manual_seed(seed)

    def sequence():
        return torch.randint(4, 20, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()

    return make_batch([sequence() for _ in range(n)], [sequence() for _ in range(n)])


def stepped_log_probs(model, batch):
    """log p of each target token from decode_step, one step at a time, fed the target's tokens."""
    memory = model.encode(batch.src, batch.src_lengths)
    state = model.init_state(memory)
    columns = []
    for t in range(batch.tgt_in.size(1)):
        step = model.decode_step(batch.tgt_in[:, t], state, memory)
        columns.append(step.log_probs.gather(1, batch.tgt_out[:, t : t + 1]).squeeze(1))
        state = step.state
    return torch.stack(columns, dim=1).masked_fill(batch.tgt_out == PAD, 0.0)


@pytest.mark.parametrize(
    "config",
    [
        {"attention": "bahdanau"},
        {"attention": "none"},
        {"attention": "location"},
        {"attention": "luong-general", "rnn_type": "lstm"},
        TRANSFORMER,
    ],
    ids=["bahdanau", "none", "location", "luong-lstm", "transformer"],
)
def test_each_tokens_log_prob_is_what_the_decoders_step_gives_it(config):
    model, batch = untrained(**config), pairs_batch()
    with torch.inference_mode():
        forced = model.target_log_probs(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out)
        torch.testing.assert_close(forced, stepped_log_probs(model, batch), atol=1e-5, rtol=1e-5)
    assert (forced[batch.tgt_out == PAD] == 0).all() and (forced[batch.tgt_out != PAD] < 0).all()


def test_an_ensemble_scores_with_the_mean_of_its_members_probabilities():
    members = [untrained(attention="bahdanau"), untrained(**TRANSFORMER)]
    batch = pairs_batch()
    with torch.inference_mode():
        alone = [m.target_log_probs(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out) for m in members]
        together = Ensemble(members).target_log_probs(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out)
    mean = (alone[0].exp() + alone[1].exp()) / 2
    torch.testing.assert_close(together.exp(), mean.masked_fill(batch.tgt_out == PAD, 1.0))


def test_bos_and_pad_are_never_a_next_token():
    model, batch = untrained(attention="bahdanau"), pairs_batch()
    with torch.inference_mode():
        states, _ = model.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in)
        log_probs = model.next_token_log_probs(states)
    assert torch.isinf(log_probs[..., BOS]).all() and torch.isinf(log_probs[..., PAD]).all()
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(log_probs.shape[:2]))


# --- the command line: what it refuses before loading a model ----------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--src", "a.txt"], "give --src and --tgt"),
        (["--src", "a.txt", "--tgt", "b.txt", "-i", "c.tsv"], "give --src and --tgt"),
        (["-i", "{tsv}", "--src-column", "1", "--tgt-column", "1"], "two different columns"),
        (["-i", "{tsv}", "--tgt-column", "2"], "line 2: 2 tab-separated column(s), expected at least 3"),
        (["-i", "{empty}"], "no lines to score"),
    ],
)
def test_score_names_what_is_wrong_with_its_input(tmp_path, capsys, argv, message):
    tsv, empty = tmp_path / "pairs.tsv", tmp_path / "empty.tsv"
    tsv.write_text("ab\tba\tx\ncd\tdc\n", encoding="utf-8")
    empty.write_text("", encoding="utf-8")
    argv = [a.format(tsv=tsv, empty=empty) for a in argv]
    assert main(["score", str(tmp_path / "no-model"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_score_request_has_a_translation_for_each_text():
    request = request_models(ServerLimits(max_sentences=4)).score
    assert request.model_validate({"text": ["ab", "cd"], "translation": ["ba", "dc"]})
    for body, message in (
        ({"text": ["ab", "cd"], "translation": ["ba"]}, "one translation for each text"),
        ({"text": "ab", "translation": ["ba"]}, "two strings, or two lists"),
        ({"text": "ab"}, "Field required"),
        ({"text": ["a"] * 5, "translation": ["a"] * 5}, "at most 4 items"),
        ({"text": "ab", "translation": " "}, "not be empty or only whitespace"),
    ):
        with pytest.raises(ValueError, match=message):
            request.model_validate(body)


# --- a trained model (slow) ---------------------------------------------------------------------------


@pytest.mark.parametrize("beam", [1, 3])
def test_a_search_output_scores_what_the_search_said(reverse_model, beam):
    """Its log-probability is the search's score times the length penalty (the search's tokens are the
    text's pieces here: character subwords)."""
    translator, dev = reverse_model
    alpha = translator.config.decoding.length_penalty
    translations = translator.translate(dev[:20], beam=beam)
    scored = translator.score(dev[:20], [t.text for t in translations])
    for t, s in zip(translations, scored):
        assert s.tokens == t.tokens and s.source == t.source and s.translation == t.text
        assert s.log_prob == pytest.approx(t.score * length_penalty(len(t.tokens), alpha), abs=1e-4)
        assert s.per_token == pytest.approx(s.log_prob / len(s.tokens))
        assert s.perplexity == pytest.approx(math.exp(-s.per_token))


def test_a_translation_scores_higher_than_another_sentences(reverse_model):
    translator, dev = reverse_model
    sources = dev[:30]
    right = translator.score(sources, [reverse(s) for s in sources])
    wrong = translator.score(sources, [reverse(s) for s in sources[1:] + sources[:1]])
    assert all(r.per_token > w.per_token for r, w in zip(right, wrong))
    assert sum(r.perplexity for r in right) / len(right) < 1.5  # a model that reverses strings all but surely


def test_score_keeps_the_order_and_scores_empty_sides(reverse_model):
    translator, dev = reverse_model
    sources = dev[:10] + ["", "abc"]
    targets = [reverse(s) for s in dev[:10]] + ["abc", ""]
    scored = translator.score(sources, targets, batch_size=3)
    assert [s.source for s in scored] == sources and [s.translation for s in scored] == targets
    one_by_one = [translator.score([s], [t])[0] for s, t in zip(sources, targets)]
    for a, b in zip(scored, one_by_one):  # batches of other lengths, the same scores
        np.testing.assert_allclose(a.log_probs, b.log_probs, atol=1e-5)
    assert scored[-1].tokens == ["</s>"] and scored[-1].log_probs.shape == (1,)


def test_score_refuses_what_it_cannot_score(reverse_model):
    translator, dev = reverse_model
    with pytest.raises(TypeError, match="two lists"):
        translator.score(dev[0], reverse(dev[0]))
    with pytest.raises(AttnmtError, match="numbers of sentences differ: 2 sources, 1 translations"):
        translator.score(dev[:2], dev[:1])
    with pytest.raises(AttnmtError, match="the translation of pair 2 .* more than 3 .*scored whole or not at all"):
        translator.score(["ab", "cd"], ["ba", "dcba"], max_tokens=3)


def test_the_score_command_writes_a_score_per_line(reverse_model, tmp_path, capsys, monkeypatch):
    translator, dev = reverse_model
    sources, targets = dev[:6], [reverse(s) for s in dev[:5]] + [dev[0]]
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(targets) + "\n", encoding="utf-8")
    expected = translator.score(sources, targets)
    folder = str(translator.folder)

    assert main(["score", folder, "--src", str(src), "--tgt", str(tgt), "-o", str(tmp_path / "sums.txt")]) == 0
    log = capsys.readouterr().err
    sums = [float(line) for line in (tmp_path / "sums.txt").read_text().splitlines()]
    assert sums == pytest.approx([s.log_prob for s in expected], abs=1e-5)
    tokens = sum(len(s.tokens) for s in expected)
    assert f"scored 6 translations, {tokens} target tokens" in log
    assert f"perplexity {math.exp(-sum(sums) / tokens):.2f}" in log

    pasted = "".join(f"x\t{t}\t{s}\n" for s, t in zip(sources, targets)).encode()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(pasted)))
    assert main(["score", folder, "--src-column", "2", "--tgt-column", "1", "--normalize"]) == 0
    per_token = [float(line) for line in capsys.readouterr().out.splitlines()]
    assert per_token == pytest.approx([s.per_token for s in expected], abs=1e-5)

    assert main(["score", folder, "--src", str(src), "--tgt", str(tgt), "--jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["tokens"] for r in rows] == [s.tokens for s in expected]
    for r, s in zip(rows, expected):
        assert r["token_log_probs"] == pytest.approx(s.log_probs.tolist(), abs=1e-5)
        assert r["log_prob"] == pytest.approx(s.log_prob, abs=1e-5) and r["per_token"] == pytest.approx(s.per_token)

    assert main(["score", folder, "--src", str(src), "--tgt", str(tgt), "--max-tokens", "2"]) == 2
    assert f"{src}, {tgt}: the source of pair 1" in capsys.readouterr().err


def test_score_of_a_sentence_pair_classifier_is_a_clear_error(pair_model, tmp_path, capsys):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("two cats\ttwo red cats\n", encoding="utf-8")
    assert main(["score", str(pair_model), "-i", str(tsv)]) == 2
    assert "scores translations of text; this is a sentence-pair classifier" in capsys.readouterr().err


def test_post_score_gives_what_the_python_api_gives(reverse_model):
    translator, dev = reverse_model
    limits = ServerLimits(max_sentences=8, max_chars=40, max_tokens=12, max_work=60, timeout=30.0)
    with local_client(create_app([translator.folder], limits)) as client:
        texts, translations = dev[:3], [reverse(s) for s in dev[:2]] + [dev[5]]
        answer = client.post("/score", json={"text": texts, "translation": translations})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["model"] == translator.folder.name
        for got, expected in zip(body["scores"], translator.score(texts, translations)):
            assert got["tokens"] == expected.tokens and got["translation"] == expected.translation
            assert got["log_probs"] == pytest.approx(expected.log_probs.tolist(), abs=1e-5)
            assert got["log_prob"] == pytest.approx(expected.log_prob, abs=1e-5)
            assert got["perplexity"] == pytest.approx(expected.perplexity, rel=1e-4)
        [one] = client.post("/score", json={"text": dev[0], "translation": reverse(dev[0])}).json()["scores"]
        assert one["per_token"] == pytest.approx(body["scores"][0]["per_token"], abs=1e-6)

        for request, status, message in (
            ({"text": ["ab", "cd"], "translation": ["ba"]}, 422, "one translation for each text"),
            ({"text": ["ab", "cd"], "translation": ["ba", "a" * 13]}, 422, "translation[1] has 14 subword tokens"),
            ({"text": ["abcdefghij"] * 3, "translation": ["abcdefghij"] * 3}, 422, "the limit is 60"),
            ({"text": "ab", "translation": "ba", "model": "other"}, 404, "unknown model 'other'"),
        ):
            answer = client.post("/score", json=request)
            assert answer.status_code == status and message in answer.json()["detail"], answer.text


# --- the dual score of two models, one each way ---------------------------------------------------------


def scored(per_token: float, tokens: int) -> ScoredTranslation:
    return ScoredTranslation("x", "y", ["p"] * tokens, np.full(tokens, per_token, dtype=np.float32))


def test_the_dual_score_reads_like_its_equation():
    """H_f = 1 and H_b = 3 nats per token: |1 - 3| + (1 + 3) / 2 = 4, whatever the lengths."""
    pair = DualScore(forward=scored(-1.0, 4), backward=scored(-3.0, 7))
    assert pair.cross_entropy == pytest.approx(4.0) and pair.score == pytest.approx(-4.0)
    agreeing = DualScore(forward=scored(-2.0, 4), backward=scored(-2.0, 5))  # same mean, both agree: lower
    assert agreeing.cross_entropy == pytest.approx(2.0) and agreeing.cross_entropy < pair.cross_entropy


def test_the_dual_score_is_each_models_score_one_way_each(reverse_model):
    """Reversing is its own inverse: the reverse model is its own backward model."""
    translator, dev = reverse_model
    sources = dev[:8]
    right = [reverse(s) for s in sources]
    dual = dual_scores(translator, translator, sources, right)
    for d, f, b in zip(dual, translator.score(sources, right), translator.score(right, sources)):
        np.testing.assert_allclose(d.forward.log_probs, f.log_probs, atol=1e-6)
        np.testing.assert_allclose(d.backward.log_probs, b.log_probs, atol=1e-6)
    halves = [r[: max(1, len(r) // 2)] for r in right]  # a translation of half the source
    assert all(d.score > h.score for d, h in zip(dual, dual_scores(translator, translator, sources, halves)))


def test_score_with_backward_writes_the_dual_score(reverse_model, pair_model, tmp_path, capsys):
    translator, dev = reverse_model
    sources, targets = dev[:5], [reverse(s) for s in dev[:5]]
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(targets) + "\n", encoding="utf-8")
    folder = str(translator.folder)
    expected = dual_scores(translator, translator, sources, targets)
    argv = ["score", folder, "--src", str(src), "--tgt", str(tgt), "--backward", folder]
    assert main(argv) == 0
    out, log = capsys.readouterr()
    assert [float(line) for line in out.splitlines()] == pytest.approx([d.score for d in expected], abs=1e-5)
    assert "5 translations" in log and "5 sources (backward)" in log
    assert main([*argv, "--jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["backward"]["tokens"] for r in rows] == [d.backward.tokens for d in expected]
    assert [r["score"] for r in rows] == pytest.approx([d.score for d in expected], abs=1e-6)
    assert main([*argv, "--normalize"]) == 2
    assert "per token already" in capsys.readouterr().err
    assert main(["score", folder, "--src", str(src), "--tgt", str(tgt), "--backward", str(pair_model)]) == 2
    assert "the backward model of a dual score is a sentence-pair classifier" in capsys.readouterr().err
