"""Translation (task: translation, the default): text in one language to text in another."""

from __future__ import annotations

from attnmt.core.task import Task
from attnmt.seq2seq.model import architecture
from attnmt.translation.aligner import load_translator
from attnmt.translation.evaluation import translation_test_scores
from attnmt.translation.prepare import prepare
from attnmt.translation.training import translation_training_loop


def figure_writers(request, model) -> list:
    from attnmt.translation.plots import translation_writers  # matplotlib: only when drawing

    return translation_writers(request, model)


TASK = Task(
    name="translation",
    what="a translation model",
    inputs="text",
    prepare=prepare,
    training_loop=translation_training_loop,
    test_scores=translation_test_scores,
    load=load_translator,
    architecture=lambda config: architecture(config.model),
    figure_writers=figure_writers,
    fine_tunes=True,
)
