"""RNN decoder with attention: writes the translation one token at a time.

One step t, with y_{t-1} the previous target token and s the decoder state:

  Bahdanau / location  c_t = attend(s_{t-1})          s_t = RNN([y_{t-1}; c_t], s_{t-1})
  Luong                s_t = RNN([y_{t-1}; h~_{t-1}], s_{t-1})   (h~_{t-1} only with input feeding)
                       c_t = attend(s_t)
  none                 c   = final encoder state      s_t = RNN([y_{t-1}; c], s_{t-1})

and in every case the attentional vector h~_t = tanh(W_c [c_t; s_t]) predicts the next token.

The RNN's input projection is split by input, W [y; c; h~] = W_y y + W_c c + W_f h~, so that
W_y y is computed for all steps of a known target in one matrix product; and whatever does not
feed back into the recurrence (h~_t without input feeding; Luong's attention) is computed after
the loop for all steps at once. That leaves only the truly sequential work inside the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor, nn

from attnmt.models.attention import Attention
from attnmt.models.dropout import Dropout


@dataclass
class Memory:
    """What the decoder reads from the source, computed once per sentence."""

    states: Tensor  # (B,S,M) encoder states h_j
    keys: Tensor | None  # (B,S,K) attention.project_keys(states)
    mask: Tensor  # (B,S) True at real tokens
    final: Tensor  # (B,M) final encoder state: the fixed context without attention

    def select(self, index: Tensor) -> Memory:
        return _select(self, index)


@dataclass
class DecoderState:
    hidden: Tensor  # (layers,B,H)
    cell: Tensor | None  # (layers,B,H) for LSTMs
    attentional: Tensor  # (B,H) h~_{t-1}, fed back with input feeding
    weights: Tensor  # (B,S) a_{t-1}, read by location attention

    def select(self, index: Tensor) -> DecoderState:
        return _select(self, index)


def _select(obj, index: Tensor):
    """Reorder the batch (beam search); the batch axis is 1 for (layers,B,H) tensors, else 0."""
    changes = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is not None:
            dim = 1 if f.name in ("hidden", "cell") else 0
            changes[f.name] = value.index_select(dim, index)
    return replace(obj, **changes)


class RNNStack(nn.Module):
    """GRU or LSTM layers, one time step per call, written out as their equations.

    The first layer receives its input already multiplied by W_ih (``gates``), so callers can
    compute parts of that product ahead of the loop.
    """

    def __init__(self, rnn_type: str, hidden_size: int, num_layers: int, dropout: float):
        super().__init__()
        self.lstm = rnn_type == "lstm"
        gates = (4 if self.lstm else 3) * hidden_size
        self.W_hh = nn.ModuleList(nn.Linear(hidden_size, gates) for _ in range(num_layers))
        self.W_ih = nn.ModuleList(nn.Linear(hidden_size, gates) for _ in range(num_layers - 1))
        self.dropout = Dropout(dropout)
        self.gate_size = gates

    def forward(self, gates: Tensor, hidden: Tensor, cell: Tensor | None):
        """gates (B,G) = W_ih x of layer 1; hidden, cell (layers,B,H) -> new hidden, cell."""
        new_hidden, new_cell = [], []
        for layer, W_hh in enumerate(self.W_hh):
            if layer > 0:
                gates = self.W_ih[layer - 1](self.dropout(new_hidden[-1]))
            if self.lstm:
                h, c = self.lstm_cell(gates, W_hh(hidden[layer]), cell[layer])
                new_cell.append(c)
            else:
                h = self.gru_cell(gates, W_hh(hidden[layer]), hidden[layer])
            new_hidden.append(h)
        return torch.stack(new_hidden), (torch.stack(new_cell) if self.lstm else None)

    @staticmethod
    def gru_cell(x: Tensor, h_proj: Tensor, h: Tensor) -> Tensor:
        x_r, x_z, x_n = x.chunk(3, dim=-1)
        h_r, h_z, h_n = h_proj.chunk(3, dim=-1)
        r = torch.sigmoid(x_r + h_r)  # reset gate
        z = torch.sigmoid(x_z + h_z)  # update gate
        n = torch.tanh(x_n + r * h_n)  # candidate state
        return n + z * (h - n)  # = (1 - z) n + z h

    @staticmethod
    def lstm_cell(x: Tensor, h_proj: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        i, f, g, o = (x + h_proj).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class RNNDecoder(nn.Module):
    def __init__(self, embedding_size: int, hidden_size: int, memory_size: int, num_layers: int,
                 rnn_type: str, attention: Attention | None, input_feeding: bool, dropout: float):
        super().__init__()
        self.attention = attention
        self.context_first = attention is None or attention.query_is_previous_state
        self.input_feeding = input_feeding and not self.context_first
        self.rnn = RNNStack(rnn_type, hidden_size, num_layers, dropout)
        gates = self.rnn.gate_size
        self.W_y = nn.Linear(embedding_size, gates)  # previous token -> RNN gates
        self.W_ctx = nn.Linear(memory_size, gates, bias=False) if self.context_first else None
        self.W_feed = nn.Linear(hidden_size, gates, bias=False) if self.input_feeding else None
        self.bridge = nn.Linear(memory_size, num_layers * hidden_size)
        self.W_c = nn.Linear(memory_size + hidden_size, hidden_size, bias=False)
        self.hidden_size, self.num_layers = hidden_size, num_layers

    def init_state(self, memory: Memory) -> DecoderState:
        """s_0 = tanh(W_b h_final): the bridge from the encoder's summary to the decoder."""
        batch = memory.final.size(0)
        hidden = torch.tanh(self.bridge(memory.final)).view(batch, self.num_layers, self.hidden_size)
        hidden = hidden.transpose(0, 1).contiguous()
        cell = torch.zeros_like(hidden) if self.rnn.lstm else None
        attentional = memory.final.new_zeros(batch, self.hidden_size)
        # Location attention starts from all weight on the first source token.
        weights = torch.zeros_like(memory.mask, dtype=memory.final.dtype)
        weights[:, 0] = 1.0
        return DecoderState(hidden, cell, attentional, weights)

    def _attend(self, query: Tensor, memory: Memory, prev_weights: Tensor | None):
        """query (B,T,H) -> context (B,T,M), weights (B,T,S) or None without attention."""
        if self.attention is None:
            return memory.final.unsqueeze(1).expand(-1, query.size(1), -1), None
        return self.attention(query, memory.states, memory.keys, memory.mask, prev_weights)

    def _recur(self, gates: Tensor, state: DecoderState, memory: Memory):
        """The sequential part of a step: gates (B,G) = W_y y_{t-1} -> new state and, when the
        query is the previous state (Bahdanau, location, none), c_t and its weights."""
        context = weights = None
        if self.context_first:
            previous = state.hidden[-1].unsqueeze(1)  # s_{t-1} of the top layer
            context, weights = self._attend(previous, memory, state.weights.unsqueeze(1))
            context = context.squeeze(1)
            gates = gates + self.W_ctx(context)
            if weights is not None:
                weights = weights.squeeze(1)
        if self.input_feeding:
            gates = gates + self.W_feed(state.attentional)
        hidden, cell = self.rnn(gates, state.hidden, state.cell)
        state = DecoderState(hidden, cell, state.attentional, state.weights if weights is None else weights)
        return context, state, weights

    def _attentional(self, context: Tensor, top: Tensor) -> Tensor:
        return torch.tanh(self.W_c(torch.cat([context, top], dim=-1)))

    def step(self, embedded: Tensor, state: DecoderState, memory: Memory):
        """One step. embedded (B,E) is y_{t-1}; returns h~_t (B,H), the new state, weights (B,S) or None."""
        return self._step(self.W_y(embedded), state, memory)

    def _step(self, gates: Tensor, state: DecoderState, memory: Memory):
        context, state, weights = self._recur(gates, state, memory)
        top = state.hidden[-1]
        if not self.context_first:
            context, weights = self._attend(top.unsqueeze(1), memory, None)
            context, weights = context.squeeze(1), weights.squeeze(1)
            state.weights = weights
        state.attentional = self._attentional(context, top)
        return state.attentional, state, weights

    def forward(self, embedded: Tensor, state: DecoderState, memory: Memory):
        """All steps of a known target (teacher forcing): embedded (B,T,E) -> h~ (B,T,H), weights (B,T,S)."""
        # W_y y_{t-1} for all t in one product; unbind (not gates[:, t]) so that the backward
        # pass stacks the steps' gradients once instead of adding T full-size zero-padded copies.
        gates = _padded_in_time(self.W_y, embedded).unbind(1)
        if self.input_feeding:  # h~_{t-1} enters step t: all of the step is sequential
            outputs, weights = [], []
            for step_gates in gates:
                attentional, state, step_weights = self._step(step_gates, state, memory)
                outputs.append(attentional)
                weights.append(step_weights)
            return torch.stack(outputs, dim=1), torch.stack(weights, dim=1)
        contexts, tops, weights = [], [], []
        for step_gates in gates:
            context, state, step_weights = self._recur(step_gates, state, memory)
            contexts.append(context)
            tops.append(state.hidden[-1])
            weights.append(step_weights)
        tops = torch.stack(tops, dim=1)
        if self.context_first:
            contexts = torch.stack(contexts, dim=1)
            weights = None if self.attention is None else torch.stack(weights, dim=1)
        else:  # Luong without input feeding: every step attends in one batched product
            contexts, weights = self._attend(tops, memory, None)
        return _padded_in_time(self._attentional, contexts, tops), weights


TIME_MULTIPLE = 8


def _padded_in_time(function, *inputs: Tensor) -> Tensor:
    """function(*inputs) on (B,T,.) inputs, computed with T zero-padded up to a multiple of
    TIME_MULTIPLE and cut back. Teacher forcing meets every target length, and on a CPU each new
    matrix shape costs compiled oneDNN kernels: rounding T keeps the shapes of a run few."""
    steps = inputs[0].size(1)
    extra = -steps % TIME_MULTIPLE
    if extra:
        inputs = [nn.functional.pad(x, (0, 0, 0, extra)) for x in inputs]
    return function(*inputs)[:, :steps]
