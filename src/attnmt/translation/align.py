"""Word alignments from attention, and their evaluation against gold alignments.

Forced decoding runs the model with teacher forcing on a given translation and keeps the
attention weights of every target piece over the source pieces. Merging pieces into words and
taking, for every target word, the source word it attends to most gives a word alignment, written
in the Pharaoh format ("i-j" pairs, i the source word, j the target word, 0-based), which is
scored against a gold alignment with sure and possible links by the alignment error rate
(AER, Och & Ney 2003).
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import torch

from attnmt.core.config import GuidedAlignment
from attnmt.core.devices import model_device, to_numpy
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import Batch, forced_batches
from attnmt.data.corpus import read_lines
from attnmt.data.subwords import EOS
from attnmt.seq2seq.links import (
    Link,
    alignments_from_attention,
    drop_eos,
    shifted_by_one,
    without_eos,
    word_matrix,
)
from attnmt.translation.alignment_layer import AlignmentLayer, frozen_features
from attnmt.translation.saliency import saliency_matrices
from attnmt.viz.words import word_spans

# ---------------------------------------------------------------- forced attention


def force_attention(
    translator,
    sources: list[str],
    targets: list[str],
    batch_size: int = 32,
    layers: bool = False,
    heads: list[int] | None = None,
    full_context: bool | None = None,
) -> list[np.ndarray]:
    """Attention of the model while it is forced to produce each given target.

    Returns, per pair, an array (target pieces + EOS) x (source pieces + EOS) whose rows are the
    attention weights of each output step; rows sum to 1. Pairs are batched by length; the output
    is in input order. An empty side is just EOS (a matrix with one row or one column).
    ``layers=True`` (Transformers): the cross-attention of every decoder layer, averaged over its
    heads (``heads``: those heads only), as an array (layers, target pieces + EOS, source pieces + EOS).
    ``full_context`` (Transformers): the pass that sees the whole target, as guided alignment with
    full_context trains it; default: as the model was trained (trained_with_full_context).
    """
    if isinstance(sources, str) or isinstance(targets, str):
        raise TypeError("force_attention() takes lists of strings")
    if len(sources) != len(targets):
        raise AttnmtError(f"numbers of sentences differ: {len(sources)} sources, {len(targets)} targets")
    model = translator.model
    if layers and not hasattr(model, "attention_maps"):
        raise AttnmtError(f"the model in {translator.folder} has no attention layers (layers=True is for Transformers)")
    if heads is not None and not layers:
        raise AttnmtError("heads are chosen among a Transformer's heads: give layers=True (a layer) too")
    if heads is not None and not all(0 <= h < model.config.heads for h in heads):
        raise AttnmtError(
            f"heads {heads}: the model in {translator.folder} has {model.config.heads} heads "
            f"(0 to {model.config.heads - 1})"
        )
    if not model.has_attention:
        raise AttnmtError(
            f"the model in {translator.folder} has attention 'none': it has no attention weights to align with"
        )

    full_context = trained_with_full_context(translator) if full_context is None else full_context
    if full_context and not hasattr(model, "attention_maps"):
        raise AttnmtError(
            f"the model in {translator.folder} is not a Transformer: full context is a Transformer "
            "decoder pass without its causal mask"
        )

    def weights_of(batch):
        if layers or full_context:  # (B,L,H,T,S) -> (B,L,T,S)
            cross = model.attention_maps(batch.src, batch.src_lengths, batch.tgt_in, full_context)["cross"]
            maps = (cross if heads is None else cross[:, :, heads]).mean(dim=2)
            return maps if layers else maps[:, -1]  # the last layer, as decoder_outputs gives it
        return model.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in, translator.attention_window)[1]

    return forced_matrices(translator, sources, targets, batch_size, weights_of)


def trained_with_full_context(translator) -> bool:
    """Whether the model's attention was trained by guided alignment with full_context: then its
    alignments are read from the pass that sees the whole target."""
    guided = translator.config.training.guided_alignment
    return guided is not None and guided.full_context


def guided_heads(translator) -> GuidedAlignment | None:
    """A Transformer trained by guided alignment: its config's guided_alignment, whose layer and
    heads are the attention that was trained towards links, and so the one its links are read from
    when none is chosen; None for any other model (an RNN has one attention, and it was that one)."""
    guided = translator.config.training.guided_alignment
    return guided if guided is not None and translator.config.model.type == "transformer" else None


class GuidedAttentionLinks:
    """The word links of a guided Transformer's translations (what ``Translator.aligner`` holds for
    such a model without an alignment layer): each output forced through the model after the search
    and read from the attention that guided alignment trained, its layer and heads (and with
    full_context the pass that sees the whole target), as OpenNMT-py's report_align reads its
    alignment heads. The search's own attention is the last layer's, every head averaged."""

    word_links = "guided_attention"  # GET /models

    def __init__(self, translator):
        self.translator = translator

    def __call__(
        self,
        sources: list[str],
        outputs: list[str],
        method: str | None = None,
        threshold: float = 0.5,
        batch_size: int = 32,
    ) -> list[list[Link]]:
        return align(self.translator, sources, outputs, batch_size, method, threshold)

    def __repr__(self) -> str:
        guided = guided_heads(self.translator)
        return (
            f"GuidedAttentionLinks(layer {guided.layer}, heads {guided.heads}"
            f"{', full context' if guided.full_context else ''})"
        )


def aligner_posteriors(
    aligner: AlignmentLayer, translator, sources: list[str], targets: list[str], batch_size: int = 32
) -> list[np.ndarray]:
    """The alignment r of an alignment layer trained on ``translator`` for every pair, as
    force_attention gives the attention: per pair an array (target pieces + EOS) x (source pieces +
    EOS) whose rows sum to 1, in input order."""
    aligner.eval()

    def weights_of(batch):
        return aligner(*frozen_features(translator.model, batch), batch.src, batch.tgt_out)[1]

    return forced_matrices(translator, sources, targets, batch_size, weights_of)


def forced_matrices(
    translator, sources: list[str], targets: list[str], batch_size: int, weights_of: Callable[[Batch], torch.Tensor]
) -> list[np.ndarray]:
    """``weights_of(batch)``, (B, ..., target pieces + EOS, source pieces + EOS), of every pair forced
    through the model (in eval mode, no gradients), the pairs batched by length; per pair its array
    cut to its lengths, in input order."""
    src_ids = translator.src_subwords.encode(list(sources))
    tgt_ids = translator.tgt_subwords.encode(list(targets))
    results: list[np.ndarray | None] = [None] * len(sources)
    model = translator.model
    was_training = model.training
    model.eval()
    try:
        for indices, batch in forced_batches(src_ids, tgt_ids, batch_size, model_device(model)):
            with torch.inference_mode():  # only the weights: no output layer
                weights = to_numpy(weights_of(batch).float())
            for row, i in enumerate(indices):
                results[i] = weights[row, ..., : len(tgt_ids[i]) + 1, : len(src_ids[i]) + 1].copy()
    finally:
        model.train(was_training)
    return results


def piece_lists(translator, sources: list[str], targets: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """The pieces of every source and target, each ending in "</s>" (the axes of force_attention)."""

    def pieces(subwords, texts):
        return [subwords.pieces(ids + [EOS]) for ids in subwords.encode(list(texts))]

    return pieces(translator.src_subwords, sources), pieces(translator.tgt_subwords, targets)


# ---------------------------------------------------------------- pieces -> words


# ---------------------------------------------------------------- attention -> links


def word_attention(
    translator,
    sources: list[str],
    targets: list[str],
    matrices: list[np.ndarray],
    words: bool = True,
    shift: bool = False,
) -> list[np.ndarray]:
    """The piece matrices of force_attention as word matrices (target words x source words, see
    word_matrix), or with ``words=False`` as piece matrices without "</s>"; ``shift``: see
    shifted_by_one. A text whose pieces do not give its whitespace-separated words is an error."""
    src_pieces, tgt_pieces = piece_lists(translator, sources, targets)
    result = []
    for k, (matrix, sp, tp) in enumerate(zip(matrices, src_pieces, tgt_pieces)):
        matrix = shifted_by_one(matrix) if shift else matrix
        if not words:
            result.append(drop_eos(matrix, sp, tp))
            continue
        for side, text, pieces in (("source", sources[k], sp), ("target", targets[k], tp)):
            if len(word_spans(without_eos(pieces))) != len(text.split()):
                raise AttnmtError(
                    f"sentence pair {k + 1}: the {side} has {len(text.split())} whitespace-separated words "
                    f"but its subword pieces make {len(word_spans(without_eos(pieces)))}, so word indices "
                    "would not match the text"
                )
        result.append(word_matrix(matrix, sp, tp))
    return result


def align(
    translator,
    sources: list[str],
    targets: list[str],
    batch_size: int = 32,
    method: str | None = None,
    threshold: float = 0.5,
    words: bool = True,
    shift: bool = False,
    layer: int | None = None,
    heads: list[int] | None = None,
    aligner: AlignmentLayer | None = None,
    full_context: bool | None = None,
    saliency: int | None = None,
) -> list[list[Link]]:
    """Word alignments of sentence pairs from forced attention (one list of links per pair).

    With ``words=False`` the indices are those of the subword pieces (without "</s>"), unmerged.
    With words, the word indices are those of the whitespace-separated tokens of each text;
    a text whose pieces do not give the same number of words is an error. ``shift``: the
    attention of the step after each word (shifted_by_one). A Transformer's ``layer`` (negative:
    from the last; default: the last) and ``heads`` (default: all, averaged); with neither, a model
    trained by guided alignment is read where guidance trained it (guided_heads). ``aligner``: an
    alignment layer trained on this model (attnmt.translation.aligner.load_aligner), whose
    posterior replaces the attention. ``full_context``: a Transformer's pass that sees the whole
    target (force_attention; default: as the model was trained). ``method``: by default the better
    reading of each on E4: argmax for the attention, threshold for an aligner's posterior (default_method).
    ``saliency``: gradients instead of attention, with that many SmoothGrad samples (attnmt.translation.saliency).
    """
    method = method or default_method(aligner is not None)
    if method not in ("argmax", "threshold"):
        raise AttnmtError(f"unknown alignment method {method!r}; expected 'argmax' or 'threshold'")
    _check_threshold(threshold)
    return [
        alignments_from_attention(matrix, method, threshold)
        for matrix in alignment_matrices(
            translator, sources, targets, batch_size, words, shift, layer, heads, aligner, full_context, saliency
        )
    ]


def default_method(from_aligner: bool) -> str:
    """How links are read when not said: each output word to its most attended source word for the
    attention (argmax: 0.1-10 points of AER better than threshold on E4); every weight of at least
    the threshold for an aligner's posterior, whose rows leave out what its NULL word explains (3-4
    points better than argmax on E4, both directions)."""
    return "threshold" if from_aligner else "argmax"


def _check_threshold(threshold: float):
    if not 0 < threshold <= 1:
        raise AttnmtError(f"the alignment threshold must be in (0, 1], got {threshold}")


def alignment_matrices(
    translator,
    sources: list[str],
    targets: list[str],
    batch_size: int = 32,
    words: bool = True,
    shift: bool = False,
    layer: int | None = None,
    heads: list[int] | None = None,
    aligner: AlignmentLayer | None = None,
    full_context: bool | None = None,
    saliency: int | None = None,
) -> list[np.ndarray]:
    """The matrices that align reads its links from: per pair, target words x source words (with
    ``words=False``, pieces without "</s>"); the options are align's."""
    if aligner is not None or saliency is not None:
        if shift or layer is not None or heads is not None or full_context or (aligner and saliency is not None):
            raise AttnmtError(
                "an aligner, or saliency, gives its own alignment of each target word: shift, layer, "
                "heads and full context are for the attention (and saliency reads no aligner)"
            )
        matrices = (
            aligner_posteriors(aligner, translator, sources, targets, batch_size)
            if aligner is not None
            else saliency_matrices(translator, sources, targets, batch_size, saliency)
        )
    elif layer is None and heads is None and (guided := guided_heads(translator)) is None:
        matrices = force_attention(translator, sources, targets, batch_size, full_context=full_context)
    else:  # a layer, or heads, or none chosen of a guided Transformer: those that guidance trained
        if layer is None and heads is None:
            layer, heads = guided.layer, guided.heads
        index = _layer_index(translator, layer)
        matrices = [
            maps[index]
            for maps in force_attention(
                translator, sources, targets, batch_size, layers=True, heads=heads, full_context=full_context
            )
        ]
    return word_attention(translator, sources, targets, matrices, words, shift)


