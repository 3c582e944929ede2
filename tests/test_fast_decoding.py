"""attnmt.seq2seq.fast_decoding: its fixed-shape searches return attnmt.seq2seq.decoding's hypotheses (tokens,
scores, attention) and search trees, run eagerly or on static buffers as a CUDA graph runs them; a search step reads
no value back from the device, and the loop asks whether all sentences are done only every
CHECK_EVERY steps."""

import contextlib
import copy
import threading

import pytest
import torch

from attnmt.core import speed
from attnmt.core.config import DecodingConfig, RNNConfig, model_config_of, Sampling
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq import EOS, build_model, capture, constraints, decoding, fast_decoding
from attnmt.seq2seq.constraints import ConstrainedBeamSearch
from attnmt.seq2seq import search as searches
from attnmt.seq2seq.decoding import max_output_lengths
from attnmt.seq2seq.prefix import Prefix, Prefixes, Spelling
from attention_helpers import rnn_fields
from test_decoding import ConfidentModel, random_batch
import textbook_beams

TRANSFORMER = {
    "type": "transformer",
    "d_model": 16,
    "heads": 2,
    "feed_forward": 32,
    "encoder_layers": 1,
    "decoder_layers": 2,
    "attention_dropout": 0.0,
}
MODELS = {
    "gru-none": {"attention": "none"},
    "gru-bahdanau": {"attention": "bahdanau"},
    "gru-bahdanau-window": {"attention": "bahdanau", "window": (1, 2)},
    "gru-luong-general": {"attention": "luong-general"},
    "gru-luong-dot": {"attention": "luong-dot"},
    "gru-luong-concat-no-input-feeding": {"attention": "luong-concat", "input_feeding": False},
    "gru-location": {"attention": "location"},
    "gru-luong-general-local-m": {"attention": "luong-general", "local_attention": "local-m", "local_window": 2},
    "lstm-luong-dot-local-p-no-input-feeding": {
        "rnn_type": "lstm",
        "attention": "luong-dot",
        "input_feeding": False,
        "local_attention": "local-p",
        "local_window": 2,
    },
    "gru-bahdanau-sparsemax": {"attention": "bahdanau", "attention_normalizer": "sparsemax"},
    "lstm-location-entmax15": {"rnn_type": "lstm", "attention": "location", "attention_normalizer": "entmax15"},
    # (and each search of coverage and csparsemax against the reference's: test_coverage_attention and
    # test_constrained_attention)
    "gru-coverage-fertility": {"attention": "coverage", "coverage_fertility": 2},
    "lstm-coverage-nn": {"rnn_type": "lstm", "attention": "coverage", "coverage_dim": 4},
    "lstm-luong-general-csparsemax-no-input-feeding": {
        "rnn_type": "lstm",
        "attention": "luong-general",
        "input_feeding": False,
        "attention_normalizer": "csparsemax",
    },
    "lstm-bahdanau-2-layers": {"rnn_type": "lstm", "decoder_layers": 2},
    "lstm-location": {"rnn_type": "lstm", "attention": "location"},
    "transformer": TRANSFORMER,
    "transformer-sparsemax": {**TRANSFORMER, "attention_normalizer": "sparsemax"},
    "transformer-learned-positions-post-norm": {
        **TRANSFORMER,
        "positions": "learned",
        "norm": "post",
        "max_positions": 64,
    },
}
# The models every run of the suite searches with; the others run in the full suite only (marked slow), to keep
# `pytest -m "not slow"` quick. Between them: no attention, additive attention in a window, location attention
# with a sparse normalizer and an LSTM's two states, a Transformer. (Local and coverage attention's searches are
# also compared with the reference's in every run: test_local_attention, test_coverage_attention.)
EVERY_RUN = ["gru-none", "gru-bahdanau-window", "lstm-location-entmax15", "transformer"]


def model_names(names=MODELS):
    """``names`` as parameters, those outside EVERY_RUN marked slow."""
    return [name if name in EVERY_RUN else pytest.param(name, marks=pytest.mark.slow) for name in names]


# The bias added to EOS's score: 0, sentences end at various steps; +3, most end within a few
# steps; -10, none ends and all reach their length limits.
ENDS_EARLY, NEVER_ENDS = 3.0, -10.0


def tiny(name: str, eos_bias: float = 0.0):
    """An untrained model of MODELS[name] (vocabularies of 20), its output layer biased by ``eos_bias`` towards EOS.
    (Its attention window, if it has one, is for the searches: ``window_of(name)``.)"""
    options = dict(MODELS[name])
    options.pop("window", None)
    rnn = dict(embedding_size=16, encoder_hidden=8, decoder_hidden=16, attention_size=8, location_kernel=3)
    config = model_config_of(
        **rnn_fields(**({} if options.get("type") == "transformer" else rnn), dropout=0.0, **options)
    )
    model = build_model(config, 20, 20).eval()
    with torch.no_grad():
        model.generator.bias[EOS] += eos_bias
    return model


def window_of(name: str) -> tuple[int, int] | None:
    """The attention window the searches of model ``name`` keep to."""
    return MODELS[name].get("window")


def limits_of(batch, kind: str) -> list[int]:
    if kind == "tight":  # 1, 2, 3, ...: the first sentences stop at their limits
        return list(range(1, batch.src.size(0) + 1))
    return max_output_lengths(batch.src_lengths, 1.5, 5)


def assert_same_hypotheses(fast, reference, atol=1e-5):
    """The same n best, scores and attention; hypotheses whose scores tie within ``atol`` may come
    in either order (which one float32 rounding puts first differs between CPUs)."""
    assert len(fast) == len(reference)
    for ours, theirs in zip(fast, reference):
        assert len(ours) == len(theirs)
        ours = list(ours)
        for i, b in enumerate(theirs):  # a tie: the reference's hypothesis among ours that tie with it
            if ours[i].tokens != b.tokens:
                tied = [j for j in range(i, len(ours)) if ours[j].tokens == b.tokens]
                assert tied and abs(ours[tied[0]].score - b.score) <= atol and abs(ours[i].score - b.score) <= atol, (
                    [h.tokens for h in ours],
                    [h.tokens for h in theirs],
                )
                ours[i], ours[tied[0]] = ours[tied[0]], ours[i]
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=atol)
        assert [h.log_prob for h in ours] == pytest.approx([h.log_prob for h in theirs], abs=atol)
        for a, b in zip(ours, theirs):
            if b.attention is None:
                assert a.attention is None
            else:
                torch.testing.assert_close(a.attention.cpu(), b.attention.cpu(), atol=atol, rtol=0)


# (EOS bias, length limits): early ends, ends at any step within the usual limits, only limits.
CASES = [(ENDS_EARLY, "usual"), (0.0, "tight"), (0.0, "usual"), (NEVER_ENDS, "tight")]


@pytest.mark.parametrize("name", MODELS)
def test_greedy_search_finds_the_reference_hypotheses(name):
    batch = random_batch(6, seed=1)
    for eos_bias, limits in CASES:
        model, limits = tiny(name, eos_bias), limits_of(batch, limits)
        reference = decoding.greedy_search(model, batch.src, batch.src_lengths, limits, window=window_of(name))
        for graphs in (False, True):  # (True on a CPU: the static buffers a graph replays, run eagerly)
            assert_same_hypotheses(
                fast_decoding.greedy_search(
                    model, batch.src, batch.src_lengths, limits, graphs=graphs, window=window_of(name)
                ),
                reference,
            )


# (beam, n_best, alpha)
BEAMS = [(1, 1, 1.0), (3, 1, 0.0), (3, 3, 1.0), (5, 1, 1.0), (5, 3, 0.0)]


