"""Translation quality evaluation: corpus BLEU and chrF, plus BLEU by sentence length.

All scoring is delegated to sacrebleu, run on *detokenized* text, so numbers are
comparable with published sacreBLEU results and each score carries sacrebleu's
signature (tokenizer, casing, smoothing, version) for reproducibility.

The length breakdown groups sentences by the number of whitespace-separated words
in the *source* and computes corpus BLEU inside each group, the view used by
Bahdanau et al. (2014), Fig. 2, to show how attention helps on long sentences.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from attnmt.core.errors import AttnmtError
from attnmt.core.scoring import bucket_label, check_parallel, length_buckets
from attnmt.training.metrics import test_set_summary

__all__ = [
    "Score",
    "Bucket",
    "corpus_scores",
    "bleu_by_length",
    "evaluation_report",
    "format_report",
    "test_set_reports",
    "score_translations",
    "decoding_settings",
    "joined",
    "attention_failures",
    "translation_test_scores",
]


@dataclass
class Score:
    """One metric result."""

    name: str  # "BLEU" or "chrF"
    score: float
    signature: str  # sacrebleu signature, e.g. "nrefs:1|case:mixed|...|version:2.6.0"
    detail: str  # sacrebleu's formatted line, e.g. "BLEU = 35.1 67.0/42.1/... (BP = ...)"


@dataclass
class Bucket:
    """Sentences whose source length (in words) lies in [low, high)."""

    low: int
    high: int | None  # None: open-ended last bucket
    sentences: int
    bleu: float | None  # None when the bucket is empty


def corpus_scores(
    hypotheses: list[str],
    references: list[str],
    tokenize: str = "13a",
    lowercase: bool = False,
) -> dict[str, Score]:
    """Corpus-level sacreBLEU and chrF of detokenized hypotheses against one reference each.

    Returns {"bleu": Score, "chrf": Score}. Raises AttnmtError if the lists are
    empty or differ in length.
    """
    check_parallel(hypotheses=hypotheses, references=references)
    refs = [list(references)]  # sacrebleu takes a list of reference streams

    results = {}
    for key, name, metric in (
        ("bleu", "BLEU", BLEU(tokenize=tokenize, lowercase=lowercase)),
        ("chrf", "chrF", CHRF(lowercase=lowercase)),
    ):
        result = metric.corpus_score(list(hypotheses), refs)
        results[key] = Score(
            name=name,
            score=float(result.score),
            signature=str(metric.get_signature()),
            detail=str(result),
        )
    return results


def bleu_by_length(
    sources: list[str],
    hypotheses: list[str],
    references: list[str],
    width: int = 10,
    max_low: int = 50,
    *,
    tokenize: str = "13a",
    lowercase: bool = False,
) -> list[Bucket]:
    """Corpus BLEU per source-length bucket; empty buckets are kept with bleu=None."""
    check_parallel(sources=sources, hypotheses=hypotheses, references=references)
    edges = length_buckets(width, max_low)

    # Sentence indices per bucket, by whitespace word count of the source.
    members: list[list[int]] = [[] for _ in edges]
    for i, src in enumerate(sources):
        n_words = len(src.split())
        for b, (low, high) in enumerate(edges):
            if n_words >= low and (high is None or n_words < high):
                members[b].append(i)
                break

    buckets = []
    for (low, high), idx in zip(edges, members):
        bleu = None
        if idx:
            metric = BLEU(tokenize=tokenize, lowercase=lowercase)
            result = metric.corpus_score([hypotheses[i] for i in idx], [[references[i] for i in idx]])
            bleu = float(result.score)
        buckets.append(Bucket(low=low, high=high, sentences=len(idx), bleu=bleu))
    return buckets


def evaluation_report(
    sources: list[str],
    hypotheses: list[str],
    references: list[str],
    **kw: Any,
) -> dict:
    """JSON-serialisable summary: BLEU, chrF, sentence count and BLEU by length.

    Keyword arguments: tokenize, lowercase (all metrics); width, max_low (buckets).
    """
    unknown = set(kw) - {"tokenize", "lowercase", "width", "max_low"}
    if unknown:
        raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(unknown))}")
    metric_kw = {k: kw[k] for k in ("tokenize", "lowercase") if k in kw}
    bucket_kw = {k: kw[k] for k in ("width", "max_low") if k in kw}

    n = check_parallel(sources=sources, hypotheses=hypotheses, references=references)
    scores = corpus_scores(hypotheses, references, **metric_kw)
    buckets = bleu_by_length(sources, hypotheses, references, **bucket_kw, **metric_kw)

    report: dict[str, Any] = {
        key: {"score": s.score, "signature": s.signature, "detail": s.detail} for key, s in scores.items()
    }
    report["sentences"] = n
    # Outputs identical to their reference: the measure of tasks with one right answer (the dates of
    # attnmt quickstart), where BLEU of one-word outputs says little
    report["exact_match"] = sum(h == r for h, r in zip(hypotheses, references)) / n if n else 0.0
    report["by_length"] = [asdict(b) for b in buckets]
    return report


def test_set_reports(
    translator,
    sets: dict,
    beam: int | None = None,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    log=print,
    progress: bool = False,
    rerank: Callable[[list], list] | None = None,
    tag: str | None = None,
) -> dict[str, dict]:
    """Each test set of ``sets`` (name -> config.CorpusFiles) translated by ``translator`` (an
    attnmt.api.Translator; sources cut to ``max_tokens`` pieces, with a warning) and scored:
    name -> evaluation_report, with the beam used and the hypotheses. ``rerank``: every candidate
    of the beam reordered by it (attnmt.translation.reranking) before the best is taken. ``tag``:
    put before every source (Translator.source_ids)."""
    from attnmt.data.corpus import read_corpus

    reports = {}
    for name, files in sets.items():
        corpus = read_corpus(files.as_spec())
        if corpus.dropped_empty:
            log(f"test set {name}: {corpus.dropped_empty} pair(s) with an empty side left out")
        reports[name] = score_translations(
            translator, name, corpus.sources, corpus.targets, beam, batch_size, max_tokens, log, progress, rerank, tag
        )[0]
    return reports


def score_translations(
    translator,
    name: str,
    sources: list[str],
    references: list[str],
    beam: int | None = None,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    log=print,
    progress: bool = False,
    rerank: Callable[[list], list] | None = None,
    tag: str | None = None,
) -> tuple[dict, list]:
    """The sources translated and scored against the references: (evaluation_report with the beam
    and the hypotheses, the attnmt.api.Translation of each source). ``progress``: a progress bar
    while translating (on a terminal). ``rerank``, ``tag``: as in test_set_reports."""
    n_best = (beam or translator.config.decoding.beam) if rerank else 1  # (a reranking chooses among all)
    translations = translator.translate(
        sources,
        beam=beam,
        n_best=n_best,
        batch_size=batch_size,
        max_tokens=max_tokens,
        progress=f"test set {name}" if progress else None,
        tag=tag,
    )
    if rerank is not None:
        translations = rerank(translations)
    for number, t in enumerate(translations, start=1):
        if t.truncated:
            log(
                f"warning: test set {name}, pair {number}: more than {max_tokens} subword tokens; its first "
                f"{max_tokens} were translated"
            )
    hypotheses = [t.text for t in translations]
    report = evaluation_report(sources, hypotheses, references)
    return {**report, **decoding_settings(translator, beam, tag), "hypotheses": hypotheses}, translations


def decoding_settings(translator, beam: int | None = None, tag: str | None = None) -> dict:
    """The settings a report's translations were searched with: beam, length and coverage penalties,
    and the tag before their sources (None: none)."""
    dc = translator.config.decoding
    return {
        "beam": beam or dc.beam,
        "length_penalty": dc.length_penalty,
        "coverage_penalty": dc.coverage_penalty,
        "tag": tag or None,
    }


def joined(sources: list[str], targets: list[str], k: int) -> tuple[list[str], list[str]]:
    """Consecutive pairs joined ``k`` at a time, each side with spaces (pairs 1-k, k+1-2k, ...): a
    test set of inputs k times as long as usual. A last group of fewer than k pairs is left out."""
    if k < 1:
        raise AttnmtError(f"sentences are joined k >= 1 at a time, got {k}")
    check_parallel(sources=sources, targets=targets)
    groups = range(0, len(sources) - k + 1, k)
    return [" ".join(sources[i : i + k]) for i in groups], [" ".join(targets[i : i + k]) for i in groups]


def attention_failures(
    matrices: list, hypotheses: list[str], references: list[str], low: float = 0.2, high: float = 3.0
) -> dict:
    """Counts of the usual failures of attention over a test set:

    unattended      source words whose attention, summed over all output words, is below ``low``:
                    read by no step, so likely left untranslated
    over_attended   source words whose summed attention is above ``high``: read by many steps, so
                    likely translated again and again
    too_long        outputs with more than twice the words of their reference
    too_short       outputs with fewer than half the words of their reference
    repeated_trigrams  word trigrams of an output that it has written before (See et al. 2017's
                    duplicate n-grams), of ``trigrams`` in all the outputs

    ``matrices``: per sentence the word attention (output words x source words, as from
    attnmt.seq2seq.links.word_matrix), or None (a model without attention: only the lengths count; with no
    matrix at all, the attention counts are None).
    """
    check_parallel(matrices=matrices, hypotheses=hypotheses, references=references)
    counts = {
        "sentences": len(hypotheses),
        "source_words": 0,
        "unattended": 0,
        "over_attended": 0,
        "too_long": 0,
        "too_short": 0,
        "trigrams": 0,
        "repeated_trigrams": 0,
    }
    for matrix, hypothesis, reference in zip(matrices, hypotheses, references):
        ratio = len(hypothesis.split()) / max(len(reference.split()), 1)
        counts["too_long"] += ratio > 2
        counts["too_short"] += ratio < 0.5
        trigrams = list(zip(*(hypothesis.split()[i:] for i in range(3))))
        counts["trigrams"] += len(trigrams)
        counts["repeated_trigrams"] += len(trigrams) - len(set(trigrams))
        if matrix is not None:
            coverage = np.asarray(matrix).sum(axis=0)  # per source word: its attention over all steps
            counts["source_words"] += coverage.size
            counts["unattended"] += int((coverage < low).sum())
            counts["over_attended"] += int((coverage > high).sum())
    if all(matrix is None for matrix in matrices):
        counts.update(source_words=None, unattended=None, over_attended=None)
    return counts


def format_report(report: dict) -> str:
    """Render an evaluation_report() dict as plain text with an aligned length table."""
    lines = [
        f"BLEU {report['bleu']['score']:.2f}  ({report['bleu']['signature']})",
        f"chrF {report['chrf']['score']:.2f}  ({report['chrf']['signature']})",
        f"sentences: {report['sentences']}",
    ]
    if "exact_match" in report:
        identical = round(report["exact_match"] * report["sentences"])
        lines.append(
            f"exact match {100 * report['exact_match']:.2f} % ({identical} of {report['sentences']} "
            "identical to their reference)"
        )
    lines.append("")

    header = ("source words", "sentences", "BLEU")
    rows = [
        (
            bucket_label(b["low"], b["high"]),
            str(b["sentences"]),
            "-" if b["bleu"] is None else f"{b['bleu']:.2f}",
        )
        for b in report["by_length"]
    ]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(3)]

    def fmt(row: tuple[str, str, str], header: bool = False) -> str:
        # Header and labels left-aligned, numbers right-aligned.
        cells = [row[0].ljust(widths[0])] + [
            cell.ljust(w) if header else cell.rjust(w) for cell, w in zip(row[1:], widths[1:])
        ]
        return " | ".join(cells).rstrip()

    lines.append(fmt(header, header=True))
    lines.append("-+-".join("-" * w for w in widths))
    lines.extend(fmt(r) for r in rows)
    return "\n".join(lines)


# ------------------------------------------------------------------------------ sentence pairs


def translation_test_scores(config, device, log, progress: bool) -> tuple[dict, list[dict]]:
    """The best checkpoint of the experiment on each test set of its config: the reports (without
    the hypotheses) and the records for metrics.jsonl."""
    from attnmt.seq2seq.inference import Translator

    translator = Translator(config.experiment_dir, device=device)
    reports = test_set_reports(translator, translator.test_sets, log=log, progress=progress)
    return test_set_summary(
        reports,
        lambda r: {
            "bleu": r["bleu"]["score"],
            "chrf": r["chrf"]["score"],
            "sentences": r["sentences"],
            "beam": r["beam"],
        },
        lambda r: (
            f"BLEU {r['bleu']['score']:.2f}, chrF {r['chrf']['score']:.2f} ({r['sentences']} sentences, "
            f"beam {r['beam']})"
        ),
        log,
    )
