"""RNN encoder: reads the source sentence into one hidden state per token."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch import _VF  # nn.GRU/nn.LSTM's own kernels, called one direction at a time

from attnmt.models.dropout import Dropout, dropout

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
        self.dropout = Dropout(dropout)
        self.output_size = hidden_size * (2 if bidirectional else 1)

    def forward(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """src (B,S) token ids, lengths (B,) -> states (B,S,output_size), final (B,output_size).

        Each direction runs over the whole padded batch, the backward one on each sentence
        reversed within its length, so padding is never read before a real token: a sentence
        encodes the same alone or in a batch (states at padding positions are meaningless and
        masked by the attention). Not packing keeps every product at one shape per source width;
        a packed batch shrinks step by step, and on a CPU each new shape costs compiled kernels.
        ``final`` is the state after the last real token of the top layer (directions concatenated).
        """
        x = self.dropout(self.embed(src))
        lengths = lengths.to(src.device)
        reverse = _reverse_within_length(lengths, src.size(1))
        for layer in range(self.rnn.num_layers):
            if layer > 0:
                x = dropout(x, self.rnn.dropout, self.training)
            outputs = [self._run(layer, "", x)]
            if self.rnn.bidirectional:  # reversed, run, and back in order (the reversal is its own inverse)
                outputs.append(self._run(layer, "_reverse", x.gather(1, reverse.expand_as(x))).gather(
                    1, reverse.expand(-1, -1, self.rnn.hidden_size)))
            x = torch.cat(outputs, dim=-1)
        # The forward direction ends after the last real token, the backward one after the first.
        final = x[torch.arange(x.size(0), device=x.device), lengths - 1]
        if self.rnn.bidirectional:
            final = torch.cat([final[:, :self.rnn.hidden_size], x[:, 0, self.rnn.hidden_size:]], dim=-1)
        return self.dropout(x), final

    def _run(self, layer: int, direction: str, x: Tensor) -> Tensor:
        """One direction of one layer of ``self.rnn`` (its own weights) over x (B,S,I) -> (B,S,H)."""
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        weights = [getattr(self.rnn, f"{name}_l{layer}{direction}") for name in names]
        h0 = x.new_zeros(1, x.size(0), self.rnn.hidden_size)
        if isinstance(self.rnn, nn.LSTM):
            return _VF.lstm(x, (h0, h0), weights, True, 1, 0.0, self.training, False, True)[0]
        return _VF.gru(x, h0, weights, True, 1, 0.0, self.training, False, True)[0]


def _reverse_within_length(lengths: Tensor, width: int) -> Tensor:
    """(B,width,1) index: position t of sentence b -> lengths[b]-1-t for real tokens, t on padding."""
    t = torch.arange(width, device=lengths.device).unsqueeze(0)
    return torch.where(t < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - t, t).unsqueeze(2)
