"""The encoder-decoder: encoder, attention, decoder and the output layer put together."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnmt.core import speed
from attnmt.core.config import AttentionConfig, LuongConfig, ModelConfig, RNNConfig
from attnmt.core.errors import AttnmtError
from attnmt.core.speed import Dropout
from attnmt.data.subwords import BOS, EOS, PAD, UNK  # noqa: F401 (re-exported)
from attnmt.seq2seq.attention import LocalAttention, build_attention
from attnmt.seq2seq.base import EncoderDecoder, StepOutput, source_mask
from attnmt.seq2seq.decoder import DecoderState, Memory, RNNDecoder
from attnmt.seq2seq.encoder import RNNEncoder
from attnmt.seq2seq.output import OutputLayer
from attnmt.seq2seq.transformer import Transformer


class Seq2Seq(EncoderDecoder):
    def __init__(self, config: RNNConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        self.config = config
        self.encoder = self.build_encoder(config, src_vocab_size)
        memory_size = self.encoder.output_size
        attention = build_attention(
            config.attention.type,
            config.decoder_hidden,
            memory_size,
            config.attention_size,
            max_positions=config.max_positions,
            **attention_options(config.attention),
        )
        self.tgt_embed = nn.Embedding(tgt_vocab_size, config.embedding_size, padding_idx=PAD)
        self.decoder = RNNDecoder(
            config.embedding_size,
            config.decoder_hidden,
            memory_size,
            config.decoder_layers,
            config.rnn_type,
            attention,
            # (Luong's scores only: the others attend before the RNN, and the flag is not read)
            config.attention.input_feeding if isinstance(config.attention, LuongConfig) else True,
            config.dropout,
            bridge=config.decoder_init == "bridge",
        )
        self.output_dropout = Dropout(config.dropout)
        self.generator = OutputLayer(config.decoder_hidden, tgt_vocab_size)
        self._init_weights(config.init_range)
        if config.tie_embeddings:
            if config.decoder_hidden != config.embedding_size:
                raise ValueError(
                    "tie_embeddings needs decoder_hidden == embedding_size "
                    f"({config.decoder_hidden} != {config.embedding_size})"
                )
            self.generator.weight = self.tgt_embed.weight

    def build_encoder(self, config: RNNConfig, src_vocab_size: int) -> nn.Module:
        """The encoder: anything with ``output_size`` that maps (src, lengths) to (states, final)
        or, when it shortens the source, (states, final, new lengths)."""
        return RNNEncoder(
            src_vocab_size,
            config.embedding_size,
            config.encoder_hidden,
            config.encoder_layers,
            config.bidirectional,
            config.rnn_type,
            config.dropout,
            pad_id=PAD,
        )

    def _init_weights(self, init_range: float):
        if init_range > 0:  # uniform init as in OpenNMT; it trains faster than xavier here
            for p in self.parameters():
                nn.init.uniform_(p, -init_range, init_range)
        with torch.no_grad():
            if getattr(self.encoder, "embed", None) is not None:
                self.encoder.embed.weight[PAD].zero_()
            self.tgt_embed.weight[PAD].zero_()

    @property
    def has_attention(self) -> bool:
        return self.decoder.attention is not None

    def encode(self, src: Tensor, lengths: Tensor, window: tuple[int, int] | None = None) -> Memory:
        states, final, *shortened = self.encoder(src, lengths)
        lengths = shortened[0] if shortened else lengths
        return self.memory_of(states, final, source_mask(lengths.to(src.device), states.size(1)), window)

    def memory_of(self, states: Tensor, final: Tensor, mask: Tensor, window: tuple[int, int] | None = None) -> Memory:
        """What the decoder reads of the encoder's output: the states cast once for autocast, the
        attention's keys projected once per sentence, and the attention ``window`` of every step."""
        states = speed.cast_for_autocast(states)
        attention = self.decoder.attention
        if window is not None and isinstance(attention, LocalAttention):
            raise AttnmtError(
                f"an attention window ({window}) and local attention ({attention.kind}) together: local "
                "attention keeps each step to its own window (model.attention.window)"
            )
        keys = None if attention is None else attention.project_keys(states)
        shareable = attention is not None and not attention.reads_own_past and window is None
        return Memory(states, keys, mask, final, window, shareable)

    def init_state(self, memory: Memory) -> DecoderState:
        return self.decoder.init_state(memory)

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, memory: Memory) -> StepOutput:
        if self.training:  # dropout between the embedding and W_y
            gates = self.decoder.W_y(self.output_dropout(self.tgt_embed(prev_tokens)))
        else:  # W_y E[y], looked up in a table where that is faster
            gates = speed.looked_up_product(self.decoder.W_y, self.tgt_embed, prev_tokens)
        step = self.decoder.step(gates, state, memory)
        log_probs = self.next_token_log_probs(self.output_dropout(step.attentional))
        return StepOutput(log_probs, step.state, step.weights, step.scores, step.context, step.state.hidden[-1])

    def decoder_outputs(self, src: Tensor, lengths: Tensor, tgt_in: Tensor, window: tuple[int, int] | None = None):
        return self.decoder_outputs_of(self.encode(src, lengths, window), tgt_in)

    def decoder_outputs_of(self, memory: Memory, tgt_in: Tensor):
        """decoder_outputs of an encoded source (within the memory's window)."""
        embedded = self.output_dropout(self.tgt_embed(tgt_in))
        attentional, weights = self.decoder(embedded, self.init_state(memory), memory)
        return self.output_dropout(attentional), weights


def attention_options(attention: AttentionConfig) -> dict:
    """The options of build_attention that an attention section (model.attention) sets: its own."""
    fields = {
        "local": "local",
        "window": "local_window",
        "channels": "location_channels",
        "kernel": "location_kernel",
        "fertility": "coverage_fertility",
        "dim": "coverage_dim",
        "normalizer": "normalizer",
        "fertility_bound": "fertility_bound",
    }
    return {
        argument: getattr(attention, option)
        for option, argument in fields.items()
        if option in type(attention).model_fields
    }


def build_model(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq | Transformer:
    """The model of ``config.type``: an RNN encoder-decoder or a Transformer, same interface
    (attnmt.seq2seq.base.EncoderDecoder). (Speech models: attnmt.speech.model.build_speech_model.)"""
    speed.configure()  # before the model's first computation
    try:
        if config.type == "transformer":
            return Transformer(config, src_vocab_size, tgt_vocab_size)
        return Seq2Seq(config, src_vocab_size, tgt_vocab_size)
    except ValueError as e:
        raise AttnmtError(f"model: {e}") from None


def architecture(m: ModelConfig) -> str:
    """The model in one line (``attnmt info``)."""
    if m.type == "transformer":
        return (
            f"{m.transformer_name}, d_model {m.d_model}, {m.heads} heads, {m.encoder_layers}+{m.decoder_layers} "
            f"layers, feed-forward {m.feed_forward}"
        )
    encoder = f"{'bidirectional ' if m.bidirectional else ''}{m.rnn_type} encoder {m.encoder_layers}x{m.encoder_hidden}"
    return f"rnn, {m.attention_name} attention, {encoder}, decoder {m.decoder_layers}x{m.decoder_hidden}"