def assert_same_trees(fast, reference, atol=1e-5):
    """Two BeamRecorders' trees: the same nodes (parents, tokens, steps, statuses), the same log-probabilities."""
    for ours, theirs in zip(fast.trees, reference.trees, strict=True):
        assert [(n.id, n.parent, n.token, n.step, n.status, n.met) for n in ours] == [
            (n.id, n.parent, n.token, n.step, n.status, n.met) for n in theirs
        ]
        assert [n.log_prob for n in ours] == pytest.approx([n.log_prob for n in theirs], abs=atol)


@pytest.mark.parametrize("name", model_names())
def test_beam_search_finds_the_reference_n_best(name):
    """The n best, and the search tree (decoding.BeamRecorder: each step's candidates kept in
    TreeBuffers, read by the recorder as it observes the eager loop, added at the end on fixed
    shapes), of the one strategy in both executors: the textbook bookkeeping's (tests/textbook_beams.py)."""
    batch = random_batch(6, seed=2)
    for case, (eos_bias, limits) in enumerate(CASES):
        model, limits = tiny(name, eos_bias), limits_of(batch, limits)
        for beam, n_best, alpha in BEAMS:
            trees = decoding.BeamRecorder(6, beam), decoding.BeamRecorder(6, beam), decoding.BeamRecorder(6, beam)
            args = (model, batch.src, batch.src_lengths, limits, beam, n_best, alpha)
            reference = textbook_beams.beam_search(*args, window=window_of(name), record=trees[0])
            assert_same_hypotheses(decoding.beam_search(*args, window=window_of(name), record=trees[2]), reference)
            assert_same_trees(trees[2], trees[0])
            graphs = (case + beam) % 2 == 0  # half of them on static buffers
            fast = fast_decoding.beam_search(*args, window=window_of(name), graphs=graphs)
            assert_same_hypotheses(fast, reference)
            recorded = fast_decoding.beam_search(*args, window=window_of(name), graphs=graphs, record=trees[1])
            assert_same_hypotheses(recorded, reference)
            assert_same_trees(trees[1], trees[0])


# A vocabulary of 20 pieces as text (0-3: PAD, UNK, BOS, EOS, which spell nothing), and the prefixes
# of six sentences: whole tokens, then a word to spell (attnmt.seq2seq.prefix).
PIECES = ["", "", "", "", "▁d", "▁do", "▁dog", "o", "g", "▁", "d", "s", "▁cat", "c", "a", "t", "▁c", "at", "og", "do"]
PREFIXES = Prefixes([[5], [], [7, 8], [], [12], [4, 4, 4]], ["▁dog", "▁ca", "", "", "▁c", "og"], Spelling(PIECES))


def prefixed_limits(limits: list[int]) -> list[int]:
    """Room for each prefix (as decoding.output_limits makes it) and two tokens more."""
    return [max(limit, len(p) + len(w) + 2) for limit, p, w in zip(limits, PREFIXES.tokens, PREFIXES.words)]


@pytest.mark.parametrize("name", model_names())
def test_a_prefix_runs_in_the_fixed_shape_executor_as_in_the_reference(name):
    """A prefix (forced tokens, then pieces spelling a word: the loop processor prefix.Prefix) in the
    fixed-shape executor, on static buffers too: its state of tensors (FixedPrefixState,
    SpellingTables) restricts each step as the reference's does, greedy and beam."""
    batch, window = random_batch(6, seed=7), window_of(name)
    for case, (eos_bias, limits) in enumerate(CASES):
        model, limits = tiny(name, eos_bias), prefixed_limits(limits_of(batch, limits))
        prefix = (Prefix(PREFIXES, None, batch.src.device),)
        args = (model, batch.src, batch.src_lengths, limits)
        reference = decoding.greedy_search(*args, window=window, processors=prefix)
        for graphs in (False, True):
            assert_same_hypotheses(
                fast_decoding.greedy_search(*args, window=window, graphs=graphs, processors=prefix), reference
            )
        reference = decoding.beam_search(*args, 3, 2, window=window, processors=prefix)
        assert_same_hypotheses(
            fast_decoding.beam_search(*args, 3, 2, window=window, graphs=case % 2 == 0, processors=prefix), reference
        )
    found = fast_decoding.greedy_search(*args, processors=prefix)
    for (tokens, word), [hypothesis] in zip(zip(PREFIXES.tokens, PREFIXES.words), found):
        assert hypothesis.tokens[: len(tokens)] == tokens
        assert "".join(PIECES[t] for t in hypothesis.tokens[len(tokens) :]).startswith(word)


def test_a_prefix_under_a_shortlist_in_the_fixed_shape_executor():
    """The forced tokens are the shortlist's columns, the pieces that spell are masked by column."""
    from attnmt.seq2seq.search import prefixed
    from attnmt.seq2seq.shortlist import restricted

    batch, model = random_batch(6, seed=8), tiny("gru-bahdanau")
    limits = prefixed_limits(limits_of(batch, "usual"))
    table = torch.tensor([0, 1, 2, 3, 9, 11, 14])  # (ids 0-3: a shortlist always has them)
    prefix, vocabulary = prefixed(PREFIXES, table, batch.src.device)
    args, prefix = (model, batch.src, batch.src_lengths, limits, 1.0, vocabulary), (prefix,)
    with restricted(model, vocabulary):
        assert_same_hypotheses(
            fast_decoding.greedy_search(*args, graphs=True, processors=prefix),
            decoding.greedy_search(*args, processors=prefix),
        )
        assert_same_hypotheses(
            fast_decoding.beam_search(*args[:4], 3, 3, 1.0, vocabulary, processors=prefix),
            decoding.beam_search(*args[:4], 3, 3, 1.0, vocabulary, processors=prefix),
        )


def test_a_prefix_no_longer_falls_back_to_the_reference_search(monkeypatch):
    """Where the fixed-shape executor runs (a GPU, faked here: search.fast_here), decode with
    prefixes takes it, greedy and beam, with the reference's hypotheses."""
    batch, model, settings = random_batch(6, seed=7), tiny("lstm-location"), DecodingConfig()
    expected = [
        searches.decode(model, batch.src, batch.src_lengths, settings, beam=b, prefixes=PREFIXES) for b in (1, 3)
    ]
    monkeypatch.setattr(decoding, "greedy_search", lambda *a, **k: pytest.fail("the reference search ran"))
    monkeypatch.setattr(decoding, "beam_search", lambda *a, **k: pytest.fail("the reference search ran"))
    monkeypatch.setattr(searches, "fast_here", lambda device, model: True)
    for beam, reference in zip((1, 3), expected):
        assert_same_hypotheses(
            searches.decode(model, batch.src, batch.src_lengths, settings, beam=beam, prefixes=PREFIXES), reference
        )


# The constraints of six sentences (attnmt.seq2seq.constraints): one token, a phrase, none, two,
# a phrase of one token twice, phrases that share their tokens (13 starts two, 14 is one).
CONSTRAINTS = [[(7,)], [(9, 10, 11)], [], [(12,), (5, 6)], [(4, 4)], [(13, 14), (14,), (13, 15)]]


def constrained_limits(limits: list[int]) -> list[int]:
    """Room for each sentence's constraint tokens (as decoding.output_limits makes it) and two more."""
    return [max(limit, sum(map(len, phrases)) + 2) for limit, phrases in zip(limits, CONSTRAINTS)]


