"""The encoder-decoder: encoder, attention, decoder and the output layer put together."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnmt.config import ModelConfig
from attnmt.data.subwords import BOS, EOS, PAD, UNK  # noqa: F401 (re-exported)
from attnmt.errors import AttnmtError
from attnmt.models.attention import build_attention
from attnmt.models.decoder import DecoderState, Memory, RNNDecoder
from attnmt.models.dropout import Dropout
from attnmt.models.encoder import RNNEncoder
from attnmt.models.output import OutputLayer, autocast_dtype, output_logits
from attnmt.models.transformer import Transformer



class Seq2Seq(nn.Module):
    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        self.config = config
        self.encoder = RNNEncoder(src_vocab_size, config.embedding_size, config.encoder_hidden,
                                  config.encoder_layers, config.bidirectional, config.rnn_type,
                                  config.dropout, pad_id=PAD)
        memory_size = self.encoder.output_size
        attention = build_attention(config.attention, config.decoder_hidden, memory_size,
                                    config.attention_size, config.location_channels,
                                    config.location_kernel)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, config.embedding_size, padding_idx=PAD)
        self.decoder = RNNDecoder(config.embedding_size, config.decoder_hidden, memory_size,
                                  config.decoder_layers, config.rnn_type, attention,
                                  config.input_feeding, config.dropout)
        self.output_dropout = Dropout(config.dropout)
        self.generator = OutputLayer(config.decoder_hidden, tgt_vocab_size)
        self._init_weights(config.init_range)
        if config.tie_embeddings:
            if config.decoder_hidden != config.embedding_size:
                raise ValueError("tie_embeddings needs decoder_hidden == embedding_size "
                                 f"({config.decoder_hidden} != {config.embedding_size})")
            self.generator.weight = self.tgt_embed.weight

    def _init_weights(self, init_range: float):
        if init_range > 0:  # uniform init as in OpenNMT; it trains faster than xavier here
            for p in self.parameters():
                nn.init.uniform_(p, -init_range, init_range)
        with torch.no_grad():
            self.encoder.embed.weight[PAD].zero_()
            self.tgt_embed.weight[PAD].zero_()

    @property
    def attention(self):
        return self.decoder.attention

    def encode(self, src: Tensor, lengths: Tensor) -> Memory:
        states, final = self.encoder(src, lengths)
        # Under autocast every decoder step would cast the states again for its context product.
        states = states.to(autocast_dtype(states.device.type, states.dtype))
        mask = torch.arange(src.size(1), device=src.device).unsqueeze(0) < lengths.unsqueeze(1)
        keys = None if self.attention is None else self.attention.project_keys(states)
        return Memory(states, keys, mask, final)

    def init_state(self, memory: Memory) -> DecoderState:
        return self.decoder.init_state(memory)

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, memory: Memory,
                    output_dtype: torch.dtype | None = None):
        """prev_tokens (B,) -> log-probabilities (B,V), new state, attention weights (B,S) or None.
        ``output_dtype``: torch.bfloat16 runs the output layer's product in bf16 (see output_logits)."""
        embedded = self.output_dropout(self.tgt_embed(prev_tokens))
        attentional, state, weights = self.decoder.step(embedded, state, memory)
        logits = output_logits(self.generator, self.output_dropout(attentional), output_dtype)
        logits[:, PAD] = logits[:, BOS] = float("-inf")  # never produced: not words of a translation
        return torch.log_softmax(logits, dim=-1), state, weights

    def forward(self, src: Tensor, lengths: Tensor, tgt_in: Tensor, keep: Tensor | None = None):
        """Teacher forcing: tgt_in (B,T) starts with BOS -> logits (B,T,V), weights (B,T,S) or None.

        With a mask ``keep`` (B,T), logits are computed only where it is True, as (N,V): the
        output layer is the largest product of a step, and padding positions need none of it.
        """
        states, weights = self.output_states(src, lengths, tgt_in, keep)
        return self.generator(states), weights

    def output_states(self, src: Tensor, lengths: Tensor, tgt_in: Tensor, keep: Tensor | None = None):
        """What enters the output layer under teacher forcing: (B,T,H), or (N,H) with ``keep``."""
        memory = self.encode(src, lengths)
        embedded = self.output_dropout(self.tgt_embed(tgt_in))
        attentional, weights = self.decoder(embedded, self.init_state(memory), memory)
        if keep is not None:
            attentional = attentional[keep]
        return self.output_dropout(attentional), weights


def build_model(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq | Transformer:
    """The model of ``config.type``: an RNN encoder-decoder or a Transformer, same interface."""
    try:
        if config.type == "transformer":
            return Transformer(config, src_vocab_size, tgt_vocab_size)
        return Seq2Seq(config, src_vocab_size, tgt_vocab_size)
    except ValueError as e:
        raise AttnmtError(f"model: {e}") from None
