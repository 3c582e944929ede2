"""The coverage penalty of Wu et al. (2016): s(Y, X) = log p(Y|X) / lp(Y) + beta * sum_i log(min(sum_t a_t,i, 1)),
in every search, the Python API and the command line."""

import inspect
import json
import math
from dataclasses import dataclass, replace

import pytest
import torch

from attnmt.cli import main
from attnmt.core import speed
from attnmt.core.config import DecodingConfig, RNNConfig
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.data.subwords import BOS, EOS
from attnmt.seq2seq import build_model, decoding, fast_decoding
from attnmt.seq2seq.base import Batched, StepOutput
from attnmt.seq2seq.decoder import Memory
from attnmt.seq2seq.decoding import beam_search, coverage_penalty, greedy_search, length_penalty
from attnmt.seq2seq.search import decode


def test_the_penalty_is_beta_times_the_log_of_each_source_words_coverage_capped_at_one():
    attention = torch.tensor([[0.9, 0.1, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])  # coverage 1.9, 0.5, 0.6
    assert coverage_penalty(attention, 0.4) == pytest.approx(0.4 * (math.log(1) + math.log(0.5) + math.log(0.6)))
    assert coverage_penalty(torch.full((4, 2), 0.5), 1.0) == 0.0  # every word covered at least once: nothing
    # A word that the attention never looked at (an attention window hid it) costs log(1e-6), not -inf.
    assert coverage_penalty(torch.tensor([[1.0, 0.0]]), 1.0) == pytest.approx(math.log(1e-6))


class LeavesAWordOut:
    """A scripted decoder over a source of two positions. From BOS it writes 5 (attending to
    position 0); after 5 it ends (0.6), attending to position 0 again, or writes 6 (0.39),
    attending to position 1, after which it ends (0.99). The likelier output [5, EOS] leaves
    position 1 out; [5, 6, EOS] covers both."""

    has_attention, fast_search = True, True
    LEFT, RIGHT = torch.tensor([0.98, 0.02]), torch.tensor([0.02, 0.98])

    def encode(self, src, lengths, window=None):
        batch = src.size(0)
        return Memory(torch.zeros(batch, 2, 1), None, torch.ones(batch, 2, dtype=torch.bool), torch.zeros(batch, 1))

    def init_state(self, memory):
        @dataclass
        class Last(Batched):
            token: torch.Tensor

        return Last(torch.full((memory.states.size(0),), BOS))

    def decode_step(self, prev, state, memory):
        probs = torch.full((prev.size(0), 8), 1e-4)
        probs[prev == BOS, 5] = 0.9
        probs[prev == 5, EOS], probs[prev == 5, 6] = 0.6, 0.39
        probs[prev == 6, EOS] = 0.99
        weights = torch.where((prev == 6)[:, None], self.RIGHT, self.LEFT)
        log_probs = (probs / probs.sum(-1, keepdim=True)).log()
        return StepOutput(log_probs, replace(state, token=prev), weights, weights.log(), torch.zeros(1), torch.zeros(1))


def scripted_outputs(beta, search):
    src, lengths = torch.ones(1, 2, dtype=torch.long), torch.full((1,), 2)
    kwargs = {"beam": 3, "n_best": 2} if search is beam_search else {}
    [hypotheses] = search(LeavesAWordOut(), src, lengths, [6], alpha=0.0, beta=beta, **kwargs)
    return hypotheses


def test_beam_search_prefers_the_output_that_covers_the_source_once_the_penalty_outweighs_its_probability():
    short, long = [5, EOS], [5, 6, EOS]
    [first, second] = scripted_outputs(0.0, beam_search)
    assert first.tokens == short and second.tokens == long
    # [5, EOS] leaves position 1 with 0.04 of attention: beta * log(0.04) = -3.2 beta; [5, 6, EOS] is
    # log(0.6 / (0.39 * 0.99)) = 0.44 less probable: a penalty of beta 0.2 makes it the better one.
    [first, second] = scripted_outputs(0.2, beam_search)
    assert first.tokens == long and second.tokens == short
    assert first.score == pytest.approx(first.log_prob)  # both positions covered: no penalty
    assert second.score == pytest.approx(second.log_prob + 0.2 * math.log(0.04), rel=1e-4)
    [greedy] = scripted_outputs(0.2, greedy_search)  # one hypothesis: the same output, its score penalized
    assert greedy.tokens == short and greedy.score == pytest.approx(second.score)


def trained_outputs(reverse_model, beta, beam=4):
    translator, dev = reverse_model
    batch = make_batch(translator.src_subwords.encode(dev[:12]))
    settings = translator.config.decoding.model_copy(update={"coverage_penalty": beta, "length_penalty": 0.6})
    return decode(translator.model, batch.src, batch.src_lengths, settings, beam=beam, n_best=beam)


def test_every_score_is_the_log_probability_over_the_length_penalty_plus_the_coverage_penalty(reverse_model):
    for hypotheses in trained_outputs(reverse_model, 0.7):
        for h in hypotheses:
            expected = h.log_prob / length_penalty(len(h.tokens), 0.6) + coverage_penalty(h.attention, 0.7)
            assert h.score == pytest.approx(expected, abs=1e-5)
        assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
    for plain, ours in zip(trained_outputs(reverse_model, 0.0), trained_outputs(reverse_model, 0.0)):
        assert [h.score for h in plain] == [h.log_prob / length_penalty(len(h.tokens), 0.6) for h in ours]


def test_a_penalty_on_a_model_without_attention_is_a_clear_error():
    config = RNNConfig(attention="none", embedding_size=16, encoder_hidden=8, decoder_hidden=16, dropout=0.0)
    model = build_model(config, 20, 20).eval()
    batch = make_batch([[5, 6, 7]])
    settings = DecodingConfig(coverage_penalty=0.2)
    with pytest.raises(AttnmtError, match="coverage penalty .* no attention"):
        decode(model, batch.src, batch.src_lengths, settings, beam=3)
    assert decode(model, batch.src, batch.src_lengths, DecodingConfig(), beam=3)  # none: fine


def test_on_a_gpu_a_coverage_penalty_keeps_the_fixed_shape_searches(monkeypatch):
    """decode hands the penalty to the fixed-shape searches where they run (a GPU with the speed tricks on:
    search.fast_here, faked here), greedy and beam. (tests/test_fast_decoding.py checks that they rank with it as
    the textbook searches do.)"""
    from attnmt.seq2seq import search

    model, cuda = LeavesAWordOut(), torch.device("cuda")
    assert search.fast_here(cuda, model) and not search.fast_here(torch.device("cpu"), model)
    with speed.plain():
        assert not search.fast_here(cuda, model)
    calls = []
    for name in ("greedy_search", "beam_search"):
        signature = inspect.signature(getattr(fast_decoding, name))
        monkeypatch.setattr(
            fast_decoding, name, lambda *a, _s=signature, **k: calls.append(_s.bind(*a, **k).arguments["beta"])
        )
    monkeypatch.setattr(decoding, "beam_search", lambda *a, **k: pytest.fail("the reference search ran"))
    monkeypatch.setattr(search, "fast_here", lambda device, model: True)
    src, lengths = torch.ones(1, 2, dtype=torch.long), torch.full((1,), 2)
    for beta in (0.0, 0.3):
        for beam in (1, 3):
            decode(model, src, lengths, DecodingConfig(coverage_penalty=beta), beam=beam)
    assert calls == [0.0, 0.0, 0.3, 0.3]


def test_set_decoding_changes_the_settings_of_later_calls_and_names_a_wrong_field(reverse_model):
    translator, dev = reverse_model
    before = translator.config.decoding
    try:
        translator.set_decoding(coverage_penalty=0.7, length_penalty=0.6)
        [t] = translator.translate([dev[0]], beam=4, n_best=4)
        for c in t.candidates:
            expected = log_prob_of_pieces(translator, dev[0], c.tokens) / length_penalty(len(c.tokens), 0.6)
            assert c.score == pytest.approx(expected + coverage_penalty(torch.from_numpy(c.attention), 0.7), abs=1e-4)
        # (and score() of a text is that of its own pieces: the first candidate's are)
        [scored] = translator.score([dev[0]], [t.candidates[0].text])
        assert scored.tokens == t.candidates[0].tokens
        assert scored.log_prob == pytest.approx(log_prob_of_pieces(translator, dev[0], scored.tokens), abs=1e-4)
        translation, tree = translator.beam_tree(dev[0], beam=4)
        assert [c.score for c in translation.candidates] == pytest.approx([c.score for c in t.candidates], abs=1e-5)
        with pytest.raises(AttnmtError, match="decoding.coverage_penalty: .*greater than or equal to 0"):
            translator.set_decoding(coverage_penalty=-1)
        with pytest.raises(AttnmtError, match="decoding.lenght_penalty"):
            translator.set_decoding(lenght_penalty=1)
        assert translator.config.decoding.coverage_penalty == 0.7  # a refused change changes nothing
    finally:
        translator.config = translator.config.model_copy(update={"decoding": before})


def log_prob_of_pieces(translator, text: str, tokens: list[str]) -> float:
    """log p(tokens | text) by forced decoding of the pieces themselves, as ``score`` computes it
    for the pieces a text encodes to: a search may write other pieces for the same text (here "b",
    "f" without the word-start "▁" of "▁", "b", "f"), and a candidate scores its own."""
    ids = {piece: i for i, (piece, _) in enumerate(translator.tgt_subwords.vocabulary())}
    assert tokens[-1] == "</s>"
    batch = make_batch(translator.source_ids([text]), [[ids[piece] for piece in tokens[:-1]]])
    with torch.inference_mode():
        log_probs = translator.model.target_log_probs(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out)
    return float(log_probs.sum())


def test_every_candidate_scores_its_pieces_and_the_eos_that_ends_it(reverse_model):
    """A candidate's score is log p(its pieces, EOS) with the penalties applied; at its length
    limit an output writes EOS (the only token a search may write there) and pays for it. (A limit
    of half the source's length cuts every reversed string; cut without EOS, a candidate scored
    up to 10 higher than its own log-probability and outranked those that ended.)"""
    translator, dev = reverse_model
    before = translator.config.decoding
    try:
        translator.set_decoding(max_length_ratio=0.5, max_length_offset=1, coverage_penalty=0.7, length_penalty=0.6)
        for beam, n_best in ((1, 1), (4, 4)):
            for text, t in zip(dev[:8], translator.translate(dev[:8], beam=beam, n_best=n_best)):
                limit = int(0.5 * (len(translator.src_subwords.encode([text])[0]) + 1) + 1)
                assert any(len(c.tokens) == limit for c in t.candidates)  # (cut by the limit: this test's case)
                for c in t.candidates:
                    assert c.tokens.index("</s>") == len(c.tokens) - 1 and len(c.tokens) <= limit, (text, c.tokens)
                    expected = log_prob_of_pieces(translator, text, c.tokens) / length_penalty(len(c.tokens), 0.6)
                    expected += coverage_penalty(torch.from_numpy(c.attention), 0.7)
                    assert c.score == pytest.approx(expected, abs=1e-4), (text, c.tokens)
        trace = translator.trace(dev[0])
        assert trace.steps[-1].token == "</s>" and trace.steps[-1].constrained  # the trace's last step too
    finally:
        translator.config = translator.config.model_copy(update={"decoding": before})


def test_the_command_line_options_override_the_config(reverse_model, tmp_path, capsys):
    translator, dev = reverse_model
    src = tmp_path / "src.txt"
    src.write_text("\n".join(dev[:5]) + "\n")
    runs = {}
    for options in ([], ["--coverage-penalty", "5", "--length-penalty", "0"]):
        assert (
            main(["translate", str(translator.folder), "-i", str(src), "--beam", "3", "--n-best", "3", *options]) == 0
        )
        runs[len(options)] = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    plain, penalized = runs[0], runs[4]
    assert [(i, text) for i, text, _ in plain] != [] and len(plain) == len(penalized) == 15
    assert any(float(p[2]) < float(q[2]) for p, q in zip(penalized, plain))  # scores changed
    assert main(["translate", str(translator.folder), "-i", str(src), "--coverage-penalty", "-2"]) == 2
    assert "decoding.coverage_penalty" in capsys.readouterr().err
    report = tmp_path / "report.json"
    assert (
        main(
            [
                "evaluate",
                str(translator.folder),
                "--src",
                str(src),
                "--ref",
                str(src),
                "--beam",
                "3",
                "--coverage-penalty",
                "0.3",
                "--json",
                str(report),
            ]
        )
        == 0
    )
    settings = json.loads(report.read_text())
    assert (settings["beam"], settings["coverage_penalty"]) == (3, 0.3)  # what the figures were searched with
    assert settings["length_penalty"] == translator.config.decoding.length_penalty


def test_a_server_decodes_with_the_penalties_it_is_given(reverse_model):
    from attnmt.serve import create_app
    from conftest import local_client

    translator, dev = reverse_model
    app = create_app([translator.folder], decoding={"length_penalty": 0.6, "coverage_penalty": 0.7})
    with local_client(app) as client:
        [info] = client.get("/models").json()
        assert (info["length_penalty"], info["coverage_penalty"]) == (0.6, 0.7)
        [answer] = client.post("/translate", json={"text": [dev[0]], "beam": 3, "n_best": 3}).json()["translations"]
    expected = app.state.models[info["name"]].translator.translate([dev[0]], beam=3, n_best=3)[0]
    assert [c["score"] for c in answer["candidates"]] == pytest.approx([c.score for c in expected.candidates])
    log_probs = [s.log_prob for s in translator.score([dev[0]] * 3, [c.text for c in expected.candidates])]
    first = expected.candidates[0]
    assert first.score == pytest.approx(
        log_probs[0] / length_penalty(len(first.tokens), 0.6)
        + coverage_penalty(torch.from_numpy(first.attention), 0.7),
        abs=1e-4,
    )
    assert translator.config.decoding.coverage_penalty == 0.0  # the caller's own model is not changed
    with pytest.raises(AttnmtError, match="decoding.coverage_penalty"):
        create_app([translator.folder], decoding={"coverage_penalty": -1})


def test_attnmt_serve_takes_the_penalties(reverse_model, monkeypatch, capsys):
    import attnmt.serve

    translator, _ = reverse_model
    served = {}
    monkeypatch.setattr(attnmt.serve, "run_server", lambda app, **options: served.update(app=app))
    assert main(["serve", str(translator.folder), "--length-penalty", "0.2", "--coverage-penalty", "0.4"]) == 0
    [model] = served["app"].state.models.values()
    assert (model.translator.config.decoding.length_penalty, model.translator.config.decoding.coverage_penalty) == (
        0.2,
        0.4,
    )
    assert main(["serve", str(translator.folder), "--coverage-penalty", "-1"]) == 2
    assert "decoding.coverage_penalty" in capsys.readouterr().err