@pytest.mark.parametrize("name", model_names())
def test_constrained_beam_search_finds_the_reference_hypotheses_and_tree(name):
    """The banks as tensors (constraints.ConstrainedBeamSearch) in both executors, on static buffers
    too: the textbook banks' n best (Python's dictionaries and sorts, tests/textbook_beams.py: those
    that met every constraint first, then those the length limit ended), and its search tree, each
    node with its bank."""
    batch, window = random_batch(6, seed=9), window_of(name)
    for case, (eos_bias, limits) in enumerate(CASES):
        model, limits = tiny(name, eos_bias), constrained_limits(limits_of(batch, limits))
        for beam, n_best, alpha in BEAMS:
            trees = decoding.BeamRecorder(6, beam), decoding.BeamRecorder(6, beam), decoding.BeamRecorder(6, beam)
            args = (model, batch.src, batch.src_lengths, limits, CONSTRAINTS, beam, n_best, alpha)
            reference = textbook_beams.constrained_beam_search(*args, window=window, record=trees[0])
            eager = constraints.constrained_beam_search(*args, window=window, record=trees[2])
            assert_same_hypotheses(eager, reference)
            assert_same_trees(trees[2], trees[0])
            graphs = (case + beam) % 2 == 0  # half of them on static buffers
            assert_same_hypotheses(
                fast_decoding.constrained_beam_search(*args, window=window, graphs=graphs), reference
            )
            recorded = fast_decoding.constrained_beam_search(*args, window=window, graphs=graphs, record=trees[1])
            assert_same_hypotheses(recorded, reference)
            assert_same_trees(trees[1], trees[0])


def test_the_constrained_cases_meet_and_miss_constraints():
    """The differential test's cases: outputs that met every constraint, and outputs that the
    length limit ended before (ranked after them)."""
    from textbook_beams import Progress

    def met_all(tokens, phrases):  # (as the search counts: a token counts for one phrase)
        progress = Progress()
        for token in tokens:
            progress = progress.after(token, phrases)
        return progress.complete(phrases)

    batch = random_batch(6, seed=9)
    met = []
    for eos_bias, limits in CASES:
        model, limits = tiny("gru-bahdanau", eos_bias), constrained_limits(limits_of(batch, limits))
        found = fast_decoding.constrained_beam_search(model, batch.src, batch.src_lengths, limits, CONSTRAINTS, 3, 3)
        for phrases, hypotheses in zip(CONSTRAINTS, found):
            holds = [met_all(h.tokens, phrases) for h in hypotheses]
            assert holds == sorted(holds, reverse=True)
            met += holds
    assert any(met) and not all(met)


@pytest.mark.parametrize(
    "name", model_names(["gru-bahdanau", "lstm-location", "transformer", "gru-coverage-fertility"])
)
def test_constraints_with_a_coverage_penalty_a_prefix_and_an_ensemble_as_the_reference(name):
    """The constrained banks with what a search may carry besides: a coverage penalty (each row's
    attention summed as it goes), a prefix (the loop processor, on a FixedPrefixState), an ensemble's members,
    in both executors as in the textbook banks."""
    from attnmt.seq2seq.ensemble import Ensemble

    batch = random_batch(6, seed=9)
    for case, (eos_bias, limits) in enumerate(CASES):
        model, limits = tiny(name, eos_bias), constrained_limits(limits_of(batch, limits))
        for beam, n_best in ((3, 2), (5, 5)):
            args = (model, batch.src, batch.src_lengths, limits, CONSTRAINTS, beam, n_best)
            reference = textbook_beams.constrained_beam_search(*args, beta=0.7)
            assert_same_hypotheses(constraints.constrained_beam_search(*args, beta=0.7), reference)
            fast = fast_decoding.constrained_beam_search(*args, beta=0.7, graphs=case % 2 == 0)
            assert_same_hypotheses(fast, reference)
        room = [max(n, len(p) + len(w) + 2) for n, p, w in zip(limits, PREFIXES.tokens, PREFIXES.words)]
        prefix = (Prefix(PREFIXES, None, batch.src.device),)
        trees = decoding.BeamRecorder(6, 3), decoding.BeamRecorder(6, 3)
        args = (model, batch.src, batch.src_lengths, room, CONSTRAINTS, 3, 2)
        reference = textbook_beams.constrained_beam_search(*args, record=trees[0], processors=prefix)
        assert_same_hypotheses(constraints.constrained_beam_search(*args, processors=prefix), reference)
        found = fast_decoding.constrained_beam_search(*args, graphs=True, record=trees[1], processors=prefix)
        assert_same_hypotheses(found, reference)
        assert_same_trees(trees[1], trees[0])
    ensemble = Ensemble([tiny(name), tiny("gru-luong-general")]).eval()
    args = (ensemble, batch.src, batch.src_lengths, constrained_limits(limits_of(batch, "usual")), CONSTRAINTS, 4, 2)
    for graphs in (False, True):
        assert_same_hypotheses(
            fast_decoding.constrained_beam_search(*args, graphs=graphs), textbook_beams.constrained_beam_search(*args)
        )
    assert_same_hypotheses(constraints.constrained_beam_search(*args), textbook_beams.constrained_beam_search(*args))


def test_a_constrained_beam_wider_than_the_vocabulary():
    """Fewer tokens than a row's k + 1 best slots (the empty ones stay empty), and fewer candidates
    than k (the live rows padded with impossible ones, as the textbook banks pad them), in both executors."""
    batch, model = random_batch(6, seed=9), tiny("gru-bahdanau")
    args = (model, batch.src, batch.src_lengths, constrained_limits([6] * 6), CONSTRAINTS, 20, 4)
    trees = decoding.BeamRecorder(6, 20), decoding.BeamRecorder(6, 20), decoding.BeamRecorder(6, 20)
    reference = textbook_beams.constrained_beam_search(*args, record=trees[0])
    assert_same_hypotheses(fast_decoding.constrained_beam_search(*args, record=trees[1], graphs=True), reference)
    assert_same_trees(trees[1], trees[0])
    assert_same_hypotheses(constraints.constrained_beam_search(*args, record=trees[2]), reference)
    assert_same_trees(trees[2], trees[0])


def test_constraints_no_longer_fall_back_to_the_reference_search(monkeypatch):
    """Where the fixed-shape executor runs (a GPU, faked here: search.fast_here), decode with
    constraints takes it (fast_decoding.constrained_beam_search), with a prefix, a recorder (beam_tree) and a stop too,
    with the reference's hypotheses and tree; a stop that says True ends it at a check."""
    from attnmt.seq2seq.decoding import DecodingStopped

    batch, model, settings = random_batch(6, seed=9), tiny("lstm-location"), DecodingConfig(beam=3)
    reference = decoding.BeamRecorder(6, 3)
    expected = [
        searches.decode(model, batch.src, batch.src_lengths, settings, n_best=2, constraints=CONSTRAINTS),
        searches.decode(model, batch.src, batch.src_lengths, settings, constraints=CONSTRAINTS, prefixes=PREFIXES),
        searches.decode(model, batch.src, batch.src_lengths, settings, constraints=CONSTRAINTS, record=reference),
    ]
    calls, original = [], fast_decoding.constrained_beam_search
    monkeypatch.setattr(fast_decoding, "constrained_beam_search", lambda *a, **k: calls.append(1) or original(*a, **k))
    monkeypatch.setattr(searches, "constrained_beam_search", lambda *a, **k: pytest.fail("the eager loop ran"))
    monkeypatch.setattr(searches, "fast_here", lambda device, model: True)
    tree = decoding.BeamRecorder(6, 3)
    found = [
        searches.decode(model, batch.src, batch.src_lengths, settings, n_best=2, constraints=CONSTRAINTS),
        searches.decode(model, batch.src, batch.src_lengths, settings, constraints=CONSTRAINTS, prefixes=PREFIXES),
        searches.decode(
            model, batch.src, batch.src_lengths, settings, constraints=CONSTRAINTS, record=tree, stop=lambda: False
        ),
    ]
    assert calls == [1, 1, 1]
    for ours, theirs in zip(found, expected):
        assert_same_hypotheses(ours, theirs)
    assert_same_trees(tree, reference)
    with pytest.raises(DecodingStopped, match=f"after {fast_decoding.CHECK_EVERY} decoder steps"):
        never = tiny("lstm-location", NEVER_ENDS)
        searches.decode(never, batch.src, batch.src_lengths, settings, constraints=CONSTRAINTS, stop=lambda: True)


