"""RNN encoder: reads the source sentence into one hidden state per token."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

RNNS = {"gru": nn.GRU, "lstm": nn.LSTM}


class RNNEncoder(nn.Module):
    """Embeddings, then a (bi)directional GRU or LSTM.

    With two directions, the state of token j is [h_j forward; h_j backward] as in
    Bahdanau et al. (2014), so it summarises the words before and after it.
    """

    def __init__(self, vocab_size: int, embedding_size: int, hidden_size: int, num_layers: int,
                 bidirectional: bool, rnn_type: str, dropout: float, pad_id: int = 0):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embedding_size, padding_idx=pad_id)
        self.rnn = RNNS[rnn_type](embedding_size, hidden_size, num_layers, batch_first=True,
                                  bidirectional=bidirectional, dropout=dropout if num_layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout)
        self.output_size = hidden_size * (2 if bidirectional else 1)

    def forward(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """src (B,S) token ids, lengths (B,) -> states (B,S,output_size), final (B,output_size).

        Packing makes padding invisible to the RNN: a sentence encodes the same alone or in a batch.
        ``final`` is the last state of the top layer (both directions concatenated).
        """
        packed = pack_padded_sequence(self.dropout(self.embed(src)), lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        packed_states, hidden = self.rnn(packed)
        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=src.size(1))
        if isinstance(hidden, tuple):  # LSTM: (h, c); the summary is h
            hidden = hidden[0]
        directions = 2 if self.rnn.bidirectional else 1
        top = hidden.view(self.rnn.num_layers, directions, src.size(0), -1)[-1]  # (directions, B, H)
        final = torch.cat(list(top), dim=-1)
        return self.dropout(states), final
