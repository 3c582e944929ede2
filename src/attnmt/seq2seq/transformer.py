"""The Transformer encoder-decoder (Vaswani et al., 2017): attention in place of recurrence.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

computed by each of ``heads`` heads in its own subspace of d_k = d_model / heads dimensions
(projections W_q, W_k, W_v), the heads' outputs joined by W_o. Encoder layers attend over the
source (self-attention); decoder layers over the target prefix (masked self-attention: position
t sees positions <= t) and over the encoder output (cross-attention). Every sublayer sits in a
residual connection with LayerNorm, before the sublayer (pre-norm) or after the sum (post-norm).

The model has the interface of every encoder-decoder (attnmt.seq2seq.base.EncoderDecoder), so
greedy and beam search, training, evaluation and the API run it unchanged. Decoding caches
what earlier steps computed: the state holds each decoder layer's self-attention keys and values
of the positions written so far, and the memory the cross-attention keys and values of the
source, computed once per sentence; a step then costs O(current length), not a new pass over
the prefix.

Attention runs on one of two paths that compute the same thing: the fused kernel
F.scaled_dot_product_attention, for training, and the equation written out (``attend``), which
also returns the weights: used in eval mode (decoding, alignments, the views). With
``attention_normalizer`` sparsemax or entmax15 in place of the softmax (in every head of every
layer, as Correia et al. 2019 do with 1.5-entmax), attention always takes the written-out path:
the fused kernel knows only the softmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmt.core.config import ModelConfig
from attnmt.core.errors import AttnmtError
from attnmt.core.speed import Dropout, Linear
from attnmt.data.subwords import PAD
from attnmt.seq2seq.attention import normalize
from attnmt.seq2seq.base import Batched, EncoderDecoder, StepOutput, source_mask
from attnmt.seq2seq.output import OutputLayer


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: nn.Module | None = None, normalizer: str = "softmax"
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, or another ``normalizer`` in place of the softmax
    (attnmt.seq2seq.attention.normalize).

    q (B,H,Tq,d_k), k and v (B,H,Tk,d_k); mask broadcastable to (B,H,Tq,Tk), True where a query
    may look (None: everywhere) -> output (B,H,Tq,d_k), weights (B,H,Tq,Tk) before dropout.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = normalize(scores, normalizer)
    return (weights if dropout is None else dropout(weights)) @ v, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, normalizer: str = "softmax"):
        super().__init__()
        self.heads, self.normalizer = heads, normalizer
        self.W_q = Linear(d_model, d_model)
        self.W_k = Linear(d_model, d_model)
        self.W_v = Linear(d_model, d_model)
        self.W_o = Linear(d_model, d_model)
        self.dropout = Dropout(dropout)
        # (H,) 1 for a head that counts, 0 for one switched off (attnmt.seq2seq.heads); None: all count
        self.register_buffer("head_mask", None, persistent=False)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B,T,d_model) -> (B,H,T,d_k)."""
        batch, length, d_model = x.shape
        return x.view(batch, length, self.heads, d_model // self.heads).transpose(1, 2)

    def keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """K = W_k x, V = W_v x, split into heads: (B,H,T,d_k) each. Callers cache them."""
        return self.split_heads(self.W_k(x)), self.split_heads(self.W_v(x))

    def forward(
        self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x (B,Tq,d_model) the queries' inputs; k, v from ``keys_values`` -> (B,Tq,d_model) and,
        with ``need_weights``, the weights (B,H,Tq,Tk) of every head."""
        q = self.split_heads(self.W_q(x))
        if need_weights or self.normalizer != "softmax":
            out, weights = attend(q, k, v, mask, self.dropout, self.normalizer)
            weights = weights if need_weights else None
        else:  # the same equation in one fused kernel: faster, less memory, no weights
            dropout = self.dropout.p if self.training else 0.0
            out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout), None
        if self.head_mask is not None:
            out = out * self.head_mask[:, None, None]
        batch, heads, length, d_k = out.shape
        return self.W_o(out.transpose(1, 2).reshape(batch, length, heads * d_k)), weights


def attention_of(config: ModelConfig) -> MultiHeadAttention:
    """A multi-head attention sublayer of the config's sizes, dropout and normalizer."""
    return MultiHeadAttention(config.d_model, config.heads, config.attention_dropout, config.attention_normalizer)


# The feed-forward layers' nonlinearity (model.activation): relu(z) = max(z, 0), as Vaswani et al.;
# silu(z) = z sigmoid(z), the swish of Marian's OPUS-MT models; gelu(z) = z Phi(z), Phi the normal CDF.
ACTIVATIONS = {"relu": torch.relu, "silu": F.silu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2, the same at every position; act is model.activation."""

    def __init__(self, d_model: int, hidden: int, activation: str = "relu"):
        super().__init__()
        self.W_1 = Linear(d_model, hidden)
        self.W_2 = Linear(hidden, d_model)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.W_2(self.activation(self.W_1(x)))


class Layer(nn.Module):
    """Residual connections around the sublayers of a layer: x = post(x + dropout(f(pre(x)))),
    where ``pre`` is LayerNorm with pre-norm and ``post`` with post-norm, the other the identity."""

    def __init__(self, config: ModelConfig, sublayers: int):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(config.d_model) for _ in range(sublayers))
        self.pre_norm = config.norm == "pre"
        self.dropout = Dropout(config.dropout)

    def pre(self, i: int, x: Tensor) -> Tensor:
        return self.norms[i](x) if self.pre_norm else x

    def post(self, i: int, x: Tensor) -> Tensor:
        return x if self.pre_norm else self.norms[i](x)


class EncoderLayer(Layer):
    def __init__(self, config: ModelConfig):
        super().__init__(config, 2)
        self.self_attention = attention_of(config)
        self.feed_forward = FeedForward(config.d_model, config.feed_forward, config.activation)

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool = False):
        h = self.pre(0, x)
        y, weights = self.self_attention(h, *self.self_attention.keys_values(h), mask, need_weights)
        x = self.post(0, x + self.dropout(y))
        x = self.post(1, x + self.dropout(self.feed_forward(self.pre(1, x))))
        return x, weights


class DecoderLayer(Layer):
    def __init__(self, config: ModelConfig):
        super().__init__(config, 3)
        self.self_attention = attention_of(config)
        self.cross_attention = attention_of(config)
        self.feed_forward = FeedForward(config.d_model, config.feed_forward, config.activation)

    def forward(
        self,
        x: Tensor,
        cache: tuple[Tensor, Tensor],
        source: tuple[Tensor, Tensor],
        causal: Tensor,
        src_mask: Tensor,
        need_weights: bool = False,
        need_cross_weights: bool = False,
        write_at: Tensor | None = None,
        start: int = 0,
    ):
        """x (B,T,d_model): the new positions; cache: self-attention keys and values of the
        positions before them, None if there are none (teacher forcing), or buffers
        (B,H,capacity,d_k) whose first ``start`` positions are written and which take the new ones
        after them, in place (TransformerState); source: cross-attention keys and values of the
        encoder output -> x, the keys and values of every position so far, (self, cross) weights
        or Nones, and the cross-attention's output (B,T,d_model): what the layer read from the
        source. ``need_cross_weights``: the cross-attention's weights only (guided alignment
        trains them). ``write_at`` (B,capacity): a cache of fixed size (FixedCache), where each
        row's one new position goes."""
        h = self.pre(0, x)
        k, v = self.self_attention.keys_values(h)
        if write_at is not None:
            at = write_at[:, None, :, None]  # (B,1,capacity,1)
            k, v = torch.where(at, k, cache[0]), torch.where(at, v, cache[1])
        elif cache is not None:
            end = start + k.size(2)
            cache[0][:, :, start:end], cache[1][:, :, start:end] = k, v
            k, v = cache[0][:, :, :end], cache[1][:, :, :end]
        y, self_weights = self.self_attention(h, k, v, causal, need_weights)
        x = self.post(0, x + self.dropout(y))
        context, cross_weights = self.cross_attention(
            self.pre(1, x), *source, src_mask, need_weights or need_cross_weights
        )
        x = self.post(1, x + self.dropout(context))
        x = self.post(2, x + self.dropout(self.feed_forward(self.pre(2, x))))
        return x, (k, v), (self_weights, cross_weights), context


def sinusoids(length: int, d_model: int, device: torch.device | None = None, halves: bool = False) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model));
    ``halves`` (positions: sinusoidal-halves, Marian's layout): the same sines in the first half of
    the dimensions and the cosines in the second, PE(pos, i) = sin(pos / 10000^(2i/d_model)) and
    PE(pos, h + i) = cos(pos / 10000^(2i/d_model)), h = ceil(d_model / 2)."""
    if halves:
        return _sinusoid_halves(length, d_model, device)
    position = torch.arange(length, dtype=torch.float32, device=device).unsqueeze(1)
    frequency = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32, device=device) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(length, d_model, device=device)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table


def _sinusoid_halves(length: int, d_model: int, device: torch.device | None) -> Tensor:
    """sinusoids(halves=True), computed in float64 as Marian's table is (transformers'
    MarianSinusoidalPositionalEmbedding), so that an imported model adds the very numbers it was
    trained with; stored in float32."""
    position = torch.arange(length, dtype=torch.float64, device=device).unsqueeze(1)
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64, device=device) / d_model)
    angles = position * frequency
    return torch.cat([torch.sin(angles), torch.cos(angles[:, : d_model // 2])], dim=1).float()


class Embeddings(nn.Module):
    """Token embeddings times sqrt(d_model) (times 1 without model.scale_embeddings), plus position
    encodings, then dropout.

    The scale makes tokens as loud as the positions: embeddings are initialised with
    standard deviation d_model^-0.5 (they double as the output layer when shared)."""

    def __init__(self, vocab_size: int, config: ModelConfig):
        super().__init__()
        self.d_model, self.max_positions = config.d_model, config.max_positions
        self.scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        self.halves = config.positions == "sinusoidal-halves"
        self.tokens = nn.Embedding(vocab_size, config.d_model, padding_idx=PAD)
        self.learned = nn.Embedding(config.max_positions, config.d_model) if config.positions == "learned" else None
        self.register_buffer("table", self.sinusoids(config.max_positions), persistent=False)
        self.dropout = Dropout(config.dropout)

    def sinusoids(self, length: int, device: torch.device | None = None) -> Tensor:
        return sinusoids(length, self.d_model, device, self.halves)

    def forward(self, tokens: Tensor, start: int = 0) -> Tensor:
        """tokens (B,T) at positions start, ..., start + T - 1 -> (B,T,d_model)."""
        end = start + tokens.size(1)
        if self.learned is not None:
            if end > self.max_positions:
                raise AttnmtError(
                    f"a sequence of {end} tokens is longer than model.max_positions "
                    f"({self.max_positions}) of learned positions"
                )
            positions = self.learned(torch.arange(start, end, device=tokens.device))
        else:
            table = self.table if end <= len(self.table) else self.sinusoids(end, tokens.device)
            positions = table[start:end]
        return self.dropout(self.tokens(tokens) * self.scale + positions)

    def at(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """tokens (B,) each at its position (B,), a tensor (a captured step reads no number from
        it; within the table: FixedCache's capacity) -> (B,1,d_model)."""
        table = self.table if self.learned is None else self.learned.weight
        return self.dropout(self.tokens(tokens) * self.scale + table[positions]).unsqueeze(1)


@dataclass
class TransformerMemory(Batched):
    """What the decoder reads from the source, computed once per sentence."""

    states: Tensor  # (B,S,d_model) encoder output
    mask: Tensor  # (B,S) True at real tokens
    keys: list[Tensor]  # per decoder layer, (B,H,S,d_k): its cross-attention keys W_k h ...
    values: list[Tensor]  # ... and values W_v h


CACHE_CHUNK = 16  # positions by which a decoding cache's buffers grow


class _Written:
    """How many positions of a cache's buffers have been written, by whichever of the states that
    share them wrote last."""

    __slots__ = ("positions",)

    def __init__(self, positions: int):
        self.positions = positions


@dataclass
class TransformerState(Batched):
    """The decoder's cache: per layer, self-attention keys and values in buffers (B,H,capacity,d_k)
    of which this state's are the first ``length`` positions. A decoding step writes its position
    into the buffers in place, after this state's, when no other state has written there yet
    (``written``: the states of one search share their buffers, each a position longer than the
    last), else into new buffers, as it does when the buffers are full (they grow by CACHE_CHUNK
    positions). So a step copies no cache; with torch.cat it copied the whole cache at each step
    (16-26 % of a search's time). Beam search reorders it with ``select`` (new buffers)."""

    keys: list[Tensor]
    values: list[Tensor]
    length: int = 0
    written: _Written | None = None  # (None: no buffers to share, teacher forcing's exact tensors)

    def select(self, index: Tensor) -> TransformerState:
        return replace(super().select(index), written=_Written(self.length))

    def extended(self, new: int) -> TransformerState:
        """This state ``new`` positions longer, on buffers with room for them (which the decoder's
        layers then write): its own buffers when no other state has written past its positions and
        they have room, else new ones holding a copy of its positions."""
        end = self.length + new
        if self.written is not None and self.written.positions == self.length and end <= self.keys[0].size(2):
            self.written.positions = end
            return TransformerState(self.keys, self.values, end, self.written)
        capacity = -(-end // CACHE_CHUNK) * CACHE_CHUNK
        grown = []
        for buffer in (*self.keys, *self.values):
            batch, heads, _, d_k = buffer.shape
            copy = buffer.new_empty(batch, heads, capacity, d_k)
            copy[:, :, : self.length] = buffer[:, :, : self.length]
            grown.append(copy)
        layers = len(self.keys)
        return TransformerState(grown[:layers], grown[layers:], end, _Written(end))


@dataclass
class FixedCache(Batched):
    """The decoder's cache in buffers of one size for a whole search, so that a step keeps the
    shapes of its tensors and a CUDA graph can replay it (attnmt.seq2seq.fast_decoding): per layer,
    self-attention keys and values (B,H,capacity,d_k), of which each row's first ``length``
    positions are written (the others are zeros, masked)."""

    keys: list[Tensor]
    values: list[Tensor]
    length: Tensor  # (B,) positions written, the same in every row: a tensor, which a graph reads on the device


class Transformer(EncoderDecoder):
    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        self.config = config
        self.src_embed = Embeddings(src_vocab_size, config)
        self.tgt_embed = Embeddings(tgt_vocab_size, config)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        # Pre-norm leaves the residual stream unnormalized: normalize what leaves each stack.
        pre_norm = config.norm == "pre"
        self.encoder_norm = nn.LayerNorm(config.d_model) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.d_model) if pre_norm else nn.Identity()
        self.generator = OutputLayer(config.d_model, tgt_vocab_size)
        self._init_weights()
        if config.share_embeddings:
            if src_vocab_size != tgt_vocab_size:
                raise ValueError(
                    f"share_embeddings needs one joint vocabulary (source {src_vocab_size} "
                    f"pieces, target {tgt_vocab_size})"
                )
            self.tgt_embed.tokens = self.src_embed.tokens
        if config.share_embeddings or config.tie_embeddings:
            self.generator.weight = self.tgt_embed.tokens.weight

    def _init_weights(self):
        for name, p in self.named_parameters():
            if name.endswith(("tokens.weight", "learned.weight")):
                nn.init.normal_(p, 0.0, self.config.d_model**-0.5)
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        with torch.no_grad():
            self.src_embed.tokens.weight[PAD].zero_()
            self.tgt_embed.tokens.weight[PAD].zero_()

    # Decoding reports the weights of the last decoder layer's cross-attention, averaged over heads.
    has_attention = True

    # ------------------------------------------------------------------ encoder

    def _encode(self, src: Tensor, lengths: Tensor, need_weights: bool):
        mask = source_mask(lengths.to(src.device), src.size(1))
        key_mask = mask[:, None, None, :]  # (B,1,1,S): every query may look at every real token
        x, weights = self.src_embed(src), []
        for layer in self.encoder_layers:
            x, layer_weights = layer(x, key_mask, need_weights)
            weights.append(layer_weights)
        x = self.encoder_norm(x)
        keys, values = zip(*(layer.cross_attention.keys_values(x) for layer in self.decoder_layers))
        return TransformerMemory(x, mask, list(keys), list(values)), weights

    def encode(self, src: Tensor, lengths: Tensor, window: tuple[int, int] | None = None) -> TransformerMemory:
        _no_window(window)
        return self._encode(src, lengths, need_weights=False)[0]

    # ------------------------------------------------------------------ decoder

    def init_state(self, memory: TransformerMemory) -> TransformerState:
        batch, heads = memory.states.size(0), self.config.heads
        empty = memory.states.new_zeros(batch, heads, 0, self.config.d_model // heads)
        layers = len(self.decoder_layers)
        return TransformerState([empty] * layers, [empty] * layers, 0, _Written(0))

    def init_fixed_state(self, memory: TransformerMemory, steps: int) -> FixedCache | TransformerState:
        """A cache of capacity ``steps`` (its positions within the position table; a longer search
        keeps the growing cache of init_state)."""
        if steps > self.tgt_embed.max_positions:
            return self.init_state(memory)
        batch, heads = memory.states.size(0), self.config.heads
        empty = [
            memory.states.new_zeros(batch, heads, steps, self.config.d_model // heads)
            for _ in range(2 * len(self.decoder_layers))
        ]
        return FixedCache(empty[0::2], empty[1::2], memory.mask.new_zeros(batch, dtype=torch.long))

    def _fixed_step(self, prev_tokens: Tensor, state: FixedCache, memory: TransformerMemory) -> StepOutput:
        """decode_step on a FixedCache: the new position written at each row's ``length``, the
        queries masked to the positions written."""
        x = self.tgt_embed.at(prev_tokens, state.length)
        positions = torch.arange(state.keys[0].size(2), device=x.device)
        write_at = positions == state.length[:, None]  # (B,capacity)
        visible = (positions <= state.length[:, None])[:, None, None, :]  # (B,1,1,capacity)
        keys, values, last = [], [], len(self.decoder_layers) - 1
        for i, layer in enumerate(self.decoder_layers):
            x, (k, v), (_, cross), context = layer(
                x,
                (state.keys[i], state.values[i]),
                (memory.keys[i], memory.values[i]),
                visible,
                memory.mask[:, None, None, :],
                need_cross_weights=i == last,  # (the step's weights: the others take the fused kernel)
                write_at=write_at,
            )
            keys.append(k)
            values.append(v)
        x = self.decoder_norm(x)[:, 0]
        return StepOutput(
            self.next_token_log_probs(x),
            FixedCache(keys, values, state.length + 1),
            cross[:, :, 0].mean(dim=1),
            None,
            context[:, 0],
            x,
        )

    def _decode(
        self,
        tgt_in: Tensor,
        state: TransformerState,
        memory: TransformerMemory,
        need_weights: bool,
        cross_weights_of: int | None = None,
        full_context: bool = False,
    ):
        """tgt_in (B,T): tokens of the positions after the state's -> top outputs (B,T,d_model), the
        extended state, per layer the self- (B,H,T,t+T) and cross-attention (B,H,T,S) weights, and
        what the last layer's cross-attention read (B,T,d_model). ``cross_weights_of``: a layer
        whose cross-attention weights come back even without ``need_weights``. ``full_context``
        (a whole teacher-forced target from an empty state): every position sees every target
        position but padding, the future included, as Garg et al. (2019) read alignments."""
        start, length = state.length, tgt_in.size(1)
        x = self.tgt_embed(tgt_in, start)
        if full_context:
            causal = (tgt_in != PAD)[:, None, None, :]  # (B,1,1,T): no causal mask, only the padding's
        elif length == 1:
            causal = None  # (one new position, a decoding step: it may look at every position)
        else:  # the query at position start + i may look at keys 0 .. start + i: the causal mask
            causal = torch.ones(length, start + length, dtype=torch.bool, device=x.device).tril(diagonal=start)
        src_mask = memory.mask[:, None, None, :]
        # A whole target from an empty state (teacher forcing) needs no buffers: its keys and values
        # are the cache. Decoding steps write theirs into the buffers of the state they extend.
        after = None if start == 0 and length > 1 else state.extended(length)
        keys, values, self_weights, cross_weights = [], [], [], []
        for i, layer in enumerate(self.decoder_layers):
            x, (k, v), (w_self, w_cross), context = layer(
                x,
                None if after is None else (after.keys[i], after.values[i]),
                (memory.keys[i], memory.values[i]),
                causal,
                src_mask,
                need_weights,
                i == cross_weights_of,
                start=start,
            )
            keys.append(k)
            values.append(v)
            self_weights.append(w_self)
            cross_weights.append(w_cross)
        if after is None:
            after = TransformerState(keys, values, length)
        return self.decoder_norm(x), after, self_weights, cross_weights, context

    def decode_step(self, prev_tokens: Tensor, state: TransformerState, memory: TransformerMemory) -> StepOutput:
        """The weights are the last layer's cross-attention averaged over its heads; the context
        what that attention read, the output the top layer's."""
        if isinstance(state, FixedCache):
            return self._fixed_step(prev_tokens, state, memory)
        last = len(self.decoder_layers) - 1  # (its weights only: the other attentions take the fused kernel)
        x, state, _, cross, context = self._decode(prev_tokens.unsqueeze(1), state, memory, False, last)
        return StepOutput(
            self.next_token_log_probs(x[:, 0]), state, cross[-1][:, :, 0].mean(dim=1), None, context[:, 0], x[:, 0]
        )

    def decoder_outputs(self, src: Tensor, lengths: Tensor, tgt_in: Tensor, window: tuple[int, int] | None = None):
        """Training takes the fused attention kernel and returns no weights (None); in eval mode the
        attention is written out and its weights (the last layer's cross-attention averaged over
        heads) come back, as for the RNN models."""
        _no_window(window)
        return self.decoder_outputs_of(self._encode(src, lengths, not self.training)[0], tgt_in)

    def decoder_outputs_of(self, memory: TransformerMemory, tgt_in: Tensor):
        """decoder_outputs of an encoded source."""
        need_weights = not self.training
        x, _, _, cross, _ = self._decode(tgt_in, self.init_state(memory), memory, need_weights)
        return x, (cross[-1].mean(dim=1) if need_weights else None)

    def cross_attention_of(
        self, src: Tensor, lengths: Tensor, tgt_in: Tensor, layer: int, full_context: bool = False
    ) -> tuple[Tensor, Tensor]:
        """decoder_outputs with the cross-attention weights (B,H,T,S) of every head of decoder layer
        ``layer`` (negative: from the last), in training too: what guided alignment trains.
        ``full_context``: the weights of a second pass that sees the whole target (_decode); the
        outputs stay those of the causal pass, which the translation loss reads."""
        layer = range(len(self.decoder_layers))[layer]
        memory, _ = self._encode(src, lengths, need_weights=False)
        x, _, _, cross, _ = self._decode(
            tgt_in,
            self.init_state(memory),
            memory,
            need_weights=False,
            cross_weights_of=None if full_context else layer,
        )
        if full_context:
            cross = self._decode(
                tgt_in, self.init_state(memory), memory, need_weights=False, cross_weights_of=layer, full_context=True
            )[3]
        return x, cross[layer]

    @torch.no_grad()
    def attention_maps(
        self, src: Tensor, lengths: Tensor, tgt_in: Tensor, full_context: bool = False
    ) -> dict[str, Tensor]:
        """Teacher-forced weights of every layer and head: "encoder" (B,L,H,S,S), "decoder"
        (B,L,H,T,T) and "cross" (B,L,H,T,S), for tgt_in (B,T) starting with BOS; ``full_context``:
        of the pass that sees the whole target (_decode)."""
        memory, encoder = self._encode(src, lengths, need_weights=True)
        _, _, decoder, cross, _ = self._decode(
            tgt_in, self.init_state(memory), memory, need_weights=True, full_context=full_context
        )
        return {
            "encoder": torch.stack(encoder, dim=1),
            "decoder": torch.stack(decoder, dim=1),
            "cross": torch.stack(cross, dim=1),
        }


def _no_window(window: tuple[int, int] | None):
    """A Transformer attends over the whole source: an attention window is for RNN decoders."""
    if window is not None:
        raise AttnmtError(
            f"attention window {window!r}: an attention window is for RNN decoders with attention, "
            "not for a Transformer"
        )
