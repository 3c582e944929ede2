"""What every encoder-decoder of attnmt offers: the interface that decoding, tracing, alignment,
training and the server rely on. A new kind of model (a speech encoder, say) plugs in by
subclassing ``EncoderDecoder`` and implementing its four abstract methods:

    memory = model.encode(src, lengths, window)          once per batch of source sentences
    state = model.init_state(memory)                     the decoder before its first step
    step = model.decode_step(prev_tokens, state, memory) one output token per sentence -> StepOutput
    states, weights = model.decoder_outputs(src, lengths, tgt_in, window)   all steps of known targets

and then has ``forward`` (teacher-forced scores), ``has_attention`` and ``generator`` (the output
layer; its ``loss`` trains the model). ``memory`` and ``state`` are the model's own dataclasses;
callers read ``memory.states`` (B,S,M), the encoder output, and otherwise only reorder both with
``select(index)`` (sentences leaving the batch) and give a beam search's memory with
``memory.for_beams(...)``: subclass ``Batched`` for that.

``window`` (left, right), or None: every step of an RNN decoder with attention attends only within
that many source positions of the median of the previous step's weights (as in Chorowski et al.
2014; attnmt.seq2seq.attention.window_mask). It belongs to the call, not to the model: the memory
that ``encode`` makes carries it to every step (training passes training.attention_window, decoding
its settings' decoding.attention_window), and nothing sets it on a built model. A model without
such attention (the Transformer) refuses a window.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnmt.core.config import ModelConfig
from attnmt.data.subwords import BOS, PAD
from attnmt.seq2seq.output import OutputLayer


@dataclass
class StepOutput:
    """One decoder step of a batch of B sentences over S source positions."""

    log_probs: Tensor  # (B,V) of the next token; PAD and BOS never come next (-inf)
    state: Any  # the decoder state after the step, for the next one
    weights: Tensor | None  # (B,S) attention over the source positions; None without attention
    scores: Tensor | None  # (B,S) the scores e_j whose softmax is ``weights``, where there is one such attention
    context: Tensor  # (B,M) what the step read from the source
    output: Tensor  # (B,H) the decoder's output at this step (an RNN's state s_t)
    # Where a step's ``log_probs`` were restricted (a prefix, attnmt.seq2seq.prefix): the model's
    # own, which a trace shows; None where they are the model's
    model_log_probs: Tensor | None = None


class Batched:
    """For dataclasses of per-sentence tensors (memories, states): ``select(index)`` keeps the
    sentences ``index`` in that order. The batch axis is 0, or as ``BATCH_DIM`` says per field;
    a field may also be None or a list of tensors, or a setting of the whole batch (not a tensor
    nor a list: a memory's attention window), which stays as it is."""

    BATCH_DIM: ClassVar[dict[str, int]] = {}

    def select(self, index: Tensor):
        def pick(value, dim):
            if not isinstance(value, (Tensor, list)):  # None, or a setting of the whole batch
                return value
            if isinstance(value, list):
                return [pick(v, dim) for v in value]
            return value.index_select(dim, index)

        return replace(
            self, **{f.name: pick(getattr(self, f.name), self.BATCH_DIM.get(f.name, 0)) for f in fields(self)}
        )

    def for_beams(self, sentences: Tensor, width: int, k: int):
        """A memory for the next step of a beam search that keeps k hypotheses, as rows, for each of
        ``sentences`` (their positions in the current batch, whose memory has ``width`` rows per
        sentence): here each sentence's memory repeated k times. A memory whose decoder can let the k
        rows share one copy overrides this (attnmt.seq2seq.decoder.Memory)."""
        return self.select((sentences * width).repeat_interleave(k))


def source_mask(lengths: Tensor, width: int) -> Tensor:
    """(B, width), True at the real positions of each sentence."""
    return torch.arange(width, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


class EncoderDecoder(nn.Module, ABC):
    config: ModelConfig
    generator: OutputLayer  # decoder outputs -> scores over the target vocabulary
    fast_search: ClassVar[bool] = True  # on a GPU, the searches of attnmt.seq2seq.fast_decoding may run it

    @property
    @abstractmethod
    def has_attention(self) -> bool:
        """Whether steps report attention weights over the source (False: a fixed context)."""

    @abstractmethod
    def encode(self, src: Tensor, lengths: Tensor, window: tuple[int, int] | None = None):
        """src (B,S) padded source, lengths (B,) -> the memory the decoder reads, with the attention
        ``window`` its steps keep to (see the module's docstring; None: the whole source)."""

    @abstractmethod
    def init_state(self, memory):
        """The decoder state before the first step."""

    def init_fixed_state(self, memory, steps: int):
        """The decoder state before the first step, of a shape its steps keep for ``steps`` steps
        (a search captured as a CUDA graph, attnmt.seq2seq.fast_decoding): an RNN's state keeps it
        anyway; a Transformer preallocates its cache."""
        return self.init_state(memory)

    @abstractmethod
    def decode_step(self, prev_tokens: Tensor, state, memory) -> StepOutput:
        """prev_tokens (B,) the tokens written last (BOS at first) -> the next step."""

    @abstractmethod
    def decoder_outputs(
        self, src: Tensor, lengths: Tensor, tgt_in: Tensor, window: tuple[int, int] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B,T) starts with BOS -> what enters the output layer (B,T,H)
        and the attention weights (B,T,S), or None without attention (or where the model does not
        compute them, as a Transformer in training); each step within the attention ``window``."""

    @abstractmethod
    def decoder_outputs_of(self, memory, tgt_in: Tensor) -> tuple[Tensor, Tensor | None]:
        """decoder_outputs of a source already encoded (``encode``), within the memory's window."""

    def forward(
        self, src: Tensor, lengths: Tensor, tgt_in: Tensor, window: tuple[int, int] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: scores (B,T,V) and attention weights (B,T,S) or None."""
        states, weights = self.decoder_outputs(src, lengths, tgt_in, window)
        return self.generator(states), weights

    def next_token_logits(self, output: Tensor) -> Tensor:
        """The decoder's output (..., H) -> the scores (..., V) of the next token."""
        logits = self.generator(output)
        logits[..., PAD] = logits[..., BOS] = float("-inf")  # never produced: not words of a translation
        return logits

    def next_token_log_probs(self, output: Tensor) -> Tensor:
        """The decoder's output (B,H) -> log-probabilities (B,V) of the next token."""
        return torch.log_softmax(self.next_token_logits(output), dim=-1)

    def target_log_probs(
        self, src: Tensor, lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor, window: tuple[int, int] | None = None
    ) -> Tensor:
        """Teacher forcing: log p(y_t | y_<t, x) = s_t[y_t] - log sum_v exp s_t[v] of each token of given
        targets, tgt_out (B,T) (y_1 ... y_n EOS, padded), as the searches score the tokens they
        write; 0 at the padding. (Without the (B,T,V) log-softmax: only the scores are that large.)"""
        states, _ = self.decoder_outputs(src, lengths, tgt_in, window)
        logits = self.next_token_logits(states)
        log_probs = logits.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        return log_probs.masked_fill(tgt_out == PAD, 0.0)
