"""RNN decoder with attention: writes the translation one token at a time.

One step t, with y_{t-1} the previous target token and s the decoder state:

  Bahdanau / location  c_t = attend(s_{t-1})          s_t = RNN([y_{t-1}; c_t], s_{t-1})
  Luong                s_t = RNN([y_{t-1}; h~_{t-1}], s_{t-1})   (h~_{t-1} only with input feeding)
                       c_t = attend(s_t)
  none                 c   = final encoder state      s_t = RNN([y_{t-1}; c], s_{t-1})

and in every case the attentional vector h~_t = tanh(W_c [c_t; s_t]) predicts the next token.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor, nn

from attnmt.models.attention import Attention
from attnmt.models.encoder import RNNS


@dataclass
class Memory:
    """What the decoder reads from the source, computed once per sentence."""

    states: Tensor  # (B,S,M) encoder states h_j
    keys: Tensor | None  # (B,S,K) attention.project_keys(states)
    mask: Tensor  # (B,S) True at real tokens
    final: Tensor  # (B,M) final encoder state: the fixed context without attention

    def select(self, index: Tensor) -> Memory:
        return _select(self, index, batch_dim=0)


@dataclass
class DecoderState:
    hidden: Tensor  # (layers,B,H)
    cell: Tensor | None  # (layers,B,H) for LSTMs
    attentional: Tensor  # (B,H) h~_{t-1}, fed back with input feeding
    weights: Tensor  # (B,S) a_{t-1}, read by location attention

    def select(self, index: Tensor) -> DecoderState:
        return _select(self, index)


def _select(obj, index: Tensor, batch_dim: int | None = None):
    """Reorder the batch (beam search): every tensor field indexed along its batch axis."""
    changes = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is not None:
            dim = batch_dim if batch_dim is not None else (1 if value.dim() == 3 else 0)
            changes[f.name] = value.index_select(dim, index)
    return replace(obj, **changes)


class RNNDecoder(nn.Module):
    def __init__(self, embedding_size: int, hidden_size: int, memory_size: int, num_layers: int,
                 rnn_type: str, attention: Attention | None, input_feeding: bool, dropout: float):
        super().__init__()
        self.attention = attention
        self.context_first = attention is None or attention.query_is_previous_state
        self.input_feeding = input_feeding and not self.context_first
        rnn_input = embedding_size + (memory_size if self.context_first else 0) \
            + (hidden_size if self.input_feeding else 0)
        self.rnn = RNNS[rnn_type](rnn_input, hidden_size, num_layers, batch_first=True,
                                  dropout=dropout if num_layers > 1 else 0.0)
        self.bridge = nn.Linear(memory_size, num_layers * hidden_size)
        self.W_c = nn.Linear(memory_size + hidden_size, hidden_size, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.hidden_size, self.num_layers = hidden_size, num_layers

    def init_state(self, memory: Memory) -> DecoderState:
        """s_0 = tanh(W_b h_final): the bridge from the encoder's summary to the decoder."""
        batch = memory.final.size(0)
        hidden = torch.tanh(self.bridge(memory.final)).view(batch, self.num_layers, self.hidden_size)
        hidden = hidden.transpose(0, 1).contiguous()
        cell = torch.zeros_like(hidden) if isinstance(self.rnn, nn.LSTM) else None
        attentional = memory.final.new_zeros(batch, self.hidden_size)
        # Location attention starts from all weight on the first source token.
        weights = torch.zeros_like(memory.mask, dtype=memory.final.dtype)
        weights[:, 0] = 1.0
        return DecoderState(hidden, cell, attentional, weights)

    def _attend(self, query: Tensor, memory: Memory, prev_weights: Tensor | None):
        """query (B,T,H) -> context (B,T,M), weights (B,T,S)."""
        if self.attention is None:
            return memory.final.unsqueeze(1).expand(-1, query.size(1), -1), None
        return self.attention(query, memory.states, memory.keys, memory.mask, prev_weights)

    def _run_rnn(self, rnn_input: Tensor, state: DecoderState):
        if state.cell is None:
            out, hidden = self.rnn(rnn_input, state.hidden)
            return out, hidden, None
        out, (hidden, cell) = self.rnn(rnn_input, (state.hidden, state.cell))
        return out, hidden, cell

    def step(self, embedded: Tensor, state: DecoderState, memory: Memory):
        """One step. embedded (B,E) is y_{t-1}; returns h~_t (B,H), the new state, weights (B,S) or None."""
        inputs = [embedded.unsqueeze(1)]
        if self.context_first:
            previous = state.hidden[-1].unsqueeze(1)  # s_{t-1} of the top layer
            context, weights = self._attend(previous, memory, state.weights.unsqueeze(1))
            inputs.append(context)
        if self.input_feeding:
            inputs.append(state.attentional.unsqueeze(1))
        output, hidden, cell = self._run_rnn(torch.cat(inputs, dim=-1), state)
        if not self.context_first:
            context, weights = self._attend(output, memory, None)
        attentional = torch.tanh(self.W_c(torch.cat([context, output], dim=-1))).squeeze(1)
        weights = None if weights is None else weights.squeeze(1)
        new_state = DecoderState(hidden, cell, attentional, state.weights if weights is None else weights)
        return attentional, new_state, weights

    def forward(self, embedded: Tensor, state: DecoderState, memory: Memory):
        """All steps of a known target (teacher forcing): embedded (B,T,E) -> h~ (B,T,H), weights (B,T,S)."""
        if not self.context_first and not self.input_feeding:
            return self._forward_all_at_once(embedded, state, memory)
        outputs, all_weights = [], []
        for t in range(embedded.size(1)):
            attentional, state, weights = self.step(embedded[:, t], state, memory)
            outputs.append(attentional)
            all_weights.append(weights)
        weights = None if self.attention is None else torch.stack(all_weights, dim=1)
        return torch.stack(outputs, dim=1), weights

    def _forward_all_at_once(self, embedded: Tensor, state: DecoderState, memory: Memory):
        """Luong attention without input feeding: s_t does not depend on attention, so the RNN
        runs over the whole target in one call and every step attends in one batched product."""
        output, _, _ = self._run_rnn(embedded, state)
        context, weights = self._attend(output, memory, None)
        return torch.tanh(self.W_c(torch.cat([context, output], dim=-1))), weights
