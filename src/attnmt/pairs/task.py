"""Sentence pairs (task: pairs): the decomposable attention model of Parikh et al. (2016), which
classifies a premise and a hypothesis (entailment, contradiction, neutral) by attending between them."""

from __future__ import annotations

from pathlib import Path

from attnmt.core.errors import AttnmtError
from attnmt.core.task import Task
from attnmt.pairs.classifier import PairClassifier
from attnmt.pairs.data import prepare_pairs
from attnmt.pairs.training import pair_test_scores, pair_training_loop


def load(folder: Path, checkpoint: str, quantize: str | None, device) -> PairClassifier:
    if quantize is not None:
        raise AttnmtError(f"{folder}: quantize is for translation models; this is a sentence-pair classifier")
    return PairClassifier(folder, checkpoint, device)


def architecture(config) -> str:
    m = config.model
    return (
        f"decomposable attention, hidden {m.hidden_size}, embeddings {m.embedding_size}"
        f"{', intra-sentence attention' if m.intra_attention else ''}"
    )


def figure_writers(request, model) -> list:
    from attnmt.pairs.plots import pair_writers  # matplotlib: only when drawing

    return pair_writers(request, model)


TASK = Task(
    name="pairs",
    what="a sentence-pair classifier",
    inputs="pairs",
    prepare=prepare_pairs,
    training_loop=pair_training_loop,
    test_scores=pair_test_scores,
    load=load,
    architecture=architecture,
    figure_writers=figure_writers,
)
