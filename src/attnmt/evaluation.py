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
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from attnmt.core.errors import AttnmtError

__all__ = [
    "Score",
    "Bucket",
    "corpus_scores",
    "bleu_by_length",
    "evaluation_report",
    "format_report",
    "test_set_reports",
    "score_translations",
    "joined",
    "attention_failures",
    "config_test_sets",
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


def _check_parallel(**named: Sequence[str]) -> int:
    """Check that the named lists are non-empty and equally long; return the length."""
    counts = {name: len(items) for name, items in named.items()}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{n} {name}" for name, n in counts.items())
        raise AttnmtError(f"cannot score: line counts differ ({listed})")
    n = next(iter(counts.values()))
    if n == 0:
        raise AttnmtError("cannot score: no sentences given")
    return n


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
    _check_parallel(hypotheses=hypotheses, references=references)
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


def _bucket_edges(width: int, max_low: int) -> list[tuple[int, int | None]]:
    """[0, w), [w, 2w), ... up to max_low, then the open bucket [max_low, inf)."""
    if width <= 0:
        raise AttnmtError(f"bucket width must be positive, got {width}")
    if max_low < 0:
        raise AttnmtError(f"max_low must be non-negative, got {max_low}")
    edges: list[tuple[int, int | None]] = [
        (low, min(low + width, max_low)) for low in range(0, max_low, width)
    ]
    edges.append((max_low, None))
    return edges


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
    _check_parallel(sources=sources, hypotheses=hypotheses, references=references)
    edges = _bucket_edges(width, max_low)

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
            result = metric.corpus_score(
                [hypotheses[i] for i in idx], [[references[i] for i in idx]]
            )
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

    n = _check_parallel(sources=sources, hypotheses=hypotheses, references=references)
    scores = corpus_scores(hypotheses, references, **metric_kw)
    buckets = bleu_by_length(sources, hypotheses, references, **bucket_kw, **metric_kw)

    report: dict[str, Any] = {
        key: {"score": s.score, "signature": s.signature, "detail": s.detail}
        for key, s in scores.items()
    }
    report["sentences"] = n
    # Outputs identical to their reference: the measure of tasks with one right answer (the dates of
    # attnmt quickstart), where BLEU of one-word outputs says little
    report["exact_match"] = sum(h == r for h, r in zip(hypotheses, references)) / n if n else 0.0
    report["by_length"] = [asdict(b) for b in buckets]
    return report


def config_test_sets(model, trust: bool = False) -> dict:
    """The test sets of a model folder's config (data.test: name -> files), as ``attnmt evaluate``
    reads them. The held-out sets must be those drawn (attnmt.data.splits: never trained on). The
    config of a model folder from someone else could name any file (``/etc/passwd``, ``~/.ssh/...``),
    so every file a set names, and each sound file a speech test set lists, must lie inside the
    folder, symbolic links followed, unless ``trust`` (a folder the user trained: its test sets
    normally lie beside it). AttnmtError naming the set and the file otherwise."""
    from attnmt.data import splits

    splits.check_held_out(model.config, model.folder)
    sets = model.test_sets
    if trust:
        return sets
    for name, files in sets.items():
        for path in (getattr(files, side, None) for side in ("src", "tgt", "tsv")):
            if path is not None:
                _inside_model(model.folder, name, path)
        if model.config.task == "speech":  # the TSV lists sound files, relative to its folder
            from attnmt.speech.audio import read_speech_tsv

            for audio in read_speech_tsv(files.tsv)[0]:
                _inside_model(model.folder, name, files.tsv.parent / audio)
    return sets


def _inside_model(folder: Path, name: str, path: Path):
    target = Path(path).resolve()
    if not target.is_relative_to(Path(folder).resolve()):
        raise AttnmtError(f"{folder / 'config.yaml'}: test set {name} names {path}, outside the model folder: a model "
                          "folder cannot make attnmt read other files. Give the set yourself (--tsv FILE, or --src "
                          "and --ref), or pass --trust-config if you trained this folder")


def test_set_reports(translator, sets: dict, beam: int | None = None, batch_size: int | None = None,
                     max_tokens: int | None = None, log=print, progress: bool = False) -> dict[str, dict]:
    """Each test set of ``sets`` (name -> config.CorpusFiles) translated by ``translator`` (an
    attnmt.api.Translator; sources cut to ``max_tokens`` pieces, with a warning) and scored:
    name -> evaluation_report, with the beam used and the hypotheses."""
    from attnmt.data.corpus import read_corpus

    reports = {}
    for name, files in sets.items():
        corpus = read_corpus(files.as_spec())
        if corpus.dropped_empty:
            log(f"test set {name}: {corpus.dropped_empty} pair(s) with an empty side left out")
        reports[name] = score_translations(translator, name, corpus.sources, corpus.targets, beam, batch_size,
                                           max_tokens, log, progress)[0]
    return reports


def score_translations(translator, name: str, sources: list[str], references: list[str], beam: int | None = None,
                       batch_size: int | None = None, max_tokens: int | None = None, log=print,
                       progress: bool = False) -> tuple[dict, list]:
    """The sources translated and scored against the references: (evaluation_report with the beam
    and the hypotheses, the attnmt.api.Translation of each source). ``progress``: a progress bar
    while translating (on a terminal)."""
    translations = translator.translate(sources, beam=beam, batch_size=batch_size, max_tokens=max_tokens,
                                        progress=f"test set {name}" if progress else None)
    for number, t in enumerate(translations, start=1):
        if t.truncated:
            log(f"warning: test set {name}, pair {number}: more than {max_tokens} subword tokens; its first "
                f"{max_tokens} were translated")
    hypotheses = [t.text for t in translations]
    report = evaluation_report(sources, hypotheses, references)
    return {**report, "beam": beam or translator.config.decoding.beam, "hypotheses": hypotheses}, translations


def joined(sources: list[str], targets: list[str], k: int) -> tuple[list[str], list[str]]:
    """Consecutive pairs joined ``k`` at a time, each side with spaces (pairs 1-k, k+1-2k, ...): a
    test set of inputs k times as long as usual. A last group of fewer than k pairs is left out."""
    if k < 1:
        raise AttnmtError(f"sentences are joined k >= 1 at a time, got {k}")
    _check_parallel(sources=sources, targets=targets)
    groups = range(0, len(sources) - k + 1, k)
    return [" ".join(sources[i:i + k]) for i in groups], [" ".join(targets[i:i + k]) for i in groups]


def attention_failures(matrices: list, hypotheses: list[str], references: list[str], low: float = 0.2,
                       high: float = 3.0) -> dict:
    """Counts of the usual failures of attention over a test set:

    unattended      source words whose attention, summed over all output words, is below ``low``:
                    read by no step, so likely left untranslated
    over_attended   source words whose summed attention is above ``high``: read by many steps, so
                    likely translated again and again
    too_long        outputs with more than twice the words of their reference
    too_short       outputs with fewer than half the words of their reference

    ``matrices``: per sentence the word attention (output words x source words, as from
    attnmt.translation.align.word_matrix), or None (a model without attention: only the lengths count; with no
    matrix at all, the attention counts are None).
    """
    _check_parallel(matrices=matrices, hypotheses=hypotheses, references=references)
    counts = {"sentences": len(hypotheses), "source_words": 0, "unattended": 0, "over_attended": 0,
              "too_long": 0, "too_short": 0}
    for matrix, hypothesis, reference in zip(matrices, hypotheses, references):
        ratio = len(hypothesis.split()) / max(len(reference.split()), 1)
        counts["too_long"] += ratio > 2
        counts["too_short"] += ratio < 0.5
        if matrix is not None:
            coverage = np.asarray(matrix).sum(axis=0)  # per source word: its attention over all steps
            counts["source_words"] += coverage.size
            counts["unattended"] += int((coverage < low).sum())
            counts["over_attended"] += int((coverage > high).sum())
    if all(matrix is None for matrix in matrices):
        counts.update(source_words=None, unattended=None, over_attended=None)
    return counts


def _bucket_label(low: int, high: int | None) -> str:
    if high is None:
        return f"{low}+"
    return f"{low}-{high - 1}"  # high is exclusive


def format_report(report: dict) -> str:
    """Render an evaluation_report() dict as plain text with an aligned length table."""
    lines = [
        f"BLEU {report['bleu']['score']:.2f}  ({report['bleu']['signature']})",
        f"chrF {report['chrf']['score']:.2f}  ({report['chrf']['signature']})",
        f"sentences: {report['sentences']}",
    ]
    if "exact_match" in report:
        identical = round(report["exact_match"] * report["sentences"])
        lines.append(f"exact match {100 * report['exact_match']:.2f} % ({identical} of {report['sentences']} "
                     "identical to their reference)")
    lines.append("")

    header = ("source words", "sentences", "BLEU")
    rows = [
        (
            _bucket_label(b["low"], b["high"]),
            str(b["sentences"]),
            "-" if b["bleu"] is None else f"{b['bleu']:.2f}",
        )
        for b in report["by_length"]
    ]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(3)]

    def fmt(row: tuple[str, str, str], header: bool = False) -> str:
        # Header and labels left-aligned, numbers right-aligned.
        cells = [row[0].ljust(widths[0])] + [
            cell.ljust(w) if header else cell.rjust(w)
            for cell, w in zip(row[1:], widths[1:])
        ]
        return " | ".join(cells).rstrip()

    lines.append(fmt(header, header=True))
    lines.append("-+-".join("-" * w for w in widths))
    lines.extend(fmt(r) for r in rows)
    return "\n".join(lines)


