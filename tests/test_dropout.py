"""The models' dropout: nn.Dropout's distribution, drawn from random integers (faster on a CPU)."""

import pytest
import torch
from torch import nn

from attnmt.core.config import RNNConfig, model_config_of
from attnmt.core.speed import Dropout, dropout
from attnmt.seq2seq import build_model


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keeps_one_minus_p_of_the_elements_scaled_by_their_inverse(p):
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 1  # no zeros of its own
    y = dropout(x, p)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.002  # 1e6 draws: std 0.0005
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))


def test_the_gradient_passes_where_the_element_was_kept():
    torch.manual_seed(0)
    x = torch.rand(200, 300, requires_grad=True)
    y = dropout(x, 0.3)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y != 0).float() / 0.7)


def test_identity_in_evaluation_and_without_p_zeros_with_p_one():
    x = torch.rand(4, 5)
    layer = Dropout(0.5).eval()
    assert layer(x) is x and dropout(x, 0.0) is x and dropout(x, 0.9, training=False) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    layer.train()
    assert not torch.equal(layer(x), x)


def test_masks_differ_between_calls_and_follow_the_seed():
    x = torch.ones(100, 100)
    torch.manual_seed(1)
    first, second = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(1)
    assert not torch.equal(first, second) and torch.equal(dropout(x, 0.5), first)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_the_models_use_it(kind):
    config = model_config_of(type=kind, dropout=0.3) if kind == "transformer" else RNNConfig(dropout=0.3)
    model = build_model(config, 20, 20)
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert dropouts and all(isinstance(m, Dropout) for m in dropouts)
