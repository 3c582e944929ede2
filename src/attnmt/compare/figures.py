"""The figures of ``attnmt compare``, drawn from its table (results.json):

bleu_by_length_figure     BLEU against source length, one line per variant, one panel per test set
                          (the shape of Bahdanau et al. 2014, Fig. 2)
attention_panels_figure   the word attention of every variant on the same sentence pair
alignment_figure          precision and recall of each variant's best word alignment, and the
                          statistical aligner's
draw_figures              all of them, into --out (bleu-by-length.png, attention.png, alignment.png)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from attnmt.compare.runs import Run
from attnmt.core.errors import AttnmtError
from attnmt.viz.figures import new_figure

__all__ = [
    "bleu_by_length_figure",
    "attention_panels_figure",
    "alignment_figure",
    "best_alignments",
    "example_attention",
    "draw_figures",
]


def _low(label: str) -> int:
    return int(label.split("-")[0].rstrip("+"))


def bleu_by_length_figure(table: dict) -> Figure:
    """Mean BLEU per source-length bucket over the seeds (bars: the lowest and highest seed)."""
    tests = table["test_sets"]
    fig = new_figure(4.2 * len(tests), 3.4)
    axes = fig.subplots(1, len(tests), squeeze=False)[0]
    for ax, test in zip(axes, tests):
        prefix = f"tests/{test}/by_length/"
        for variant, metrics in table["metrics"].items():
            labels = sorted((k[len(prefix) :] for k in metrics if k.startswith(prefix)), key=_low)
            if not labels:
                continue
            means = [metrics[prefix + label]["mean"] for label in labels]
            lows = [means[i] - min(metrics[prefix + label]["values"]) for i, label in enumerate(labels)]
            highs = [max(metrics[prefix + label]["values"]) - means[i] for i, label in enumerate(labels)]
            ax.errorbar(
                [_low(label) for label in labels], means, yerr=[lows, highs], marker="o", capsize=3, label=variant
            )
        ax.set_title(test)
        ax.set_xlabel("source words (bucket start)")
        ax.set_ylabel("BLEU")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return fig


def attention_panels_figure(
    panels: list[tuple[str, np.ndarray | None]], source_words: list[str], target_words: list[str]
) -> Figure:
    """One heatmap per (variant, word attention: target words x source words, or None)."""
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    cell = 0.22
    width = max(3.0, cell * len(source_words) + 1.5)
    height = max(2.5, cell * len(target_words) + 1.5)
    fig = new_figure(width * columns, height * rows)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, (name, matrix) in zip(axes, panels):
        ax.set_title(name, fontsize=8)
        if matrix is None:
            ax.text(0.5, 0.5, "no attention\n(fixed context)", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        ax.imshow(matrix, cmap="Blues", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(source_words)), labels=source_words, rotation=90, fontsize=6)
        ax.set_yticks(range(len(target_words)), labels=target_words, fontsize=6)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    return fig


def best_alignments(table: dict) -> list[tuple[str, str, dict]]:
    """Per aligner, its way of reading links with the lowest mean AER: (aligner, how, scores)."""
    best = []
    for variant, rows in table.get("alignment", {}).items():
        candidates = [
            (
                scores["aer"]["mean"],
                f"{row['attention']}{', shifted' if row['shift'] else ''}, {row['links']}, {method}",
                {m: s["mean"] for m, s in scores.items()},
            )
            for row in rows
            for method, scores in row["scores"].items()
        ]
        best.append((variant, *min(candidates, key=lambda c: c[0])[1:]))
    for name, methods in table.get("statistical", {}).items():
        method, scores = min(methods.items(), key=lambda item: item[1]["aer"])
        best.append((name, method, scores))
    return best


def alignment_figure(table: dict) -> Figure:
    """Precision and recall (bars) and AER (label) of each aligner's best alignment."""
    best = best_alignments(table)
    fig = new_figure(max(5.0, 0.9 * len(best) + 1.5), 3.8)
    ax = fig.subplots()
    x = np.arange(len(best))
    precision = [scores["precision"] for _, _, scores in best]
    recall = [scores["recall"] for _, _, scores in best]
    ax.bar(x - 0.2, precision, 0.4, label="precision")
    ax.bar(x + 0.2, recall, 0.4, label="recall")
    for i, (_, _, scores) in enumerate(best):
        ax.text(i, max(precision[i], recall[i]) + 0.02, f"AER {100 * scores['aer']:.1f}", ha="center", fontsize=7)
    ax.set_xticks(x, labels=[name for name, _, _ in best], rotation=30, ha="right", fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("precision / recall")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def example_attention(translator, source: str, reference: str):
    """Word attention of the model forced to write the reference (None without attention)."""
    from attnmt.translation.align import force_attention, word_attention

    if not translator.model.has_attention:
        return None
    matrices = force_attention(translator, [source], [reference])
    return word_attention(translator, [source], [reference], matrices)[0]


def draw_figures(table: dict, runs: list[Run], test_sets: dict, example: int, out: Path):
    """The figures of a comparison into ``out``; the attention panels show the ``example``-th
    sentence (from 1) of the first test set, as each variant's first forward run attends to it."""
    from attnmt.api import load
    from attnmt.viz.figures import save

    save(bleu_by_length_figure(table), out / "bleu-by-length.png")
    name = next(iter(test_sets))
    if not 1 <= example <= len(test_sets[name][0]):
        raise AttnmtError(f"--example {example}: test set {name} has {len(test_sets[name][0])} sentences")
    source, reference = test_sets[name][0][example - 1], test_sets[name][1][example - 1]
    first = {run.variant.name: run for run in reversed(runs) if not run.reverse}
    panels = [
        (variant, example_attention(load(first[variant].folder), source, reference)) for variant in table["variants"]
    ]
    save(attention_panels_figure(panels, source.split(), reference.split()), out / "attention.png")
    if table.get("alignment"):
        save(alignment_figure(table), out / "alignment.png")
