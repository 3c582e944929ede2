"""The step-by-step trace agrees with translate and with the attention equations."""

import numpy as np
import pytest


@pytest.mark.parametrize("text", ["abcdef", "jihgfedcba"])
def test_trace_matches_greedy_translation_and_equations(reverse_model, text):
    model, _ = reverse_model
    traced = model.trace(text, top_k=3)
    [greedy] = model.translate([text], beam=1)
    assert traced.text == greedy.text and traced.tokens == greedy.tokens
    np.testing.assert_allclose(traced.attention, greedy.attention, atol=1e-6)
    assert traced.encoder_states.shape[0] == len(traced.source_tokens)
    for step in traced.steps:
        softmax = np.exp(step.scores - step.scores.max())
        np.testing.assert_allclose(step.weights, softmax / softmax.sum(), atol=1e-5)  # a = softmax(e)
        np.testing.assert_allclose(step.context, step.weights @ traced.encoder_states, atol=1e-5)  # c = sum a h
        assert step.top_k[0][0] == step.token and len(step.top_k) == 3
        assert step.top_k[0][1] == pytest.approx(step.probability)
        assert [p for _, p in step.top_k] == sorted((p for _, p in step.top_k), reverse=True)


def test_short_reprs_of_the_translator_its_translations_and_traces(reverse_model):
    """A trace printed in a notebook is one line, not tens of thousands of characters (issue 28)."""
    model, _ = reverse_model
    text = "abcdefghij" * 5
    traced = model.trace(text, top_k=3)
    [translation] = model.translate([text], beam=2, n_best=2)
    parameters = sum(p.numel() for p in model.model.parameters())
    assert repr(model).startswith(f"<Translator {model.folder}:") and f"{parameters:,} parameters" in repr(model)
    assert repr(traced) == (
        f"DecodingTrace({text!r} -> {traced.text!r}, {len(traced.source_tokens)} source tokens, "
        f"{len(traced.steps)} steps, encoder states {traced.encoder_states.shape[0]}x"
        f"{traced.encoder_states.shape[1]})"
    )
    assert repr(traced.steps[0]).startswith(f"StepTrace({traced.steps[0].token!r}, p ")
    assert f"attention {len(translation.tokens)}x{len(translation.source_tokens)}" in repr(translation)
    assert "2 candidates" in repr(translation) and repr(translation.best).startswith("Candidate(")
    assert max(len(repr(x)) for x in (model, traced, translation, translation.best, traced.steps[0])) < 300


def test_reprs_show_shapes_not_numbers():
    """Hand-made objects: a transcription with its log-mels, a trace of many steps (issue 28)."""
    from attnmt.api import Candidate
    from attnmt.seq2seq.trace import DecodingTrace, StepTrace
    from attnmt.speech.recognizer import Transcription

    attention = np.full((3, 200), 1 / 200)
    transcription = Transcription(
        "a.wav",
        [f"{i * 0.04:.2f}s" for i in range(200)],
        [Candidate("hi", ["h", "i", "</s>"], -0.5, attention)],
        features=np.ones((800, 80)),
    )
    assert repr(transcription) == (
        "Transcription('a.wav' -> 'hi', score -0.500, 200 source tokens, 3 output tokens, attention 3x200, 1 candidate)"
    )
    steps = [StepTrace("x", 4, 0.9, np.zeros(200), attention[0], np.ones(512), np.ones(1024), [("x", 0.9)])] * 60
    trace = DecodingTrace("a.wav", ["s"] * 200, np.ones((200, 512)), steps, "x" * 60, features=np.ones((800, 80)))
    assert repr(trace).endswith("60 steps, encoder states 200x512, 800 audio frames)") and len(repr(trace)) < 200
    assert repr(steps[0]) == "StepTrace('x', p 0.900, 200 weights, context 512, state 1024, top 1)"


def test_the_trace_is_an_observer_of_decodes_loop(reverse_model, monkeypatch):
    """trace goes through search.decode, the one entry, as an observer of its greedy search (on
    every device the eager executor: an observer reads each step). (The beam tree is an observer of
    beam search's loop: tests/test_decoding.py.)"""
    from attnmt.seq2seq import search

    model, _ = reverse_model
    calls, decode = [], search.decode
    monkeypatch.setattr(search, "decode", lambda *a, **k: calls.append(k["observers"]) or decode(*a, **k))
    traced = model.trace("abcdef", top_k=3)
    [[observer]] = calls
    assert observer.steps is traced.steps