def test_a_constrained_step_is_captured_where_the_state_keeps_its_shape(monkeypatch):
    captured = []
    original = fast_decoding._StepGraph.__init__
    monkeypatch.setattr(
        fast_decoding._StepGraph, "__init__", lambda self, step, loop: captured.append(1) or original(self, step, loop)
    )
    batch = random_batch(6, seed=9)
    for name in ("lstm-location", "transformer"):
        model = tiny(name, NEVER_ENDS)
        fast_decoding.constrained_beam_search(
            model, batch.src, batch.src_lengths, [12] * 6, CONSTRAINTS, beam=3, graphs=True
        )
    assert captured == [1, 1]


WITH_ATTENTION = [name for name in MODELS if name != "gru-none"]


@pytest.mark.parametrize("name", model_names(WITH_ATTENTION))
def test_a_coverage_penalty_ranks_as_the_reference_ranks(name):
    """With a coverage penalty (summed as the search goes, over each sentence's real positions,
    the attention window's hidden ones at the floor): the reference's n best, scores and order."""
    batch, beta = random_batch(6, seed=4), 3.0  # (strong enough to reorder 24 or more of 96 n-best lists per model)
    changed = False
    for case, (eos_bias, limits) in enumerate(CASES):
        model, limits = tiny(name, eos_bias), limits_of(batch, limits)
        args, window = (model, batch.src, batch.src_lengths, limits), window_of(name)
        reference = decoding.greedy_search(*args, window=window, beta=beta)
        for graphs in (False, True):
            assert_same_hypotheses(
                fast_decoding.greedy_search(*args, graphs=graphs, window=window, beta=beta), reference
            )
        for beam, n_best, alpha in BEAMS[1:]:
            reference = decoding.beam_search(*args, beam, n_best, alpha, window=window, beta=beta)
            fast = fast_decoding.beam_search(
                *args, beam, n_best, alpha, graphs=(case + beam) % 2 == 0, window=window, beta=beta
            )
            assert_same_hypotheses(fast, reference)
            if not changed:  # (searched without the penalty until one n best differs: the assertion needs one)
                plain = decoding.beam_search(*args, beam, n_best, alpha, window=window)
                changed = [[h.tokens for h in hyps] for hyps in plain] != [
                    [h.tokens for h in hyps] for hyps in reference
                ]
    assert changed  # (the penalty changed some n best: the cases test the ranking, not just the scores)


def test_a_coverage_penalty_without_attention_is_refused():
    batch = random_batch()
    with pytest.raises(AttnmtError, match="coverage_penalty: 0"):
        fast_decoding.beam_search(tiny("gru-none"), batch.src, batch.src_lengths, [6] * 5, 3, beta=0.4)


@pytest.mark.parametrize("names", [("gru-bahdanau", "lstm-location"), ("gru-luong-general", "transformer")])
def test_an_ensemble_finds_the_reference_hypotheses(names):
    """An ensemble's step is its members' steps (each state of fixed shape, a Transformer's
    FixedCache): the whole step is captured as one."""
    from attnmt.seq2seq.ensemble import Ensemble

    batch = random_batch(6, seed=5)
    for eos_bias, limits in CASES:
        model, limits = Ensemble([tiny(name, eos_bias) for name in names]).eval(), limits_of(batch, limits)
        args = (model, batch.src, batch.src_lengths, limits)
        for graphs in (False, True):
            assert_same_hypotheses(fast_decoding.greedy_search(*args, graphs=graphs), decoding.greedy_search(*args))
            assert_same_hypotheses(
                fast_decoding.beam_search(*args, 3, 2, graphs=graphs), decoding.beam_search(*args, 3, 2)
            )


def test_greedy_search_takes_the_columns_a_pick_draws(monkeypatch):
    """``pick`` (sampling): the most probable column gives greedy search; a sampler with a seed draws
    the same twice and another seed other outputs; each hypothesis scores its tokens as the model
    does; and the steps run eagerly, graphs or not (the generator is no graph's)."""
    from attnmt.core.config import Sampling
    from attnmt.data.batching import make_batch

    captures = []
    monkeypatch.setattr(fast_decoding, "_StepGraph", lambda step, loop: captures.append(1) or step)
    batch, model = random_batch(6, seed=6), tiny("gru-bahdanau")
    args = (model, batch.src, batch.src_lengths, limits_of(batch, "usual"))
    assert_same_hypotheses(
        fast_decoding.greedy_search(*args, pick=lambda log_probs: log_probs.argmax(-1)), decoding.greedy_search(*args)
    )

    def drawn(seed):
        sampler = decoding.sampler(Sampling(top_k=8), torch.Generator().manual_seed(seed))
        return fast_decoding.greedy_search(*args, graphs=True, pick=sampler)

    first, again, other = drawn(1), drawn(1), drawn(2)
    assert [h[0].tokens for h in first] == [h[0].tokens for h in again] != [h[0].tokens for h in other]
    assert not captures
    ended = [(i, h) for i, [h] in enumerate(first) if h.tokens[-1] == EOS]
    assert ended
    for i, hypothesis in ended:  # (its log-probability by teacher forcing, which adds the EOS back)
        forced = make_batch([batch.src[i, : batch.src_lengths[i] - 1].tolist()], [hypothesis.tokens[:-1]])
        with torch.no_grad():
            expected = model.target_log_probs(forced.src, forced.src_lengths, forced.tgt_in, forced.tgt_out)
        assert hypothesis.log_prob == pytest.approx(float(expected.sum()), abs=1e-4)


def test_the_cases_cover_early_ends_and_length_limits():
    batch = random_batch(6, seed=2)
    limits = limits_of(batch, "usual")
    early = fast_decoding.beam_search(tiny("gru-bahdanau", ENDS_EARLY), batch.src, batch.src_lengths, limits, 3, 3)
    assert all(h.tokens[-1] == EOS and len(h.tokens) < limit for hyps, limit in zip(early, limits) for h in hyps)
    never = fast_decoding.beam_search(tiny("gru-bahdanau", NEVER_ENDS), batch.src, batch.src_lengths, limits, 3, 3)
    # (ended by the limit: EOS, the only token there, and nowhere before it)
    assert all(
        h.tokens.index(EOS) == len(h.tokens) - 1 == limit - 1 for hyps, limit in zip(never, limits) for h in hyps
    )


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("beam, n_best", [(2, 1), (2, 2), (5, 1), (5, 3)])
def test_stopping_rules_and_ties_as_the_reference(beam, n_best, alpha):
    """A scripted model whose unlikely hypotheses end early and tie (decoding's test of its
    stopping rules): the same n best, in the same order among equal scores."""
    model, limits = ConfidentModel(), [30, 5, 12]
    src, lengths = torch.ones(3, 1, dtype=torch.long), torch.ones(3, dtype=torch.long)
    reference = decoding.beam_search(model, src, lengths, limits, beam, n_best, alpha)
    assert_same_hypotheses(fast_decoding.beam_search(model, src, lengths, limits, beam, n_best, alpha), reference)