def _layer_index(translator, layer: int | None) -> int:
    count = translator.config.model.decoder_layers
    layer = -1 if layer is None else layer
    if not -count <= layer < count:
        raise AttnmtError(
            f"layer {layer}: the model in {translator.folder} has {count} decoder layers "
            f"(0 to {count - 1}, or -1 for the last)"
        )
    return layer


def align_both_ways(
    forward,
    backward,
    sources: list[str],
    targets: list[str],
    symmetrization: str,
    aligners: tuple[AlignmentLayer | None, AlignmentLayer | None] = (None, None),
    **options,
) -> list[list[Link]]:
    """The links of ``forward`` (a source->target model) and of ``backward`` (target->source, its
    links turned around) made one alignment per pair (``symmetrization``: see symmetrize, or
    "mean": the links where the mean of both directions' word weights reaches ``threshold``);
    ``aligners``: an alignment layer of each model, or None (its attention); ``options``: those of
    align, for both."""
    if symmetrization not in SYMMETRIZATIONS + ("mean",):
        raise AttnmtError(
            f"unknown symmetrization {symmetrization!r}; expected one of {', '.join(SYMMETRIZATIONS)} or mean"
        )
    if symmetrization == "mean":
        return _mean_of_both_ways(forward, backward, sources, targets, aligners, **options)
    there = align(forward, sources, targets, aligner=aligners[0], **options)
    back = align(backward, targets, sources, aligner=aligners[1], **options)
    return [symmetrize(f, transposed(b), symmetrization) for f, b in zip(there, back)]


