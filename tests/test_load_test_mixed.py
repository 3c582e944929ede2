"""The pure parts of benchmarks/load_test_mixed.py: its arguments and how it judges answers, on
fake answers (no model, no server: the real mixed run takes minutes)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("load_test_mixed", REPO / "benchmarks" / "load_test_mixed.py")
mixed = importlib.util.module_from_spec(_spec)
sys.modules["load_test_mixed"] = mixed  # its dataclass looks its module up there
_spec.loader.exec_module(mixed)


def translate_answer(source: str, text: str, source_tokens=None) -> dict:
    return {"translations": [{"source": source, "source_tokens": source_tokens or [], "candidates": [{"text": text}]}]}


def pair_answer(tokens, label: str, probabilities: dict) -> dict:
    return {"premise_tokens": tokens[0], "hypothesis_tokens": tokens[1], "label": label, "probabilities": probabilities}


def test_arguments_and_their_limits():
    args = mixed.parse_args([])
    assert (args.clients, args.requests, args.distinct) == (24, 900, 40)
    assert mixed.parse_args(["--clients", "3", "--requests", "10"]).clients == 3
    for bad in (["--clients", "0"], ["--requests", "0"], ["--max-seconds", "0"], ["--distinct", "0"]):
        with pytest.raises(SystemExit):
            mixed.parse_args(bad)


def test_text_answers_ok_wrong_different_lost():
    one = mixed.Item("text", "/translate", {}, "25.04.1974", "1974-04-25")
    two = mixed.Item("text", "/translate", {}, "1.2.2000", "2000-02-01")
    others = [one, two]
    assert mixed.judge(one, translate_answer("25.04.1974", "1974-04-25"), others) == "ok"
    assert mixed.judge(one, translate_answer("1.2.2000", "2000-02-01"), others) == "wrong"
    assert mixed.judge(one, translate_answer("25.04.1974", "1974-04-26"), others) == "different"
    assert mixed.judge(one, {"translations": []}, others) == "lost"


def test_audio_answers_are_named_by_their_encoder_states():
    states = ["0.00", "0.04", "0.08"]
    one = mixed.Item("audio", "/translate", {}, states, "hello")
    same_length = mixed.Item("audio", "/translate", {}, states, "world")
    longer = mixed.Item("audio", "/translate", {}, [*states, "0.12"], "hello there")
    others = [one, same_length, longer]
    assert mixed.judge(one, translate_answer("audio", "hello", states), others) == "ok"
    assert mixed.judge(one, translate_answer("audio", "hello there", longer.identity), others) == "wrong"
    # as long as another file, and its transcript: another request's answer
    assert mixed.judge(one, translate_answer("audio", "world", states), others) == "wrong"
    assert mixed.judge(one, translate_answer("audio", "hallo", states), others) == "different"


def test_pair_answers_compare_label_and_probabilities():
    tokens = (["▁a", "</s>"], ["▁b", "</s>"])
    probabilities = {"entailment": 0.7, "neutral": 0.2, "contradiction": 0.1}
    one = mixed.Item("pair", "/classify", {}, tokens, ("entailment", probabilities))
    two = mixed.Item("pair", "/classify", {}, (["▁c", "</s>"], ["▁d", "</s>"]), ("neutral", probabilities))
    others = [one, two]
    near = {k: v + 1e-6 for k, v in probabilities.items()}
    assert mixed.judge(one, pair_answer(tokens, "entailment", near), others) == "ok"
    assert mixed.judge(one, pair_answer(two.identity, "neutral", probabilities), others) == "wrong"
    assert mixed.judge(one, pair_answer(tokens, "neutral", probabilities), others) == "different"
    moved = {**probabilities, "entailment": 0.69}
    assert mixed.judge(one, pair_answer(tokens, "entailment", moved), others) == "different"


def test_the_kinds_are_sent_in_turn():
    by_kind = {
        kind: [mixed.Item(kind, "/", {}, i, i) for i in range(n)]
        for kind, n in (("text", 3), ("audio", 1), ("pair", 2))
    }
    assert [(item.kind, item.identity) for item in mixed.interleaved(by_kind)] == [
        ("text", 0),
        ("audio", 0),
        ("pair", 0),
        ("text", 1),
        ("audio", 0),
        ("pair", 1),
        ("text", 2),
        ("audio", 0),
        ("pair", 0),
    ]


def test_rows_count_5xx_among_errors_and_the_percentiles():
    counts = {**mixed.new_counts(), "sent": 4, "answered": 2, "errors": 2, "5xx": 1, "latencies": [0.2, 0.1, 0.3]}
    row = mixed.summary_row("text", counts, seconds=2.0)
    assert (row["requests_per_s"], row["p50_ms"], row["p99_ms"], row["5xx"]) == (1.0, 200.0, 300.0, 1)
    assert "| text | 2/4 | 1.0 | 200.0 | 300.0 | 2 | 1 |" in mixed.table([row])
