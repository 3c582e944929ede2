"""Scores for filtering a parallel corpus with two translation models, one each way: the dual
conditional cross-entropy of Junczys-Dowmunt (2018),

    H_f = -1/|y| log p_f(y | x),    H_b = -1/|x| log p_b(x | y)        (per token, each model's pieces)
    dual = |H_f - H_b| + (H_f + H_b) / 2,

low when both models find the pair probable and agree about it: a translation that leaves part of
the source out is probable forward but not backward, where the source must be produced from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.inference import Translator
from attnmt.seq2seq.results import ScoredTranslation


@dataclass
class DualScore:
    """A pair scored by a forward (source -> target) and a backward (target -> source) model."""

    forward: ScoredTranslation  # log p_f(y | x)
    backward: ScoredTranslation  # log p_b(x | y): its "source" is the pair's translation

    @property
    def cross_entropy(self) -> float:
        """|H_f - H_b| + (H_f + H_b) / 2, in nats per token; lower: more probably a translation."""
        forward, backward = -self.forward.per_token, -self.backward.per_token
        return abs(forward - backward) + (forward + backward) / 2

    @property
    def score(self) -> float:
        """-cross_entropy: higher is better, as log-probabilities are."""
        return -self.cross_entropy


def dual_scores(
    forward: Translator,
    backward: Translator,
    sources: list[str],
    translations: list[str],
    batch_size: int | None = None,
    max_tokens: int | None = None,
    progress: bool = False,
    tag: str | list[str] | None = None,
) -> list[DualScore]:
    """Each pair scored by ``forward`` (its sources after ``tag``, if given: one, or one per pair)
    and, turned around, by ``backward`` (Translator.score); in order."""
    for model, role in ((forward, "forward"), (backward, "backward")):
        if model.inputs != "text":
            raise AttnmtError(
                f"{model.folder}: the {role} model of a dual score is {model.what}, not a translation model"
            )
    there = forward.score(
        sources, translations, batch_size, max_tokens, "scoring forward" if progress else None, tag=tag
    )
    try:
        back = backward.score(translations, sources, batch_size, max_tokens, "scoring backward" if progress else None)
    except AttnmtError as error:
        raise AttnmtError(
            f"the backward model (its sources are the translations, its translations the sources): {error}"
        ) from None
    return [DualScore(f, b) for f, b in zip(there, back)]
