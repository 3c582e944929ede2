"""Tests for attnmt.translation.evaluation (BLEU/chrF via sacrebleu, BLEU by source length)."""

import json

import pytest
import sacrebleu

from attnmt.core.errors import AttnmtError
from attnmt.translation.evaluation import (
    bleu_by_length,
    corpus_scores,
    evaluation_report,
    format_report,
)

REFS = [
    "The cat sat on the mat.",
    "There is a book on the table.",
    "We will meet again tomorrow morning.",
]
HYPS = [
    "The cat sat on a mat.",
    "A book is on the table.",
    "We meet again tomorrow in the morning.",
]


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


# Sources with 3, 12, 12 and 55 words -> buckets [0,10), [10,20), [10,20), [50,inf).
SOURCES = [words(3), words(12, "a"), words(12, "b"), words(55)]
B_REFS = [
    "a short sentence here .",
    "the first middle sentence is about the weather today .",
    "the second middle sentence talks about old trains .",
    "a very long sentence that goes on and on about many things .",
]
B_HYPS = [
    "a short sentence .",
    "the first middle sentence is on the weather today .",
    "the second middle sentence talks about trains .",
    "a very long sentence going on about many things .",
]


def test_perfect_hypotheses_score_100():
    scores = corpus_scores(REFS, REFS)
    assert scores["bleu"].score == pytest.approx(100.0)
    assert scores["chrf"].score == pytest.approx(100.0)
    assert scores["bleu"].name == "BLEU"
    assert scores["chrf"].name == "chrF"


def test_imperfect_scores_match_sacrebleu_directly():
    scores = corpus_scores(HYPS, REFS)
    expected_bleu = sacrebleu.corpus_bleu(HYPS, [REFS]).score
    expected_chrf = sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert 0.0 < scores["bleu"].score < 100.0
    assert 0.0 < scores["chrf"].score < 100.0
    assert scores["bleu"].score == pytest.approx(expected_bleu)
    assert scores["chrf"].score == pytest.approx(expected_chrf)
    assert scores["bleu"].detail.startswith("BLEU = ")


def test_signature_names_tokenizer_and_version():
    sig = corpus_scores(HYPS, REFS)["bleu"].signature
    assert "tok:13a" in sig
    assert f"version:{sacrebleu.__version__}" in sig
    assert "case:mixed" in sig


def test_options_reach_sacrebleu():
    hyps = [h.upper() for h in REFS]
    scores = corpus_scores(hyps, REFS, tokenize="intl", lowercase=True)
    assert scores["bleu"].score == pytest.approx(100.0)
    assert "tok:intl" in scores["bleu"].signature
    assert "case:lc" in scores["bleu"].signature


def test_length_mismatch_names_both_counts():
    with pytest.raises(AttnmtError) as exc:
        corpus_scores(HYPS[:2], REFS)
    msg = str(exc.value)
    assert "2" in msg and "3" in msg


def test_empty_input_raises():
    with pytest.raises(AttnmtError):
        corpus_scores([], [])


def test_sentences_land_in_buckets_by_source_word_count():
    buckets = bleu_by_length(SOURCES, B_HYPS, B_REFS)
    edges = [(b.low, b.high) for b in buckets]
    assert edges == [(0, 10), (10, 20), (20, 30), (30, 40), (40, 50), (50, None)]
    assert [b.sentences for b in buckets] == [1, 2, 0, 0, 0, 1]


def test_bucket_bleu_equals_corpus_bleu_on_its_sentences():
    buckets = bleu_by_length(SOURCES, B_HYPS, B_REFS)
    middle = buckets[1]
    expected = sacrebleu.corpus_bleu(B_HYPS[1:3], [B_REFS[1:3]]).score
    whole = sacrebleu.corpus_bleu(B_HYPS, [B_REFS]).score
    assert middle.bleu == pytest.approx(expected)
    assert middle.bleu != pytest.approx(whole)  # really a subset, not the whole corpus
    assert buckets[0].bleu == pytest.approx(sacrebleu.corpus_bleu(B_HYPS[:1], [B_REFS[:1]]).score)


def test_empty_bucket_has_no_bleu():
    buckets = bleu_by_length(SOURCES, B_HYPS, B_REFS)
    assert buckets[2].sentences == 0
    assert buckets[2].bleu is None
    assert buckets[5].bleu is not None


def test_bucket_length_mismatch_raises():
    with pytest.raises(AttnmtError):
        bleu_by_length(SOURCES[:3], B_HYPS, B_REFS)


def test_report_is_json_serialisable():
    report = evaluation_report(SOURCES, B_HYPS, B_REFS)
    decoded = json.loads(json.dumps(report))
    assert decoded["sentences"] == 4
    assert set(decoded["bleu"]) == {"score", "signature", "detail"}
    assert set(decoded["chrf"]) == {"score", "signature", "detail"}
    assert decoded["by_length"][-1] == {
        "low": 50,
        "high": None,
        "sentences": 1,
        "bleu": pytest.approx(report["by_length"][-1]["bleu"]),
    }


def test_format_report_has_table():
    report = evaluation_report(SOURCES, B_HYPS, B_REFS)
    text = format_report(report)
    assert "source words | sentences | BLEU" in text
    assert "50+" in text
    assert report["bleu"]["signature"] in text
    assert report["chrf"]["signature"] in text
    # The empty 20-29 bucket shows "-" for BLEU.
    row = next(line for line in text.splitlines() if line.startswith("20-29"))
    assert row.rstrip().endswith("-")


def test_exact_match_beside_bleu():
    """Outputs identical to their reference, in the report and its text (issue 28)."""
    report = evaluation_report(
        ["a", "b", "c", "d"], ["1989-07-14", "x", "2026-11-22", "y"], ["1989-07-14", "z", "2026-11-22", "w"]
    )
    assert report["exact_match"] == 0.5
    assert "exact match 50.00 % (2 of 4 identical to their reference)" in format_report(report)
