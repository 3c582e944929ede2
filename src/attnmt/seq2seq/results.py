"""What a Translator gives: each translation with its candidates (text, pieces, score, attention,
word links), and the scores of given translations (Translator.score)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from attnmt.seq2seq.links import output_links


@dataclass
class Candidate:
    """One translation hypothesis."""

    text: str  # detokenized output
    tokens: list[str]  # subword pieces, ending in "</s>" when the model produced it
    score: float  # log-probability / length penalty (+ coverage penalty, if decoding.coverage_penalty)
    attention: np.ndarray | None  # (len(tokens), len(source_tokens)); None for attention "none"
    # Word links (source word i, output word j), "</s>" left out: filled where asked for
    # (translate(align=True), the server's "align": true; Translator.align_outputs)
    alignment: list[tuple[int, int]] | None = None

    def __repr__(self) -> str:
        return f"Candidate({self.text!r}, score {self.score:.3f}, {len(self.tokens)} tokens, {_shape(self.attention)})"


@dataclass
class ScoredTranslation:
    """How probable a model finds a given translation of a source (Translator.score)."""

    source: str
    translation: str
    tokens: list[str]  # the translation's subword pieces, ending in "</s>"
    log_probs: np.ndarray  # (len(tokens),) log p(y_t | y_<t, x) of each token (natural logarithm)

    @property
    def log_prob(self) -> float:
        """log p(y | x): the sum over the tokens, without length penalty (a search's score with alpha 0)."""
        return float(np.sum(self.log_probs, dtype=np.float64))

    @property
    def per_token(self) -> float:
        """The mean log-probability of a token: scores of translations of different lengths compare."""
        return self.log_prob / len(self.tokens)

    @property
    def perplexity(self) -> float:
        return math.exp(-self.per_token)

    def __repr__(self) -> str:
        return (
            f"ScoredTranslation({self.source!r} -> {self.translation!r}, log p {self.log_prob:.3f}, "
            f"{len(self.tokens)} tokens, {self.per_token:.3f} per token)"
        )


# Word links of (source, output) text pairs, one list of (source word i, output word j) a pair, from
# a model of their own rather than the attention: Translator.aligner (attnmt.translation.aligner.OutputAligner).
Aligner = Callable[..., list[list[tuple[int, int]]]]


def links_of(translation: "Translation", candidate: Candidate, **options) -> list[tuple[int, int]] | None:
    """The word links of ``candidate`` of ``translation``: those filled in, else read from its
    attention (attnmt.seq2seq.links.output_links with ``options``); None without either."""
    if candidate.alignment is not None:
        return candidate.alignment
    if candidate.attention is None:
        return None
    if translation.tagged:  # (the tag's column left out: source word i is the text's, not the tag's)
        return output_links(candidate.attention[:, 1:], translation.source_tokens[1:], candidate.tokens, **options)
    return output_links(candidate.attention, translation.source_tokens, candidate.tokens, **options)


def _shape(attention: np.ndarray | None) -> str:
    """The attention matrix in a repr: its shape, not its numbers."""
    return "no attention" if attention is None else "attention " + "x".join(map(str, np.shape(attention)))


@dataclass
class Translation:
    source: str
    source_tokens: list[str]  # subword pieces of the source, ending in "</s>"
    candidates: list[Candidate] = field(default_factory=list)  # best first (n-best list)
    truncated: bool = False  # the source was longer than max_tokens: its first max_tokens pieces were translated
    # the Translator's aligner when it was made, for the alignment property
    aligner: Aligner | None = field(default=None, repr=False, compare=False)
    # source_tokens begin with a tag (Translator.source_ids), which is no word of the source
    tagged: bool = False
    # besides the source (truncated), what max_tokens cut: "prefix" (to its first max_tokens pieces),
    # "constraints" (to the first phrases within MAX_CONSTRAINTS and max_tokens pieces)
    cut: tuple[str, ...] = ()

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    def __repr__(self) -> str:
        n = len(self.candidates)
        return (
            f"{type(self).__name__}({self.source!r} -> {self.text!r}, score {self.score:.3f}, "
            f"{len(self.source_tokens)} source tokens, {len(self.tokens)} output tokens, {_shape(self.attention)}, "
            f"{n} candidate{'s' * (n != 1)}{', truncated' if self.truncated else ''})"
        )

    @property
    def text(self) -> str:
        return self.best.text

    @property
    def tokens(self) -> list[str]:
        return self.best.tokens

    @property
    def score(self) -> float:
        return self.best.score

    @property
    def attention(self) -> np.ndarray | None:
        return self.best.attention

    @property
    def alignment(self) -> list[tuple[int, int]] | None:
        """Word links of the best candidate, (source word i, output word j), both 0-based and
        counting whitespace-separated words, "</s>" left out. From the model's aligner if it has one
        (an alignment layer in MODEL/aligner, attnmt.translation.aligner; a guided Transformer's
        trained heads, attnmt.translation.align.GuidedAttentionLinks), else each output word
        linked to the source word it attended to most (attnmt.seq2seq.links.output_links; None
        without attention)."""
        if self.best.alignment is None and self.aligner is not None:
            self.best.alignment = (
                self.aligner([self.source], [self.text])[0] if self.source.strip() and self.text.strip() else []
            )
        return links_of(self, self.best)