def _mean_of_both_ways(
    forward, backward, sources, targets, aligners, method: str = "argmax", threshold: float = 0.5, **options
) -> list[list[Link]]:
    """Each link whose weight, averaged over the two directions (the backward matrix transposed), is at
    least ``threshold``: a link both directions half believe in. (``method`` does not apply.)"""
    _check_threshold(threshold)
    there = alignment_matrices(forward, sources, targets, aligner=aligners[0], **options)
    back = alignment_matrices(backward, targets, sources, aligner=aligners[1], **options)
    return [alignments_from_attention((f + b.T) / 2, "threshold", threshold) for f, b in zip(there, back)]


# ---------------------------------------------------------------- symmetrization


def transposed(links) -> list[Link]:
    """Links of the other direction: (i, j) -> (j, i), e.g. a French->English model's links as English->French."""
    return sorted((j, i) for i, j in links)


NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final(forward, backward) -> list[Link]:
    """The symmetrization of Koehn et al. (2003), as Moses writes it: start from the intersection;
    grow it with links of the union next to (diagonals included) a link already in, whose source
    or target word is still unaligned, until nothing changes; finally add the union's links whose
    source or target word is still unaligned."""
    union = set(forward) | set(backward)
    links = set(forward) & set(backward)

    def adds_a_word(i, j):
        return all(a != i for a, _ in links) or all(b != j for _, b in links)

    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                candidate = (i + di, j + dj)
                if candidate in union and candidate not in links and adds_a_word(*candidate):
                    links.add(candidate)
                    grown = True
    for direction in (forward, backward):
        for i, j in sorted(direction):
            if (i, j) not in links and adds_a_word(i, j):
                links.add((i, j))
    return sorted(links)


