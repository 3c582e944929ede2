"""The unpacked encoder computes what nn.GRU / nn.LSTM compute on a packed batch."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnmt.seq2seq.encoder import RNNEncoder


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("layers", [1, 2])
def test_states_and_final_equal_the_packed_rnn(rnn_type, bidirectional, layers):
    torch.manual_seed(0)
    encoder = RNNEncoder(50, 16, 12, layers, bidirectional, rnn_type, dropout=0.0).eval()
    lengths = torch.tensor([9, 3, 5, 1, 7])
    src = torch.randint(4, 50, (5, 11))  # wider than the longest: padding on every sentence
    src[torch.arange(11).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    with torch.no_grad():
        states, final = encoder(src, lengths)
        packed = pack_padded_sequence(encoder.embed(src), lengths, batch_first=True, enforce_sorted=False)
        packed_states, hidden = encoder.rnn(packed)
    expected, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=11)
    hidden = hidden[0] if rnn_type == "lstm" else hidden
    top = hidden.view(layers, 2 if bidirectional else 1, 5, -1)[-1]  # (directions, B, H)
    real = (torch.arange(11).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(2)
    torch.testing.assert_close(states * real, expected * real, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(final, torch.cat(list(top), dim=-1), rtol=1e-5, atol=1e-6)
    assert states.shape == (5, 11, encoder.output_size) and final.shape == (5, encoder.output_size)