# ------------------------------------------------------------------------------ sentence pairs


def classification_report(gold: list[str], predicted: list[str], labels: list[str]) -> dict:
    """Accuracy, per-class precision, recall and F1 (with the class's support, its gold count),
    their macro average, and the confusion matrix (rows: gold labels, columns: predicted, in the
    order of ``labels``) of a classifier's predictions. Fractions from 0 to 1."""
    n = _check_parallel(gold=gold, predicted=predicted)
    index = {label: i for i, label in enumerate(labels)}
    confusion = [[0] * len(labels) for _ in labels]
    for g, p in zip(gold, predicted):
        confusion[index[g]][index[p]] += 1
    per_class = {}
    for i, label in enumerate(labels):
        hits, support, chosen = confusion[i][i], sum(confusion[i]), sum(row[i] for row in confusion)
        precision, recall = _ratio(hits, chosen), _ratio(hits, support)
        per_class[label] = {"precision": precision, "recall": recall,
                            "f1": _ratio(2 * precision * recall, precision + recall), "support": support}
    macro_f1 = sum(c["f1"] for c in per_class.values()) / len(labels)
    return {"accuracy": sum(confusion[i][i] for i in range(len(labels))) / n, "pairs": n, "labels": list(labels),
            "per_class": per_class, "macro_f1": macro_f1, "confusion": confusion}


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def percent(x: float) -> str:
    return f"{100 * x:.2f}%".rjust(9)


def format_classification_report(report: dict) -> str:
    """A classification_report as text: accuracy, a table of the classes, the confusion matrix."""
    labels = report["labels"]
    width = max(len(label) for label in labels + ["macro average"])
    lines = [f"accuracy {100 * report['accuracy']:.2f}%  ({report['pairs']} pairs)", "",
             f"{'class'.ljust(width)} | precision |    recall |        F1 | support", "-" * (width + 42)]
    for label, c in report["per_class"].items():
        lines.append(f"{label.ljust(width)} | {percent(c['precision'])} | {percent(c['recall'])} | "
                     f"{percent(c['f1'])} | {c['support']:7d}")
    lines += [f"{'macro average'.ljust(width)} | {'':9} | {'':9} | {percent(report['macro_f1'])} |", "",
              "confusion matrix (rows: gold, columns: predicted)"]
    cell = max(len(label) for label in labels + [str(v) for row in report["confusion"] for v in row])
    lines.append(" " * (width + 2) + " ".join(label.rjust(cell) for label in labels))
    for label, row in zip(labels, report["confusion"]):
        lines.append(f"{label.ljust(width)}  " + " ".join(str(v).rjust(cell) for v in row))
    return "\n".join(lines)