def symmetrize(forward, backward, method: str) -> list[Link]:
    """Links of both directions (both as source-target pairs) made one alignment: "intersection"
    (precise), "union" (recalls most) or "grow-diag-final" (in between)."""
    if method == "intersection":
        return sorted(set(forward) & set(backward))
    if method == "union":
        return sorted(set(forward) | set(backward))
    if method == "grow-diag-final":
        return grow_diag_final(forward, backward)
    raise ValueError(f"unknown symmetrization {method!r}; expected one of {', '.join(SYMMETRIZATIONS)}")


SYMMETRIZATIONS = ("intersection", "union", "grow-diag-final")


# ---------------------------------------------------------------- Pharaoh format


def format_pharaoh(links) -> str:
    """ "i-j" pairs separated by spaces, sorted (by source index, then target index)."""
    return " ".join(f"{i}-{j}" for i, j in sorted(set(links)))


_LINK = re.compile(r"(\d+)([-?p])(\d+)")


def parse_pharaoh(
    line: str, one_based: bool = False, allow_possible: bool = True, where: str = ""
) -> tuple[set[Link], set[Link]]:
    """One line -> (sure links, possible links); possible includes sure.

    "i-j" is a sure link, "i?j" and "ipj" possible ones. ``where`` (e.g. "file: line 3")
    prefixes error messages.
    """
    sure, possible = set(), set()
    prefix = f"{where}: " if where else ""
    for token in line.split():
        match = _LINK.fullmatch(token)
        if match is None:
            expected = "i-j (sure) or i?j / ipj (possible)" if allow_possible else "i-j"
            raise AttnmtError(
                f"{prefix}malformed alignment link {token!r}; expected {expected} "
                "with non-negative integers i (source) and j (target)"
            )
        i, kind, j = int(match[1]), match[2], int(match[3])
        if kind != "-" and not allow_possible:
            raise AttnmtError(f"{prefix}possible link {token!r} in a hypothesis; a hypothesis has only links i-j")
        if one_based:
            if i == 0 or j == 0:
                raise AttnmtError(f"{prefix}link {token!r} has index 0, but the file is read as 1-based (--one-based)")
            i, j = i - 1, j - 1
        possible.add((i, j))
        if kind == "-":
            sure.add((i, j))
    return sure, possible


