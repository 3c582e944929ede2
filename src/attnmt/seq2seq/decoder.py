"""RNN decoder with attention: writes the translation one token at a time.

One step t, with y_{t-1} the previous target token and s the decoder state:

  Bahdanau / location  c_t = attend(s_{t-1})          s_t = RNN([y_{t-1}; c_t], s_{t-1})
  Luong                s_t = RNN([y_{t-1}; h~_{t-1}], s_{t-1})   (h~_{t-1} only with input feeding)
                       c_t = attend(s_t)
  none                 c   = final encoder state      s_t = RNN([y_{t-1}; c], s_{t-1})

and in every case the attentional vector h~_t = tanh(W_c [c_t; s_t]) predicts the next token.

The RNN's input projection is split by input, W [y; c; h~] = W_y y + W_c c + W_f h~, so that
W_y y is computed for all steps of a known target in one matrix product. What else a
teacher-forced pass can do for all steps at once depends on what feeds back into the recurrence,
which gives the decoder's three paths (``RNNDecoder.path``):

  ATTEND_FIRST  (Bahdanau, location, none)  c_t comes from s_{t-1} and enters the RNN: the loop
                runs attention and RNN; h~_t is computed after it, for all steps at once.
  FEED_BACK     (Luong with input feeding)  h~_{t-1} enters the RNN: every step is sequential.
  ATTEND_AFTER  (Luong without input feeding)  nothing feeds back: the loop runs the RNN alone;
                attention and h~_t are computed after it, for all steps at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from attnmt.core import speed
from attnmt.core.speed import Dropout, Linear
from attnmt.seq2seq.attention import Attention, window_mask
from attnmt.seq2seq.base import Batched

ATTEND_FIRST, FEED_BACK, ATTEND_AFTER = "attend-first", "feed-back", "attend-after"


@dataclass
class Memory(Batched):
    """What the decoder reads from the source, computed once per sentence."""

    states: Tensor  # (B,S,M) encoder states h_j
    keys: Tensor | None  # (B,S,K) attention.project_keys(states)
    mask: Tensor  # (B,S) True at real tokens
    final: Tensor  # (B,M) final encoder state: the fixed context without attention
    # Each step attends within (left, right) positions of the median of the previous step's weights;
    # None: everywhere. Given to encode (training's or decoding's attention_window), never changed.
    window: tuple[int, int] | None = None
    # Whether a beam search's k hypotheses of a sentence may attend to one copy of its memory, as k
    # queries (not with location or coverage attention nor a window, which read each row's past weights).
    shareable: bool = False
    # Decoder rows per memory row: k when a beam search shares it (for_beams), else 1.
    beam: int = 1

    def for_beams(self, sentences: Tensor, width: int, k: int) -> "Memory":
        """Batched.for_beams without the k copies where the memory is shareable: each sentence's
        memory stays one row that its k hypotheses attend to (k times less to copy when sentences
        leave the batch, and to read at every step)."""
        if not self.shareable:
            return super().for_beams(sentences, width, k)
        kept = self if sentences.numel() == self.mask.size(0) else self.select(sentences)
        return replace(kept, beam=k)


@dataclass
class DecoderState(Batched):
    BATCH_DIM = {"hidden": 1, "cell": 1}

    hidden: Tensor  # (layers,B,H)
    cell: Tensor | None  # (layers,B,H) for LSTMs
    attentional: Tensor  # (B,H) h~_{t-1}, fed back with input feeding
    weights: Tensor  # (B,S) a_{t-1}, read by location attention
    step: Tensor | None = None  # (B,) t, the steps taken: counted for local-m attention only (reads_step)
    # (B,S) sum_{t'<t} a_{t'}, the attention each source position has had: kept for coverage attention and
    # constrained sparsemax only (Attention.keeps_coverage); (B,S,d) NN-based coverage's vectors
    coverage: Tensor | None = None

    def next_step(self) -> Tensor | None:
        """The step counter after one more step (None where it is not counted)."""
        return None if self.step is None else self.step + 1


@dataclass
class DecoderStep:
    attentional: Tensor  # (B,H) h~_t, which predicts the next token
    state: DecoderState
    context: Tensor  # (B,M) c_t
    weights: Tensor | None  # (B,S) a_t; None without attention
    scores: Tensor | None  # (B,S) e_t


class RNNStack(nn.Module):
    """GRU or LSTM layers, one time step per call, written out as their equations.

    The first layer receives its input already multiplied by W_ih (``gates``), so callers can
    compute parts of that product ahead of the loop.
    """

    def __init__(self, rnn_type: str, hidden_size: int, num_layers: int, dropout: float):
        super().__init__()
        self.lstm = rnn_type == "lstm"
        gates = (4 if self.lstm else 3) * hidden_size
        self.W_hh = nn.ModuleList(Linear(hidden_size, gates) for _ in range(num_layers))
        self.W_ih = nn.ModuleList(Linear(hidden_size, gates) for _ in range(num_layers - 1))
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
    def __init__(
        self,
        embedding_size: int,
        hidden_size: int,
        memory_size: int,
        num_layers: int,
        rnn_type: str,
        attention: Attention | None,
        input_feeding: bool,
        dropout: float,
        bridge: bool = True,
    ):
        super().__init__()
        self.attention = attention
        if attention is None or attention.query_is_previous_state:
            self.path = ATTEND_FIRST
        else:
            self.path = FEED_BACK if input_feeding else ATTEND_AFTER
        self.rnn = RNNStack(rnn_type, hidden_size, num_layers, dropout)
        gates = self.rnn.gate_size
        self.W_y = Linear(embedding_size, gates)  # previous token -> RNN gates
        self.W_ctx = Linear(memory_size, gates, bias=False) if self.path == ATTEND_FIRST else None
        self.W_feed = Linear(hidden_size, gates, bias=False) if self.path == FEED_BACK else None
        self.bridge = Linear(memory_size, num_layers * hidden_size) if bridge else None
        self.W_c = Linear(memory_size + hidden_size, hidden_size, bias=False)
        self.hidden_size, self.num_layers = hidden_size, num_layers

    def init_state(self, memory: Memory) -> DecoderState:
        """s_0 = tanh(W_b h_final), the bridge from the encoder's summary to the decoder; or 0."""
        batch = memory.final.size(0)
        if self.bridge is None:
            hidden = memory.final.new_zeros(self.num_layers, batch, self.hidden_size)
        else:
            hidden = torch.tanh(self.bridge(memory.final)).view(batch, self.num_layers, self.hidden_size)
            hidden = hidden.transpose(0, 1).contiguous()
        cell = torch.zeros_like(hidden) if self.rnn.lstm else None
        attentional = memory.final.new_zeros(batch, self.hidden_size)
        # Location attention starts from all weight on the first source token.
        weights = torch.zeros_like(memory.mask, dtype=memory.final.dtype)
        weights[:, 0] = 1.0
        step = memory.mask.new_zeros(batch, dtype=torch.long) if self._counts_steps else None
        coverage = None
        if self.attention is not None and self.attention.keeps_coverage:
            dim = self.attention.coverage_dim  # NN-based coverage: a vector per position
            coverage = weights.new_zeros(*weights.shape, dim) if dim else torch.zeros_like(weights)
        return DecoderState(hidden, cell, attentional, weights, step, coverage)

    @property
    def _counts_steps(self) -> bool:
        return self.attention is not None and self.attention.reads_step

    def _attend(
        self,
        query: Tensor,
        memory: Memory,
        prev_weights: Tensor | None,
        mask: Tensor | None = None,
        steps: Tensor | None = None,
        coverage: Tensor | None = None,
    ):
        """query (B,T,H) -> context (B,T,M), weights and scores (B,T,S) or None without attention;
        over the real positions, or those of ``mask`` (B,S). ``steps`` (B,T): each query's target
        position t, for an attention that reads it (local-m); ``coverage`` (B,T,S), for one that keeps it."""
        if self.attention is None:
            return memory.final.unsqueeze(1).expand(-1, query.size(1), -1), None, None
        return self.attention(
            query, memory.states, memory.keys, memory.mask if mask is None else mask, prev_weights, steps, coverage
        )

    def _attend_one(self, query: Tensor, memory: Memory, state: DecoderState, read_weights: bool):
        """The attention of one step: query (B,H) -> context (B,M), weights and scores (B,S) or None.
        The previous weights (``state.weights``, location attention) or the coverage (coverage
        attention) go to the score if ``read_weights``, and the previous weights to the memory's window
        if it has one."""
        steps = state.step
        if memory.beam > 1:  # a sentence's k hypotheses as k queries (B,k,H) of its one memory
            steps = None if steps is None else steps.view(-1, memory.beam)
            attended = self._attend(query.view(-1, memory.beam, query.size(-1)), memory, None, steps=steps)
            return tuple(x.flatten(0, 1) for x in attended)
        window = memory.window
        mask = None if window is None else window_mask(state.weights, memory.mask, *window)
        past = state.coverage if self.attention is not None and self.attention.reads_coverage else state.weights
        prev_weights = past.unsqueeze(1) if read_weights else None
        steps = None if steps is None else steps.unsqueeze(1)
        coverage = None if state.coverage is None else state.coverage.unsqueeze(1)
        context, weights, scores = self._attend(query.unsqueeze(1), memory, prev_weights, mask, steps, coverage)
        return context.squeeze(1), *(None if x is None else x.squeeze(1) for x in (weights, scores))

    def _recur(self, gates: Tensor, state: DecoderState, memory: Memory):
        """The sequential part of a step: gates (B,G) = W_y y_{t-1} -> s_t (hidden, cell) and, on
        the ATTEND_FIRST path, the attention of s_{t-1} (context, weights, scores); else None."""
        attended = None
        if self.path == ATTEND_FIRST:
            attended = self._attend_one(state.hidden[-1], memory, state, read_weights=True)
            gates = gates + self.W_ctx(attended[0])
        elif self.path == FEED_BACK:
            gates = gates + self.W_feed(state.attentional)
        hidden, cell = self.rnn(gates, state.hidden, state.cell)
        return hidden, cell, attended

    def _next_coverage(self, state: DecoderState, weights: Tensor | None, memory: Memory) -> Tensor | None:
        """The coverage after a step that attended with ``weights`` from ``state`` (None where it is not kept)."""
        if state.coverage is None or weights is None:
            return None
        return self.attention.next_coverage(state.coverage, weights, state.hidden[-1], memory.keys)

    def _attentional(self, context: Tensor, top: Tensor) -> Tensor:
        return torch.tanh(self.W_c(torch.cat([context, top], dim=-1)))

    def step(self, gates: Tensor, state: DecoderState, memory: Memory) -> DecoderStep:
        """One step: gates (B,G) = W_y y_{t-1}, of the previous token's embedding y_{t-1}."""
        hidden, cell, attended = self._recur(gates, state, memory)
        if attended is None:  # Luong: the query is the new state s_t
            attended = self._attend_one(hidden[-1], memory, state, read_weights=False)
        context, weights, scores = attended
        attentional = self._attentional(context, hidden[-1])
        new_state = DecoderState(
            hidden,
            cell,
            attentional,
            state.weights if weights is None else weights,
            state.next_step(),
            self._next_coverage(state, weights, memory),
        )
        return DecoderStep(attentional, new_state, context, weights, scores)

    def forward(self, embedded: Tensor, state: DecoderState, memory: Memory):
        """All steps of a known target (teacher forcing): embedded (B,T,E) -> h~ (B,T,H), weights (B,T,S)."""
        # W_y y_{t-1} for all t in one product; unbind (not gates[:, t]) so that the backward
        # pass stacks the steps' gradients once instead of adding T full-size zero-padded copies.
        gates = speed.padded_in_time(self.W_y, embedded).unbind(1)
        if self.path == FEED_BACK or (
            self.path == ATTEND_AFTER and (memory.window is not None or state.coverage is not None)
        ):
            # (a window needs the previous step's weights, constrained sparsemax the coverage of the steps before)
            return self._every_step_in_turn(gates, state, memory)
        return self._recurrence_then_the_rest(gates, state, memory)

    def _every_step_in_turn(self, gates: list[Tensor], state: DecoderState, memory: Memory):
        """FEED_BACK: each whole step waits for the h~ of the one before."""
        steps = []
        for step_gates in gates:
            steps.append(self.step(step_gates, state, memory))
            state = steps[-1].state
        return torch.stack([s.attentional for s in steps], dim=1), torch.stack([s.weights for s in steps], dim=1)

    def _recurrence_then_the_rest(self, gates: list[Tensor], state: DecoderState, memory: Memory):
        """ATTEND_FIRST and ATTEND_AFTER: the loop runs only what the recurrence needs; what it
        does not (h~_t, and Luong's attention of s_t) runs after it, for all steps at once."""
        tops, attended, first = [], [], state
        for step_gates in gates:
            hidden, cell, step_attended = self._recur(step_gates, state, memory)
            weights = state.weights if step_attended is None or step_attended[1] is None else step_attended[1]
            state = DecoderState(
                hidden, cell, state.attentional, weights, state.next_step(), self._next_coverage(state, weights, memory)
            )
            tops.append(hidden[-1])
            attended.append(step_attended)
        tops = torch.stack(tops, dim=1)
        if self.path == ATTEND_FIRST:
            contexts = torch.stack([a[0] for a in attended], dim=1)
            weights = None if self.attention is None else torch.stack([a[1] for a in attended], dim=1)
        else:  # every step attends in one batched product (step t's query at position t)
            steps = (
                None
                if first.step is None
                else first.step.unsqueeze(1) + torch.arange(len(gates), device=first.step.device)
            )
            contexts, weights, _ = self._attend(tops, memory, None, steps=steps)
        return speed.padded_in_time(self._attentional, contexts, tops), weights
