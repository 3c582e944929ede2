"""The scores of a comparison's runs, each written beside what it scores and read back (validated)
when it is there, so that a finished run is never scored again:

    RUN/results.json      its training (steps, minutes, speed) and, for a forward run, each test
                          set's BLEU, chrF, BLEU by length, perplexity and attention failures
    RUN/alignment.json    with --align-gold: AER, precision and recall of its attention's links
    OUT/eflomal.json      with --align-gold: those of the statistical aligner, the baseline
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from attnmt.compare.runs import ComparisonSettings, Run, read_align_pairs
from attnmt.compare.tables import ALIGNMENT_ROWS, STATISTICAL_SCORES, checked_run_record, read_results
from attnmt.core.files import atomic_write_text
from attnmt.data.corpus import CorpusPairs
from attnmt.translation.evaluation import attention_failures, score_translations
from attnmt.translation.prepare import EncodedCorpus


def score_run(run: Run, test_sets: dict, settings: ComparisonSettings) -> dict:
    """results.json of a trained run: its training (steps, minutes, speed) and, for a forward
    run, each test set's BLEU, chrF, BLEU by length, perplexity and attention failures."""
    from attnmt.api import load

    path = run.folder / "results.json"
    if path.is_file():
        return checked_run_record(path, run)
    translator = load(run.folder)
    record = {"variant": run.variant.name, "seed": run.seed, "reverse": run.reverse, **training_record(run.folder)}
    if not run.reverse:
        record["tests"] = {name: score_test_set(translator, name, *pair, settings) for name, pair in test_sets.items()}
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return record


def score_test_set(
    translator, name: str, sources: list[str], references: list[str], settings: ComparisonSettings
) -> dict:
    """One test set's report (see score_run); its translations written to RUN/NAME.hyp."""
    from attnmt.seq2seq.links import word_matrix
    from attnmt.translation.training import evaluate_loss

    report, translations = score_translations(
        translator, name, sources, references, beam=settings.beam, log=settings.log
    )
    hypotheses = report.pop("hypotheses")
    atomic_write_text(translator.folder / f"{name}.hyp", "".join(h + "\n" for h in hypotheses))
    encoded = EncodedCorpus(
        sources, references, translator.src_subwords.encode(sources), translator.tgt_subwords.encode(references)
    )
    report["perplexity"] = evaluate_loss(
        translator.model, encoded, translator.config.data.batch_size, window=translator.attention_window
    )["perplexity"]
    matrices = [
        None if t.attention is None else word_matrix(t.attention, t.source_tokens, t.tokens) for t in translations
    ]
    report["failures"] = attention_failures(matrices, hypotheses, references)
    return report


def training_record(folder: Path) -> dict:
    """Steps, minutes and speed of a finished training, from its checkpoint and metrics.jsonl."""
    from attnmt.core.checkpoint import read_trainer_state
    from attnmt.viz.figures import read_metrics

    state = read_trainer_state(folder / "last.safetensors")
    speeds = [r["tokens_per_s"] for r in read_metrics(folder / "metrics.jsonl") if r.get("type") == "train"]
    tokens_per_s = statistics.median(speeds) if speeds else None
    return {
        "steps": state["step"],
        "minutes": state["seconds"] / 60,
        "target_tokens_per_s": tokens_per_s,
        "sentences_per_s": tokens_per_s and tokens_per_s * state["sentences"] / max(state["target_tokens"], 1),
    }


# ---------------------------------------------------------------- word alignments


def score_alignments(forward: Run, backward: Run | None, settings: ComparisonSettings) -> dict | None:
    """AER, precision and recall of the attention's links on the gold set (alignment.json of
    the forward run), or None for a model without attention."""
    from attnmt.api import load

    path = forward.folder / "alignment.json"
    if path.is_file():
        return read_results(path, ALIGNMENT_ROWS)
    model = load(forward.folder)
    if not model.model.has_attention:
        return None
    reverse = load(backward.folder) if backward is not None else None
    scores = attention_alignment_scores(
        model, reverse, *read_align_pairs(settings.align_pairs), gold_links(settings), settings.threshold
    )
    atomic_write_text(path, json.dumps(scores, indent=1) + "\n")
    return scores


def gold_links(settings: ComparisonSettings):
    """The gold set's links: (sure, possible)."""
    from attnmt.translation.align import read_gold

    return read_gold(settings.align_gold, settings.one_based)


def score_statistical(training_text: Path, path: Path, settings: ComparisonSettings) -> dict:
    """The statistical aligner (eflomal models 1-3) on exactly the training text of the runs
    (``training_text``, the gold pairs appended last): scores of its links of the gold pairs,
    written to ``path``. The text is streamed into eflomal's files (beside ``path``) and the links
    of the gold pairs alone are kept as they are read back."""
    from attnmt.translation.align import symmetrized_scores
    from attnmt.translation.statistical_align import EflomalInput

    if path.is_file():
        return read_results(path, STATISTICAL_SCORES)
    pairs = CorpusPairs({"tsv": training_text})
    sure, possible = gold_links(settings)
    scores = {}
    with EflomalInput(path.parent) as words:
        for _, source, target in pairs:
            words.add(source, target)
        if not words.pairs:
            raise pairs.empty_error()
        start = words.pairs - len(sure)
        for model, name in ((1, "eflomal IBM1"), (2, "eflomal HMM"), (3, "eflomal HMM+fertility")):
            settings.log(f"statistical aligner: {name} on {words.pairs:,} pairs")
            forward, backward = [], []
            for k, (f, b) in enumerate(words.links(model)):
                if k >= start:
                    forward.append(f)
                    backward.append(b)
            scores[name] = symmetrized_scores(forward, backward, sure, possible)
    atomic_write_text(path, json.dumps(scores, indent=1) + "\n")
    return scores


def attention_alignment_scores(
    forward, backward, sources: list[str], targets: list[str], gold, threshold: float
) -> list[dict]:
    """Scores of the attention's word alignments of the gold pairs, every way of reading them:
    which attention (the model's, or each Transformer layer's averaged over heads), shifted by one
    step or not, argmax or threshold links; then each direction and symmetrization."""
    from attnmt.seq2seq.links import alignments_from_attention
    from attnmt.translation.align import symmetrized_scores, transposed, word_attention

    rows = []
    for name, forward_matrices, backward_matrices in _attention_sources(forward, backward, sources, targets):
        for shift in (False, True):
            fw = word_attention(forward, sources, targets, forward_matrices, shift=shift)
            bw = backward and word_attention(backward, targets, sources, backward_matrices, shift=shift)
            for links in ("argmax", "threshold"):
                f = [alignments_from_attention(m, links, threshold) for m in fw]
                b = bw and [transposed(alignments_from_attention(m, links, threshold)) for m in bw]
                rows.append(
                    {"attention": name, "shift": shift, "links": links, "scores": symmetrized_scores(f, b, *gold)}
                )
    return rows


def _attention_sources(forward, backward, sources, targets):
    """(name, forward matrices, backward matrices or None) of each attention to read alignments from."""
    from attnmt.translation.align import force_attention

    layered = forward.config.model.type == "transformer"
    f = force_attention(forward, sources, targets, layers=layered)
    b = backward and force_attention(backward, targets, sources, layers=layered)
    if not layered:
        return [("attention", f, b)]
    return [(f"layer {k + 1}", [m[k] for m in f], b and [m[k] for m in b]) for k in range(f[0].shape[0])]