def read_gold(path, one_based: bool = False) -> tuple[list[set[Link]], list[set[Link]]]:
    """A gold alignment file -> (sure links, possible links) per line; possible includes sure."""
    sure, possible = [], []
    for line_no, line in enumerate(read_lines(path), start=1):
        s, p = parse_pharaoh(line, one_based, where=f"{path}: line {line_no}")
        sure.append(s)
        possible.append(p)
    return sure, possible


def read_hypotheses(path, one_based: bool = False) -> list[set[Link]]:
    """A hypothesis alignment file (Pharaoh, "i-j" links only) -> links per line."""
    return [
        parse_pharaoh(line, one_based, allow_possible=False, where=f"{path}: line {line_no}")[0]
        for line_no, line in enumerate(read_lines(path), start=1)
    ]


# ---------------------------------------------------------------- scores


def alignment_scores(hyps, gold_sure, gold_possible) -> dict:
    """Precision, recall and AER over the whole corpus (Och & Ney 2003), A the hypothesis links,
    S the sure and P the possible gold links (S is taken as part of P):

        precision = |A ∩ P| / |A|      recall = |A ∩ S| / |S|
        AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

    Counts are summed over all sentences before dividing. Precision is 0 without any hypothesis link.
    """
    if not len(hyps) == len(gold_sure) == len(gold_possible):
        raise AttnmtError(
            f"numbers of sentences differ: the hypothesis has {len(hyps)}, the gold alignment {len(gold_sure)}"
        )
    a = s = a_and_s = a_and_p = 0
    for hyp, sure, possible in zip(hyps, gold_sure, gold_possible):
        hyp, sure = set(hyp), set(sure)
        possible = set(possible) | sure
        a += len(hyp)
        s += len(sure)
        a_and_s += len(hyp & sure)
        a_and_p += len(hyp & possible)
    if s == 0:
        raise AttnmtError("the gold alignment has no sure links: recall and AER are undefined")
    return {
        "aer": (a + s - a_and_s - a_and_p) / (a + s),  # = 1 - (|A∩S| + |A∩P|) / (|A| + |S|)
        "precision": a_and_p / a if a else 0.0,
        "recall": a_and_s / s,
        "sentences": len(hyps),
    }


def score_files(gold_path, hyp_path, one_based: bool = False) -> dict:
    """alignment_scores of a hypothesis file against a gold file; line counts must match."""
    sure, possible = read_gold(gold_path, one_based)
    hyps = read_hypotheses(hyp_path)
    if len(hyps) != len(sure):
        raise AttnmtError(f"line counts differ: {gold_path} has {len(sure)} lines, {hyp_path} has {len(hyps)}")
    return alignment_scores(hyps, sure, possible)


def symmetrized_scores(forward, backward, gold_sure, gold_possible) -> dict[str, dict]:
    """alignment_scores of the links of one direction ("forward": each target word linked to
    source words), of the other ("backward", as source-target links too; may be None) and of each
    symmetrization of the two: the one scoring of every aligner, attention or statistical."""
    scores = {"forward": alignment_scores(forward, gold_sure, gold_possible)}
    if backward is not None:
        scores["backward"] = alignment_scores(backward, gold_sure, gold_possible)
        for method in SYMMETRIZATIONS:
            links = [symmetrize(f, b, method) for f, b in zip(forward, backward)]
            scores[method] = alignment_scores(links, gold_sure, gold_possible)
    return scores
