"""Reranking a beam's candidates with a backward (target -> source) model: how well each candidate
explains the source, beside how probable the forward model finds it,

    s(y) = log p_f(y | x) / |y| + weight * log p_b(x | y) / |x|      (per token, each model's pieces)

the direct and the channel model of noisy-channel reranking (Yee et al. 2019, here without their
language model; Li & Jurafsky 2016's mutual information). A candidate that leaves part of the source
untranslated explains it badly, however fluent it is. On Multi30k (docs/transformer.md's
Transformer and its English -> German twin, benchmarks/rerank_backward.py) the 10 best of a beam
of 10 reranked so gain 1.2 BLEU on test_2016 over the beam's best; the weight was chosen on the
dev set, as it should be for any other pair of models.
"""

from __future__ import annotations

from dataclasses import replace

from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.inference import Translator
from attnmt.seq2seq.results import Translation

WEIGHT = 0.25  # the best on Multi30k's dev set among 0-2 (benchmarks/rerank_backward.py)


def rerank(
    forward: Translator,
    backward: Translator,
    translations: list[Translation],
    weight: float = WEIGHT,
    batch_size: int | None = None,
    tag: str | list[str] | None = None,
) -> list[Translation]:
    """``translations`` (forward's, with their n-best candidates) with each one's candidates ordered
    by s(y), best first, each ``score`` then s(y). Translations of an empty source stay as they are.
    ``tag``: the tag forward translated them with (Translator.source_ids; one, or one per
    translation), which it scores them with."""
    for model, role in ((forward, "forward"), (backward, "backward")):
        if model.inputs != "text":
            raise AttnmtError(
                f"{model.folder}: the {role} model of a reranking is {model.what}, not a translation model"
            )
    tags = [tag] * len(translations) if tag is None or isinstance(tag, str) else tag
    pairs = [
        (t.source, c.text, t_tag)
        for t, t_tag in zip(translations, tags, strict=True)
        if t.source.strip()
        for c in t.candidates
    ]
    there = iter(
        forward.score(
            [s for s, _, _ in pairs], [y for _, y, _ in pairs], batch_size, tag=[t_tag or "" for _, _, t_tag in pairs]
        )
    )
    back = iter(backward.score([y for _, y, _ in pairs], [s for s, _, _ in pairs], batch_size))
    reranked = []
    for t in translations:
        if not t.source.strip():
            reranked.append(t)
            continue
        scored = [replace(c, score=next(there).per_token + weight * next(back).per_token) for c in t.candidates]
        reranked.append(replace(t, candidates=sorted(scored, key=lambda c: -c.score)))
    return reranked