def test_a_beam_wider_than_half_the_vocabulary():
    model, batch = tiny("gru-bahdanau"), random_batch()
    reference = decoding.beam_search(model, batch.src, batch.src_lengths, [6] * 5, beam=12, n_best=12)
    assert_same_hypotheses(
        fast_decoding.beam_search(model, batch.src, batch.src_lengths, [6] * 5, beam=12, n_best=12), reference
    )


def test_a_speech_model_whose_encoder_shortens_its_input():
    """The attention matrices are cut to the encoder's output (a quarter of the frames), as decoding cuts them."""
    from attnmt.core.config import SpeechConfig
    from attnmt.speech.model import build_speech_model

    config = RNNConfig(embedding_size=16, encoder_hidden=8, decoder_hidden=16, attention_size=8, dropout=0.0)
    model = build_speech_model(config, SpeechConfig(n_mels=8, conv_channels=4), 20).eval()
    g = torch.Generator().manual_seed(0)
    frames, lengths = torch.randn(4, 40, 8, generator=g), torch.tensor([40, 33, 17, 9])
    limits = [6, 9, 3, 12]
    for graphs in (False, True):
        assert_same_hypotheses(
            fast_decoding.greedy_search(model, frames, lengths, limits, graphs=graphs),
            decoding.greedy_search(model, frames, lengths, limits),
        )
        assert_same_hypotheses(
            fast_decoding.beam_search(model, frames, lengths, limits, 3, 2, graphs=graphs),
            decoding.beam_search(model, frames, lengths, limits, 3, 2),
        )


@pytest.mark.parametrize("name", ["gru-location", "transformer"])
def test_every_tensor_is_made_on_the_models_device(name):
    """With "meta" as the default device, a tensor made without naming its device lands there and
    the first operation mixing it with the model's (CPU) tensors fails."""
    model, batch = tiny(name), random_batch()
    limits = limits_of(batch, "usual")
    greedy = decoding.greedy_search(model, batch.src, batch.src_lengths, limits)
    beam = decoding.beam_search(model, batch.src, batch.src_lengths, limits, 3, 2)
    beta = 0.0 if name == "gru-none" else 0.4  # (a coverage penalty sums the attention)
    covered = decoding.beam_search(model, batch.src, batch.src_lengths, limits, 3, 2, beta=beta)
    with torch.device("meta"):
        for graphs in (False, True):
            assert_same_hypotheses(
                fast_decoding.greedy_search(model, batch.src, batch.src_lengths, limits, graphs=graphs), greedy
            )
            assert_same_hypotheses(
                fast_decoding.beam_search(model, batch.src, batch.src_lengths, limits, 3, 2, graphs=graphs), beam
            )
            assert_same_hypotheses(
                fast_decoding.beam_search(model, batch.src, batch.src_lengths, limits, 3, 2, graphs=graphs, beta=beta),
                covered,
            )


def test_n_best_above_the_beam_is_refused():
    batch = random_batch()
    with pytest.raises(ValueError, match="cannot exceed"):
        fast_decoding.beam_search(tiny("gru-bahdanau"), batch.src, batch.src_lengths, [5] * 5, beam=2, n_best=3)


def test_a_graph_is_captured_only_where_the_state_keeps_its_shape(monkeypatch):
    """RNN states keep their shape, and so does the Transformer's cache made for the whole search
    (FixedCache), and an ensemble's of those: after the warm-up the step runs on static buffers.
    A Transformer whose search is longer than its table of positions keeps the growing cache: its
    steps all run eagerly."""
    captured = []
    original = fast_decoding._StepGraph.__init__

    def spy(self, step, loop):
        captured.append(step)
        original(self, step, loop)

    monkeypatch.setattr(fast_decoding._StepGraph, "__init__", spy)
    batch = random_batch()
    from attnmt.seq2seq.ensemble import Ensemble

    short_table = tiny("transformer", NEVER_ENDS)
    short_table.tgt_embed.max_positions = 10
    ensemble = Ensemble([tiny("lstm-location", NEVER_ENDS), tiny("transformer", NEVER_ENDS)])
    for model, expected in (
        (tiny("lstm-location", NEVER_ENDS), 2),
        (tiny("transformer", NEVER_ENDS), 2),
        (ensemble, 2),
        (short_table, 0),
    ):
        captured.clear()
        fast_decoding.greedy_search(model, batch.src, batch.src_lengths, [12] * 5, graphs=True)
        fast_decoding.beam_search(model, batch.src, batch.src_lengths, [12] * 5, beam=3, graphs=True)
        assert len(captured) == expected


def on_meta(value):
    return fast_decoding._map(lambda t: t.to("meta"), value)


@pytest.mark.parametrize(
    "name", model_names(["gru-bahdanau-window", "gru-location", "lstm-bahdanau-2-layers", "gru-none", "transformer"])
)
def test_a_step_reads_no_value_back(name):
    """A step runs on the "meta" device, where tensors have shapes but no values: anything that
    reads one (item, tolist, bool, nonzero, a boolean mask, an index from a tensor) fails there.
    So neither the model's decode_step nor the search's bookkeeping waits for the device."""
    model, batch = tiny(name), random_batch(4)
    with torch.inference_mode():
        memory = on_meta(model.encode(batch.src, batch.src_lengths, window_of(name)))
        model = copy.deepcopy(model).to("meta")

        def beam(limits, *args, processors=(), **options):  # (beam search on fixed shapes)
            return fast_decoding._Beam(model, memory, decoding.BeamSearch(memory, limits, *args, **options), processors)

        def banks(limits, phrases, *args, processors=(), **options):  # (and constrained)
            search = ConstrainedBeamSearch(memory, limits, phrases, *args, **options)
            return fast_decoding._Beam(model, memory, search, processors)

        searches_run = [fast_decoding._Greedy(model, memory, [6, 6, 6, 6], 1.0), beam([3, 4, 5, 6], 3, 2, 1.0)]
        if name != "gru-none":  # (and with a coverage penalty, which sums the attention)
            searches_run.append(beam([3, 4, 5, 6], 3, 2, 1.0, beta=0.4))
        searches_run.append(beam([3, 4, 5, 6], 3, 2, 1.0, record=True))  # (a tree)
        four = Prefixes(PREFIXES.tokens[:4], PREFIXES.words[:4], PREFIXES.spelling)  # (a prefix)
        prefix = (Prefix(four, None, torch.device("meta")),)
        searches_run += [
            fast_decoding._Greedy(model, memory, [9, 9, 9, 9], 1.0, processors=prefix),
            beam([9, 9, 9, 9], 3, 2, 1.0, processors=prefix),
        ]
        searches_run += [  # (constraints, with a tree, a prefix)
            banks([6, 7, 8, 9], CONSTRAINTS[:4], 3, 2, 1.0),
            banks([6, 7, 8, 9], CONSTRAINTS[2:], 3, 2, 1.0, record=True),
            banks([9, 9, 9, 9], CONSTRAINTS[:4], 3, 2, 1.0, processors=prefix),
        ]
        if name != "gru-none":
            searches_run.append(banks([6, 7, 8, 9], CONSTRAINTS[:4], 3, 2, 1.0, beta=0.4))
        for search in searches_run:
            loop = search.start()
            for _ in range(4):
                loop = search.step(loop)
            assert loop.prev.device.type == "meta"


READS = ("item", "tolist", "nonzero", "__bool__", "__int__", "__float__")


