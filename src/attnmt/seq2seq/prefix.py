"""Prefix-constrained decoding: outputs that begin with given tokens, as OpenNMT-py's tgt_prefix and
fairseq's prefix do (interactive translation: a translator types the start, the model completes
it; or what the model would write after a given start). While a sentence's prefix lasts, its next
token can only be the next prefix token:

    p'(y_t | y_<t, x) = p(y_t | y_<t, x) if y_t = prefix_t, else 0         (t < |prefix|)

and the model's own distribution after it. A Prefixed model is the model with that distribution,
so every search (greedy, beam, sampling, an ensemble's) continues the prefix as it would its own
output, and a hypothesis' score is the model's log-probability of the prefix and what follows
(p', unnormalized, keeps p's values: the score of an output is the same with or without its
prefix forced, which Translator.score checks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from attnmt.core.errors import AttnmtError
from attnmt.data.batching import pad
from attnmt.data.subwords import PAD
from attnmt.seq2seq.base import EncoderDecoder, StepOutput


@dataclass
class PrefixState:
    """The model's decoder state, with the sentence of each row and the steps taken."""

    inner: Any
    sentences: Tensor  # (rows,) the sentence (position in the batch) of each row
    t: int

    def select(self, index: Tensor) -> PrefixState:
        return PrefixState(self.inner.select(index), self.sentences[index], self.t)


class Prefixed(EncoderDecoder):
    """``model`` whose outputs for the B sentences of a batch begin with ``prefixes`` (B lists of
    column ids of its log-probabilities: token ids, or under a shortlist their columns; empty: no
    prefix)."""

    fast_search = False  # the textbook searches: the GPU's captured step has no constraint

    def __init__(self, model: EncoderDecoder, prefixes: list[list[int]], device: torch.device):
        super().__init__()
        if any(PAD in p for p in prefixes):
            raise AttnmtError("a prefix holds padding")
        self.model = model
        self.config, self.generator = model.config, model.generator
        self.prefixes = pad(prefixes)[0].to(device) if any(prefixes) else None  # (B, longest), PAD after each

    @property
    def has_attention(self) -> bool:
        return self.model.has_attention

    def encode(self, src: Tensor, lengths: Tensor, window: tuple[int, int] | None = None):
        return self.model.encode(src, lengths, window)

    def init_state(self, memory) -> PrefixState:
        inner = self.model.init_state(memory)
        return PrefixState(inner, torch.arange(memory.states.size(0), device=memory.states.device), 0)

    def decode_step(self, prev_tokens: Tensor, state: PrefixState, memory) -> StepOutput:
        step = self.model.decode_step(prev_tokens, state.inner, memory)
        log_probs = step.log_probs
        if self.prefixes is not None and state.t < self.prefixes.size(1):
            forced = self.prefixes[state.sentences, state.t].unsqueeze(1)  # (rows, 1); PAD: the prefix is over
            only = torch.full_like(log_probs, float("-inf")).scatter(1, forced, log_probs.gather(1, forced))
            log_probs = torch.where(forced != PAD, only, log_probs)
        return replace(step, log_probs=log_probs, state=PrefixState(step.state, state.sentences, state.t + 1))

    def decoder_outputs(self, src, lengths, tgt_in, window=None):
        raise AttnmtError(_SEARCH_ONLY)

    def decoder_outputs_of(self, memory, tgt_in):
        raise AttnmtError(_SEARCH_ONLY)


_SEARCH_ONLY = "a prefix constrains the searches; a teacher-forced pass reads the whole target already"
