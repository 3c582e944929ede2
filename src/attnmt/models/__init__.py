"""Models: RNN encoder, attention variants, RNN decoder, and the encoder-decoder."""

from attnmt.models.seq2seq import BOS, EOS, PAD, UNK, Seq2Seq, build_model

__all__ = ["BOS", "EOS", "PAD", "UNK", "Seq2Seq", "build_model"]
