"""Ensemble decoding: models of one language pair, trained apart (other seeds, other variants) on the
same subwords, search as one. At every step the next token's distribution is the mean of theirs,

    p(y_t | y_<t, x) = 1/N sum_n p_n(y_t | y_<t, x),    log p = logsumexp_n log p_n - log N,

and each keeps its own encoder output and decoder state. The attention a step reports is the mean
of the members' (each the weights its model would draw), so the heatmaps and the word links of an
ensemble's translations still read as one model's. An Ensemble is an EncoderDecoder for the searches
(decoding.py: greedy, beam, sampling) and scores given translations (``target_log_probs``,
Translator.score); the other teacher-forced passes (training, forced alignment) read one model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.base import EncoderDecoder, StepOutput


@dataclass
class EnsembleMemory:
    """The members' memories of one batch, reordered together."""

    members: list

    @property
    def states(self) -> Tensor:  # (what callers read of a memory: its batch, device and source positions)
        return self.members[0].states

    @property
    def mask(self) -> Tensor:
        return self.members[0].mask

    def select(self, index: Tensor) -> EnsembleMemory:
        return EnsembleMemory([memory.select(index) for memory in self.members])

    def for_beams(self, sentences: Tensor, width: int, k: int) -> EnsembleMemory:
        return EnsembleMemory([memory.for_beams(sentences, width, k) for memory in self.members])


@dataclass
class EnsembleState:
    members: list

    def select(self, index: Tensor) -> EnsembleState:
        return EnsembleState([state.select(index) for state in self.members])


class Ensemble(EncoderDecoder):
    """``models`` searching as one (the module's docstring); the first model's config and output
    layer stand for the ensemble where one is asked for."""

    def __init__(self, models: list[EncoderDecoder]):
        super().__init__()
        if len(models) < 2:
            raise AttnmtError("an ensemble needs two or more models")
        self.members = nn.ModuleList(models)
        self.config = models[0].config
        self.generator = models[0].generator

    @property
    def has_attention(self) -> bool:
        return all(model.has_attention for model in self.members)

    def encode(self, src: Tensor, lengths: Tensor, window: tuple[int, int] | None = None) -> EnsembleMemory:
        return EnsembleMemory([model.encode(src, lengths, window) for model in self.members])

    def init_state(self, memory: EnsembleMemory) -> EnsembleState:
        return EnsembleState([model.init_state(m) for model, m in zip(self.members, memory.members)])

    def init_fixed_state(self, memory: EnsembleMemory, steps: int) -> EnsembleState:
        """Each member's state of fixed shape (for a search captured as one CUDA graph, every member's
        step in it)."""
        return EnsembleState([model.init_fixed_state(m, steps) for model, m in zip(self.members, memory.members)])

    def decode_step(self, prev_tokens: Tensor, state: EnsembleState, memory: EnsembleMemory) -> StepOutput:
        steps = [
            model.decode_step(prev_tokens, s, m) for model, s, m in zip(self.members, state.members, memory.members)
        ]
        log_probs = torch.logsumexp(torch.stack([step.log_probs for step in steps]), dim=0) - math.log(len(steps))
        weights = None if not self.has_attention else torch.stack([step.weights for step in steps]).mean(dim=0)
        return StepOutput(
            log_probs, EnsembleState([step.state for step in steps]), weights, None, steps[0].context, steps[0].output
        )

    def target_log_probs(
        self, src: Tensor, lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor, window: tuple[int, int] | None = None
    ) -> Tensor:
        """Given targets scored as the ensemble searches: log p(y_t | y_<t, x) = logsumexp_n log p_n - log N
        for each token. Teacher forcing gives each member the same prefixes, so each scores them alone."""
        members = torch.stack([model.target_log_probs(src, lengths, tgt_in, tgt_out, window) for model in self.members])
        return torch.logsumexp(members, dim=0) - math.log(len(self.members))  # (0 at the padding, as each member's)

    def decoder_outputs(self, src, lengths, tgt_in, window=None):
        raise AttnmtError(_ONE_MODEL)

    def decoder_outputs_of(self, memory, tgt_in):
        raise AttnmtError(_ONE_MODEL)


_ONE_MODEL = (
    "an ensemble searches (translate, evaluate) and scores translations (score); other teacher "
    "forcing (training, forced alignment, traces) reads one model: use a member's folder"
)
