"""Prefix-constrained decoding: outputs that begin with given tokens, as OpenNMT-py's tgt_prefix and
fairseq's prefix do (interactive translation: a translator types the start, the model completes
it; or what the model would write after a given start). While a sentence's prefix lasts, its next
token can only be the next prefix token:

    p'(y_t | y_<t, x) = p(y_t | y_<t, x) if y_t = prefix_t, else 0         (t < |prefix|)

and the model's own distribution after it. A ``Prefix`` is the loop processor of that distribution
(attnmt.seq2seq.processors), so every search (greedy, beam, sampling, constrained, an ensemble's, in
either executor) continues the prefix as it would its own output, and a hypothesis' score is the
model's log-probability of the prefix and what follows (p', unnormalized, keeps p's values: the
score of an output is the same with or without its prefix forced, which Translator.score checks).
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass

import torch
from torch import Tensor

from attnmt.core.errors import AttnmtError
from attnmt.data.batching import pad
from attnmt.data.subwords import PAD, UNK, valid_text
from attnmt.seq2seq.processors import Allowed, Forced, processed


FITS_CACHED = 256  # Spelling.fits answers kept: 2 MB for a vocabulary of 8,000 pieces, 8 MB for 32,000


class Spelling:
    """The pieces that can go on spelling the start of a word an output must begin with (a prefix
    that ends inside a word: "The do" must go on "▁do..."), by their text: a piece fits what is
    left to spell if it is the start of it, or goes beyond it ("▁dog"). Control, unknown and byte
    pieces never do."""

    def __init__(self, pieces: list[str]):
        self.pieces = pieces  # the text of each piece id; "" for those that never spell
        # The answers for the words spelled lately: a batch asks again and again for few of them.
        # Bounded (least recently used out): every request brings new words, and each answer is a
        # vector of the vocabulary; kept whole, 40 long prefixes took a server from 417 to 527 MB.
        self.fits = functools.lru_cache(maxsize=FITS_CACHED)(self._fits)
        self._ids: dict[str, list[int]] = {}  # the ids of each piece's text
        for i, piece in enumerate(pieces):
            if piece:
                self._ids.setdefault(piece, []).append(i)
        self._sorted = sorted(self._ids)  # (for the pieces that begin with a text: a range of them)

    def _fits(self, left: str) -> Tensor:
        """(V,) bool: which pieces fit ``left``: those it starts with and those that start with it."""
        fits = torch.zeros(len(self.pieces), dtype=torch.bool, device="cpu")
        ids = self.starts(left)
        for text in self._sorted[bisect.bisect_left(self._sorted, left) :]:
            if not text.startswith(left):
                break
            ids += self._ids[text]
        fits[ids] = True
        return fits

    def starts(self, left: str) -> list[int]:
        """The pieces that ``left`` starts with (each one that, written, leaves the rest of it to spell)."""
        return [i for end in range(1, len(left) + 1) for i in self._ids.get(left[:end], [])]

    def after(self, left: str, token: int) -> str:
        """What is left to spell once ``token`` is written: "" when it went to the end or beyond."""
        piece = self.pieces[token]
        return left[len(piece) :] if piece and left.startswith(piece) else ""


@dataclass
class Prefixes:
    """What the outputs of a batch's sentences begin with: first ``tokens`` (whole pieces, one by
    one: token ids, or under a shortlist their columns), then pieces that spell ``words`` (the
    start of a word, "▁do": "" for none; the last piece may go beyond it), by ``spelling``."""

    tokens: list[list[int]]
    words: list[str] | None = None
    spelling: Spelling | None = None
    cut: frozenset[int] = frozenset()  # the sentences whose prefix was cut to max_tokens (prefixes_of)

    def of(self, sentences: list[int]) -> Prefixes:
        """The prefixes of ``sentences`` (a batch's, in its order)."""
        words = None if self.words is None else [self.words[i] for i in sentences]
        return Prefixes([self.tokens[i] for i in sentences], words, self.spelling)


def prefixes_of(
    subwords, texts: list[str], prefix: list[str], spelling: Spelling, max_tokens: int | None = None
) -> Prefixes | None:
    """What each of ``texts``' translations begin with, from ``prefix`` (one string for each; "":
    none) and the target ``subwords``: the pieces of each prefix up to the word it ends inside, then
    pieces that spell that word's start ("The do": "▁The", then "▁do" or "▁dog" or "▁d", "o"...).
    ``max_tokens``: a prefix of more pieces is cut to its first ``max_tokens``, all forced as whole
    pieces (``Prefixes.cut`` says which). None where no text has a prefix. AttnmtError for a prefix with
    a character that the pieces cannot write: its output could not begin with it."""
    if isinstance(prefix, str) or len(prefix) != len(texts):
        raise AttnmtError(f'prefix: give a list with a prefix for each of the {len(texts)} texts ("": none)')
    prefix = [valid_text(p) for p in prefix]
    if bad := unwritable(subwords, prefix):
        raise AttnmtError(f"prefix {prefix[bad[0]]!r} (of text {bad[0] + 1}, counting from 1) {UNWRITABLE}")
    heads, words = zip(*map(split_last_word, prefix)) if prefix else ((), ())
    tokens, spelled = subwords.encode(list(heads)), subwords.encode(list(words))
    words = ["".join(subwords.pieces(ids)) for ids in spelled]
    cut = {
        i for i, (head, word) in enumerate(zip(tokens, spelled)) if max_tokens and len(head) + len(word) > max_tokens
    }
    for i in cut:  # (as whole pieces: the word where it is cut may go on after it)
        tokens[i], words[i] = (tokens[i] + spelled[i])[:max_tokens], ""
    if not any(tokens) and not any(words):
        return None
    return Prefixes(tokens, words, spelling, frozenset(cut))


UNWRITABLE = "has a character that the model's target pieces cannot write"


def unwritable(subwords, prefix: list[str]) -> list[int]:
    """The prefixes of ``prefix`` that the target ``subwords`` cannot write (a character outside their
    pieces: its piece would be <unk>, and no output could begin with the prefix)."""
    return [i for i, ids in enumerate(subwords.encode(prefix)) if UNK in ids]


def split_last_word(text: str) -> tuple[str, str]:
    """A prefix cut before the word it ends inside: "The do" -> ("The ", "do"); "The " -> ("The ", "")."""
    head, word = re.fullmatch(r"(.*\s)?(\S*)", text, re.DOTALL).groups()
    return head or "", word


@dataclass
class PrefixState:
    """A Prefix's state of the eager executor's rows: the sentence of each row, and what is left of
    its sentence's word to spell (None: no sentence of the batch has one)."""

    sentences: Tensor  # (rows,) the sentence (position in the batch) of each row
    left: list[str] | None = None

    def select(self, index: Tensor) -> PrefixState:
        left = None if self.left is None else [self.left[i] for i in index.tolist()]
        return PrefixState(self.sentences[index], left)


@dataclass
class FixedPrefixState:
    """PrefixState for the fixed-shape executor (attnmt.seq2seq.fast_decoding): tensors only, none
    read back, so that a captured step restricts its log-probabilities too. What is left of a
    row's word to spell is a position in it (``SpellingTables``)."""

    sentences: Tensor  # (rows,) the sentence of each row
    position: Tensor  # (rows,) the characters of its sentence's word spelled (its length: none left)

    def select(self, index: Tensor) -> FixedPrefixState:
        return FixedPrefixState(self.sentences[index], self.position[index])


class SpellingTables:
    """Spelling.fits and Spelling.after of each sentence's word, as tensors: for every position p of
    the word (what is left: word[p:]), which pieces fit it (``fits`` (B, W, V), all at p = its
    length: nothing left) and which it starts with (``starts`` (B, W, V)); a piece that it starts
    with moves p by the piece's length (``lengths`` (V,)), one that fits otherwise ends the word."""

    def __init__(self, words: list[str], spelling: Spelling, device: torch.device):
        width, vocabulary = max(map(len, words)) + 1, len(spelling.pieces)
        self.fits = torch.ones(len(words), width, vocabulary, dtype=torch.bool, device="cpu")
        self.starts = torch.zeros(len(words), width, vocabulary, dtype=torch.bool, device="cpu")
        for b, word in enumerate(words):
            for p in range(len(word)):
                left = word[p:]
                self.fits[b, p] = spelling.fits(left)
                self.starts[b, p, spelling.starts(left)] = True
        self.fits, self.starts = self.fits.to(device), self.starts.to(device)
        self.lengths = torch.tensor([len(x) for x in spelling.pieces], device=device)
        self.word_lengths = torch.tensor([len(w) for w in words], device=device)


class Prefix:
    """The loop processor (attnmt.seq2seq.processors) whose outputs for the sentences of a batch begin
    with ``prefixes``; ``vocabulary``: the ids of the shortlist the log-probabilities are over, if
    any. It restricts a step's log-probabilities to the prefix's next token while it lasts
    (``Forced``), then to the pieces that spell its word (``Allowed``), in both executors: on a
    PrefixState (``start(memory, fixed=False)``: the eager one), with the host's help; on a
    FixedPrefixState (the fixed-shape one, a GPU's captured step), with tensors only."""

    def __init__(self, prefixes: Prefixes, vocabulary: Tensor | None, device: torch.device):
        if any(PAD in p for p in prefixes.tokens):
            raise AttnmtError("a prefix holds padding")
        self.prefixes, self.vocabulary = prefixes, vocabulary
        tokens = prefixes.tokens
        self.tokens = pad(tokens)[0].to(device) if any(tokens) else None  # (B, longest), PAD after each
        self.forced = [len(t) for t in tokens]  # tokens forced before a sentence's word is spelled
        self.words = prefixes.words if prefixes.words and any(prefixes.words) else None
        self.forced_counts = torch.tensor(self.forced, device=device)
        self.tables: SpellingTables | None = None  # (made for the first fixed-shape search)

    def start(self, memory, fixed: bool) -> PrefixState | FixedPrefixState:
        """The state of the first step's rows: one a sentence (eager), or those of each sentence in
        turn, k of them for a beam of k (fixed shape)."""
        rows, device = memory.states.size(0), memory.states.device
        if not fixed:
            return PrefixState(torch.arange(rows, device=device), None if self.words is None else list(self.words))
        if self.words is not None and self.tables is None:
            self.tables = SpellingTables(self.words, self.prefixes.spelling, device)
        sentences = torch.arange(rows, device=device) // (rows // len(self.forced))
        return FixedPrefixState(sentences, torch.zeros(rows, dtype=torch.long, device=device))

    def __call__(self, t, prev_tokens: Tensor, log_probs: Tensor, state: PrefixState | FixedPrefixState):
        """Step t's log-probabilities restricted, and the rows' state after it."""
        if isinstance(state, FixedPrefixState):
            return self._fixed_restriction(t, prev_tokens, log_probs, state)
        left, restrictions = state.left, []
        if self.tokens is not None and t < self.tokens.size(1):
            # (rows, 1); PAD: the tokens are over
            restrictions.append(Forced(self.tokens[state.sentences, t].unsqueeze(1), PAD))
        if left is not None:
            left, fits = self._spell(t, prev_tokens, state)
            if fits is not None:
                restrictions.append(Allowed(fits))
        return processed(log_probs, restrictions), PrefixState(state.sentences, left)

    def _fixed_restriction(self, t: Tensor, prev_tokens: Tensor, log_probs: Tensor, state: FixedPrefixState):
        """The restrictions on a FixedPrefixState, as tensor operations (``t`` (1,) on the device)."""
        position, restrictions = state.position, []
        if self.tokens is not None:  # the prefix's token at step t (PAD: over), then PAD
            longest = self.tokens.size(1)
            forced = torch.where(t < longest, self.tokens[state.sentences, t.clamp(max=longest - 1)], PAD)
            restrictions.append(Forced(forced.unsqueeze(1), PAD))
        if self.words is not None:
            tables, forced = self.tables, self.forced_counts.to(position.device)[state.sentences]
            ends = tables.word_lengths[state.sentences]
            # the token written last, if it was one spelling the word: what is left after it
            spelled = (t - 1 >= forced) & (position < ends)
            starts = tables.starts[state.sentences, position, prev_tokens]
            moved = torch.where(starts, position + tables.lengths[prev_tokens], ends)
            position = torch.where(spelled, moved, position)
            fits = tables.fits[state.sentences, position]  # (rows, V); everything once the word is done
            if self.vocabulary is not None:
                fits = fits[:, self.vocabulary]
            now = (t >= forced).unsqueeze(1)
            restrictions.append(Allowed(~now | fits))
        return processed(log_probs, restrictions), FixedPrefixState(state.sentences, position)

    def _spell(self, t: int, prev_tokens: Tensor, state: PrefixState) -> tuple[list[str], Tensor | None]:
        """What each row has left to spell at step t once its last token is counted, and (rows,
        columns) the pieces that may come next (None where no row is spelling now)."""
        spelling, forced = self.prefixes.spelling, [self.forced[s] for s in state.sentences.tolist()]
        prev = prev_tokens.tolist()
        left = [
            spelling.after(word, prev[r]) if word and 0 <= t - 1 - forced[r] else word
            for r, word in enumerate(state.left)
        ]  # (a token written after the row's forced ones)
        spelling_now = [bool(word) and t >= forced[r] for r, word in enumerate(left)]
        if not any(spelling_now):
            return left, None
        everything = torch.ones(len(spelling.pieces), dtype=torch.bool, device="cpu")
        fits = torch.stack([spelling.fits(word) if now else everything for word, now in zip(left, spelling_now)])
        return left, fits if self.vocabulary is None else fits[:, self.vocabulary.cpu()]