@pytest.mark.parametrize("graphs", [False, True])
def test_the_loop_asks_whether_all_are_done_only_every_few_steps(monkeypatch, graphs):
    """Values read from tensors while the step loop runs (not before: encoding; nor after:
    reading the hypotheses back): one per CHECK_EVERY steps."""
    reads, inside = [], [False]
    for name in READS:
        method = getattr(torch.Tensor, name)

        def counted(self, *args, _method=method, _name=name, **kwargs):
            if inside[0]:
                reads.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    steps_run, run = [], fast_decoding.run_fixed

    def loop(search, steps, graphs, *rest):
        inside[0] = True
        try:
            result = run(search, steps, graphs, *rest)
        finally:
            inside[0] = False
        steps_run.append(result[1])
        return result

    monkeypatch.setattr(fast_decoding, "run_fixed", loop)
    batch = random_batch()
    model = tiny("gru-bahdanau", NEVER_ENDS)  # every sentence runs to its limit, 30 steps
    fast_decoding.greedy_search(model, batch.src, batch.src_lengths, [30] * 5, graphs=graphs)
    fast_decoding.beam_search(model, batch.src, batch.src_lengths, [30] * 5, beam=3, graphs=graphs)
    assert steps_run == [30, 30]
    assert reads == ["__bool__"] * 2 * (30 // fast_decoding.CHECK_EVERY)


@pytest.mark.parametrize("graphs", [False, True])
def test_a_constrained_search_asks_whether_all_are_done_only_every_few_steps(monkeypatch, graphs):
    """The constrained banks' steps read nothing back either (with a tree, too): one read per
    CHECK_EVERY steps."""
    reads, inside = [], [False]
    for name in READS:
        method = getattr(torch.Tensor, name)

        def counted(self, *args, _method=method, _name=name, **kwargs):
            if inside[0]:
                reads.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    run = fast_decoding.run_fixed

    def loop(*args):
        inside[0] = True
        try:
            return run(*args)
        finally:
            inside[0] = False

    monkeypatch.setattr(fast_decoding, "run_fixed", loop)
    batch, model = random_batch(6, seed=9), tiny("gru-bahdanau", NEVER_ENDS)
    tree = decoding.BeamRecorder(6, 3)
    args = (model, batch.src, batch.src_lengths, [30] * 6, CONSTRAINTS, 3)
    fast_decoding.constrained_beam_search(*args, graphs=graphs, record=tree)
    assert reads == ["__bool__"] * (30 // fast_decoding.CHECK_EVERY)


def test_the_history_reads_back_what_the_lists_of_the_textbook_search_read():
    """decoding.History, buffers written at their slots (a step counter tensor, as a graph writes,
    or the eager loop's int), gives back the tokens and attention of the textbook search's list
    history (textbook_beams.ListHistory), for hypotheses that end at one step or at several
    (read_back), and each is its parents followed by hand."""
    from textbook_beams import ListHistory

    g = torch.Generator().manual_seed(0)
    steps, rows, width = 5, 4, 3
    tokens = torch.randint(4, 20, (steps, rows), generator=g)
    parents = torch.randint(0, rows, (steps, rows), generator=g)
    weights = torch.rand(steps, rows, width, generator=g)
    lists, fixed = ListHistory(), decoding.History(steps, rows, torch.device("cpu"))
    every_slot = torch.arange(rows)
    for t in range(steps):
        lists.add_weights(weights[t])
        lists.add_rows(tokens[t], parents[t])
        fixed.write(torch.tensor([t]) if t % 2 else t, tokens[t], parents[t], weights[t], every_slot)
    ends, ended, last = torch.tensor([[4, 2], [0, 3]]), torch.tensor([[1, 3], [2, 0]]), torch.tensor([[7, 8], [9, 10]])
    read, attention = fixed.read_back(ends, ended, last, steps)
    for i in range(2):
        for j in range(2):
            t = int(ends[i, j])
            one, matrix = lists.read(t, ended[i, j : j + 1], last[i, j : j + 1])
            assert one[0] == read[i, j, : t + 1].tolist()
            torch.testing.assert_close(matrix[0], attention[i, j, : t + 1])
            row, expected = int(ended[i, j]), [int(last[i, j])]  # (followed by hand)
            for s in range(t - 1, -1, -1):
                expected.insert(0, int(tokens[s, row]))
                row = int(parents[s, row])
            assert one[0] == expected


def test_a_row_writes_at_its_slot_and_leaves_the_others_in_place():
    """The eager loop drops done sentences' rows, so a step writes only some slots: History.write at
    ``slots`` changes those alone, and weights go to ``weight_slots`` where they differ."""
    history = decoding.History(3, 4, torch.device("cpu"))
    history.write(0, torch.tensor([5, 6, 7, 8]), torch.tensor([0, 1, 2, 3]), torch.ones(4, 2), torch.arange(4))
    history.write(1, torch.tensor([9]), torch.tensor([3]), torch.full((1, 2), 2.0), torch.tensor([2]))
    assert history.tokens[1].tolist() == [0, 0, 9, 0] and history.parents[1].tolist() == [0, 0, 3, 0]
    assert history.weights[1].sum(1).tolist() == [0.0, 0.0, 4.0, 0.0]
    history.write(2, torch.tensor([4]), None, torch.full((1, 2), 3.0), torch.tensor([1]), torch.tensor([0]))
    assert history.tokens[2].tolist() == [0, 4, 0, 0] and history.parents[2].tolist() == [0, 0, 0, 0]
    assert history.weights[2].sum(1).tolist() == [6.0, 0.0, 0.0, 0.0]


def test_all_done_ends_the_loop_at_the_next_check():
    batch = random_batch()
    model = tiny("gru-bahdanau", ENDS_EARLY)
    memory = model.encode(batch.src, batch.src_lengths)
    search = fast_decoding._Beam(model, memory, decoding.BeamSearch(memory, [40] * 5, 3, 1, 1.0))
    with torch.inference_mode():
        loop, steps = fast_decoding.run_fixed(search, 40, graphs=False)
    assert steps < 40 and steps % fast_decoding.CHECK_EVERY == 0 and bool(loop.done.all())


def test_the_beam_tree_no_longer_falls_back_to_the_reference_search(monkeypatch):
    """Where the fixed-shape executor runs (a GPU, faked here: search.fast_here), decode's
    beam search with a recorder (beam_tree) and a stop is its own, with the reference's tree and
    hypotheses; a stop that says True ends it at a check."""
    from attnmt.seq2seq.decoding import DecodingStopped

    batch, model = random_batch(), tiny("gru-bahdanau")
    settings = DecodingConfig()
    reference = decoding.BeamRecorder(batch.src.size(0), 3)
    expected = searches.decode(model, batch.src, batch.src_lengths, settings, beam=3, n_best=3, record=reference)
    calls = []
    original = fast_decoding.beam_search
    monkeypatch.setattr(fast_decoding, "beam_search", lambda *a, **k: calls.append(k["record"]) or original(*a, **k))
    monkeypatch.setattr(decoding, "beam_search", lambda *a, **k: pytest.fail("the reference search ran"))
    monkeypatch.setattr(searches, "fast_here", lambda device, model: True)
    tree = decoding.BeamRecorder(batch.src.size(0), 3)
    found = searches.decode(
        model, batch.src, batch.src_lengths, settings, beam=3, n_best=3, record=tree, stop=lambda: False
    )
    assert calls == [tree]
    assert_same_hypotheses(found, expected)
    assert_same_trees(tree, reference)
    with pytest.raises(DecodingStopped, match=f"after {fast_decoding.CHECK_EVERY} decoder steps"):
        searches.decode(
            tiny("gru-bahdanau", NEVER_ENDS), batch.src, batch.src_lengths, settings, beam=3, stop=lambda: True
        )


def test_only_observers_take_a_search_to_the_eager_loop(monkeypatch):
    """Where the fixed-shape executor runs (a GPU, faked here: search.fast_here), no option of decode sends a
    search to the eager loop (decoding.run_eager): greedy, sampling, beam, constraints, a prefix, a coverage
    penalty, a shortlist, a beam tree and a stop, each and together, run in fast_decoding.run_fixed; the
    hypotheses are the eager loop's. Only observers (the trace's: they read each step on the host) run eagerly."""
    from attnmt.seq2seq import constraints
    from attnmt.seq2seq.shortlist import Shortlist

    batch, model = random_batch(6, seed=7), tiny("gru-bahdanau")
    table = Shortlist([[5, 7, 8, 9, 10, 12] for _ in range(20)], [4, 5])
    sampling = Sampling(top_k=5, seed=3)
    cases = [
        {"beam": 1},
        {"beam": 1, "sampling": sampling},
        {"beam": 3, "n_best": 2},
        {"beam": 3, "constraints": CONSTRAINTS},
        {"beam": 1, "prefixes": PREFIXES},
        {"beam": 3, "prefixes": PREFIXES, "constraints": CONSTRAINTS, "coverage_penalty": 0.4},
        {"beam": 3, "n_best": 3, "coverage_penalty": 0.4, "shortlist": table},
        {"beam": 3, "prefixes": PREFIXES, "shortlist": table, "record": True, "stop": True},
    ]

    def decoded(case):
        options = dict(case)
        settings = DecodingConfig(coverage_penalty=options.pop("coverage_penalty", 0.0))
        if options.pop("record", False):
            options["record"] = decoding.BeamRecorder(6, options["beam"])
        if options.pop("stop", False):
            options["stop"] = lambda: False
        if "sampling" in options:
            options["generator"] = torch.Generator().manual_seed(3)
        return searches.decode(model, batch.src, batch.src_lengths, settings, **options), options.get("record")

    expected = [decoded(case) for case in cases]
    loops, run_fixed, run_eager = [], fast_decoding.run_fixed, decoding.run_eager
    monkeypatch.setattr(fast_decoding, "run_fixed", lambda *a, **k: loops.append("fixed") or run_fixed(*a, **k))
    for module in (decoding, constraints):  # (where the eager searches find it)
        monkeypatch.setattr(module, "run_eager", lambda *a, **k: loops.append("eager") or run_eager(*a, **k))
    monkeypatch.setattr(searches, "fast_here", lambda device, model: True)
    for case, (hypotheses, tree) in zip(cases, expected):
        loops.clear()
        found, recorded = decoded(case)
        assert loops == ["fixed"], case
        if "sampling" not in case:  # (the fixed-shape executor draws for every row: other draws)
            assert_same_hypotheses(found, hypotheses)
        if tree is not None:
            assert_same_trees(recorded, tree)
    loops.clear()
    searches.decode(model, batch.src, batch.src_lengths, DecodingConfig(), beam=3, observers=(StepsSeen(),))
    assert loops == ["eager"]


class StepsSeen:
    """An observer of the eager loop that counts its steps."""

    def __init__(self):
        self.steps = []

    def begin(self, memory):
        self.steps.clear()

    def observe(self, t, step, strategy):
        self.steps.append(t)


def test_the_beam_tree_is_an_observer_of_the_eager_loop():
    """decoding.BeamRecorder watches run_eager's steps (``observe``: the eager binding's ``tree_step``, read from the
    strategy's TreeBuffers), handed to decode as an observer or as ``record``: the tree of the fixed-shape
    executor's TreeBuffers replayed at the end, beam search and constrained, a node's step that of the step
    observed."""
    batch, model, settings = random_batch(6, seed=2), tiny("gru-bahdanau"), DecodingConfig(beam=3)
    args = (model, batch.src, batch.src_lengths)
    for options in ({}, {"constraints": CONSTRAINTS}):
        observed, recorded, fixed = (decoding.BeamRecorder(6, 3) for _ in range(3))
        steps = StepsSeen()
        found = searches.decode(*args, settings, n_best=3, observers=(observed, steps), **options)
        assert_same_hypotheses(searches.decode(*args, settings, n_best=3, record=recorded, **options), found)
        assert_same_trees(observed, recorded)
        limits = decoding.output_limits(batch.src_lengths, settings, None, options.get("constraints"))
        if options:
            fast = fast_decoding.constrained_beam_search(
                *args, limits, CONSTRAINTS, 3, 3, settings.length_penalty, record=fixed
            )
        else:
            fast = fast_decoding.beam_search(*args, limits, 3, 3, settings.length_penalty, record=fixed)
        assert_same_hypotheses(fast, found)
        assert_same_trees(fixed, observed)
        assert steps.steps == list(range(max(node.step for tree in observed.trees for node in tree)))


def test_decode_keeps_the_reference_searches_on_a_cpu(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the fast searches are for GPUs")

    monkeypatch.setattr(fast_decoding, "greedy_search", refuse)
    monkeypatch.setattr(fast_decoding, "beam_search", refuse)
    batch = random_batch()
    searches.decode(tiny("gru-bahdanau"), batch.src, batch.src_lengths, DecodingConfig(), beam=1)
    searches.decode(tiny("gru-bahdanau"), batch.src, batch.src_lengths, DecodingConfig(), beam=3)


def strict_steps(monkeypatch):
    """Makes every eager search step run in CUDA's sync debug mode "error": a step that waits for
    the GPU raises (and a capture would fail)."""
    for search in (fast_decoding._Greedy, fast_decoding._Beam):

        def strict(self, loop, _step=search.step):
            torch.cuda.set_sync_debug_mode("error")
            try:
                return _step(self, loop)
            finally:
                torch.cuda.set_sync_debug_mode("default")

        monkeypatch.setattr(search, "step", strict)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    [
        "gru-bahdanau",
        "lstm-location",
        "gru-bahdanau-window",
        "transformer",
        "gru-coverage-fertility",
        "lstm-coverage-nn",
        "lstm-luong-general-csparsemax-no-input-feeding",
    ],
)
def test_on_a_gpu_graphs_eager_steps_and_the_reference_agree(monkeypatch, name):
    """On CUDA: graphs on, graphs off and the reference give the same hypotheses for greedy and
    beam 5 (and beam 5 with a coverage penalty, its search tree, prefixes, constraints); a step never
    synchronises, sampling's neither; decode() takes the fast searches on a GPU (sampling too),
    and the reference ones with speed.plain()."""
    strict_steps(monkeypatch)
    batch = random_batch(16, seed=3).to("cuda")
    for eos_bias, limits in CASES:
        model, limits = tiny(name, eos_bias).cuda(), limits_of(batch, limits)
        args, window = (model, batch.src, batch.src_lengths, limits), window_of(name)
        reference = decoding.greedy_search(*args, window=window)
        for graphs in (False, True):
            assert_same_hypotheses(
                fast_decoding.greedy_search(*args, graphs=graphs, window=window), reference, atol=1e-4
            )
        reference = decoding.beam_search(*args, beam=5, n_best=3, window=window)
        for graphs in (False, True):
            assert_same_hypotheses(
                fast_decoding.beam_search(*args, beam=5, n_best=3, graphs=graphs, window=window), reference, atol=1e-4
            )
        trees = [decoding.BeamRecorder(batch.src.size(0), 5) for _ in range(3)]  # the search tree
        reference = decoding.beam_search(*args, beam=5, n_best=3, window=window, record=trees[0])
        for graphs, tree in zip((False, True), trees[1:]):
            found = fast_decoding.beam_search(*args, beam=5, n_best=3, graphs=graphs, window=window, record=tree)
            assert_same_hypotheses(found, reference, atol=1e-4)
            assert_same_trees(tree, trees[0], atol=1e-4)
        many = Prefixes((PREFIXES.tokens * 3)[:16], (PREFIXES.words * 3)[:16], PREFIXES.spelling)  # prefixes
        room = [max(n, len(p) + len(w) + 2) for n, p, w in zip(limits, many.tokens, many.words)]
        prefixed = (model, batch.src, batch.src_lengths, room)
        prefix = {"processors": (Prefix(many, None, batch.src.device),)}
        for search, options in (
            (decoding.greedy_search, prefix),
            (decoding.beam_search, {"beam": 5, "n_best": 3} | prefix),
        ):
            reference = search(*prefixed, window=window, **options)
            fast = getattr(fast_decoding, search.__name__)
            for graphs in (False, True):
                found = fast(*prefixed, window=window, graphs=graphs, **options)
                assert_same_hypotheses(found, reference, atol=1e-4)
        # constraints, with their search tree

        phrases = (CONSTRAINTS * 3)[:16]
        room = [max(n, sum(map(len, p)) + 2) for n, p in zip(limits, phrases)]
        constrained = (model, batch.src, batch.src_lengths, room, phrases, 5, 3)
        trees = [decoding.BeamRecorder(batch.src.size(0), 5) for _ in range(3)]
        reference = constraints.constrained_beam_search(*constrained, window=window, record=trees[0])
        for graphs, tree in zip((False, True), trees[1:]):
            found = fast_decoding.constrained_beam_search(*constrained, window=window, graphs=graphs, record=tree)
            assert_same_hypotheses(found, reference, atol=1e-4)
            assert_same_trees(tree, trees[0], atol=1e-4)
        reference = decoding.beam_search(*args, beam=5, n_best=3, window=window, beta=1.0)  # a coverage penalty
        for graphs in (False, True):
            assert_same_hypotheses(
                fast_decoding.beam_search(*args, beam=5, n_best=3, graphs=graphs, window=window, beta=1.0),
                reference,
                atol=1e-4,
            )
        sampler = decoding.sampler(Sampling(top_k=5, top_p=0.9), torch.Generator("cuda").manual_seed(1))
        drawn = fast_decoding.greedy_search(*args, window=window, pick=sampler)  # (a step that syncs raises)
        assert len(drawn) == batch.src.size(0)

    calls = []
    monkeypatch.setattr(fast_decoding, "beam_search", lambda *args, **kwargs: calls.append("fast") or [])
    monkeypatch.setattr(fast_decoding, "greedy_search", lambda *args, **kwargs: calls.append("sampled") or [])
    settings = DecodingConfig(attention_window=window_of(name))
    searches.decode(model, batch.src, batch.src_lengths, settings, beam=3)
    searches.decode(model, batch.src, batch.src_lengths, settings, sampling=Sampling(top_k=5))
    with speed.plain():
        searches.decode(model, batch.src, batch.src_lengths, settings, beam=3)
    assert calls == ["fast", "sampled"]


@pytest.mark.gpu
def test_on_a_gpu_an_ensemble_is_captured_and_finds_the_reference_hypotheses(monkeypatch):
    from attnmt.seq2seq.ensemble import Ensemble

    strict_steps(monkeypatch)
    batch = random_batch(16, seed=3).to("cuda")
    for eos_bias, limits in CASES:
        model = Ensemble([tiny("gru-bahdanau", eos_bias), tiny("transformer", eos_bias)]).cuda().eval()
        args = (model, batch.src, batch.src_lengths, limits_of(batch, limits))
        for graphs in (False, True):
            assert_same_hypotheses(
                fast_decoding.greedy_search(*args, graphs=graphs), decoding.greedy_search(*args), atol=1e-4
            )
            assert_same_hypotheses(
                fast_decoding.beam_search(*args, 5, 3, graphs=graphs), decoding.beam_search(*args, 5, 3), atol=1e-4
            )


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gru-bahdanau", "lstm-location", "transformer"])
def test_on_a_gpu_graphs_under_autocast_and_a_bf16_output_layer(monkeypatch, name):
    """bf16 autocast (whose cache of cast weights a graph must not read) and the output layer's
    bf16 weight (cast once, before the capture): the graph computes what the eager steps compute."""
    strict_steps(monkeypatch)
    batch = random_batch(16, seed=4).to("cuda")
    model = tiny(name).cuda()
    limits = limits_of(batch, "usual")
    args = (model, batch.src, batch.src_lengths, limits)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for search in (fast_decoding.greedy_search, fast_decoding.beam_search):
            assert_same_hypotheses(search(*args, graphs=True), search(*args, graphs=False), atol=1e-4)
    model.generator.compute_dtype = torch.bfloat16
    for search in (fast_decoding.greedy_search, fast_decoding.beam_search):
        assert_same_hypotheses(search(*args, graphs=True), search(*args, graphs=False), atol=1e-4)


class FakeCudaCapture:
    """torch.cuda's graphs, streams and pools on a CPU, recording what capture.captured asks of them."""

    def __init__(self, monkeypatch):
        self.events, self.pools = [], 0
        fake = self

        class Graph:
            def capture_begin(self, pool, capture_error_mode):
                fake.events.append(("begin", pool))

            def capture_end(self):
                fake.events.append(("end",))

            def replay(self):
                fake.events.append(("replay",))

        class Stream:
            def __init__(self, name="side"):
                self.name = name

            def wait_stream(self, other):
                fake.events.append(("wait", self.name, other.name))

        def graph_pool_handle():
            fake.pools += 1
            return (0, fake.pools)

        current = Stream("current")
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current)
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: Stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", graph_pool_handle)
        monkeypatch.setattr(capture, "_THREAD", capture._PerThread())

        def refuse(*args, **kwargs):
            raise AssertionError("torch.cuda.graph waits for the GPU and empties its caches at every capture")

        monkeypatch.setattr(torch.cuda, "graph", refuse)


def test_a_capture_is_ordered_after_the_stream_and_the_graphs_of_a_thread_share_a_pool(monkeypatch):
    """What capture.captured asks of CUDA, faked on a CPU: the capture runs on a side stream that
    waits for the current one (no wait for the whole GPU, no emptied caches), the current stream then
    waits for it, a capture always ends; a thread's graphs share one pool, whose last graph is kept
    alive (a pool whose graphs are all gone cannot be joined: PyTorch asserts); another thread has its
    own pool, and so does the next capture after a failed one."""
    cuda = FakeCudaCapture(monkeypatch)
    device = torch.device("cuda", 0)
    last_pool = lambda: [event[1] for event in cuda.events if event[0] == "begin"][-1]  # noqa: E731
    replay = capture.captured(lambda: cuda.events.append(("run",)), device)
    assert cuda.events == [
        ("wait", "side", "current"),
        ("begin", (0, 1)),
        ("run",),
        ("end",),
        ("wait", "current", "side"),
    ]
    replay()
    assert cuda.events[-1] == ("replay",)
    assert capture._THREAD.graphs[device].last.replay == replay  # alive after its search: the pool stays
    cuda.events.clear()
    capture.captured(lambda: None, device)
    assert last_pool() == (0, 1)  # the same pool

    def failing():
        raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError):
        capture.captured(failing, device)
    assert cuda.events[-2:] == [("begin", (0, 1)), ("end",)]  # the capture ended ...
    capture.captured(lambda: None, device)
    assert last_pool() == (0, 2)  # ... and the next one starts a pool of its own
    other = threading.Thread(target=capture.captured, args=(lambda: None, device))
    other.start()
    other.join()
    assert last_pool() == (0, 3) and cuda.pools == 3
