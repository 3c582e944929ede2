"""The output layer's fused cross-entropy equals the textbook one, values and gradients."""

import pytest
import torch
import torch.nn.functional as F

from attnmt.seq2seq.output import OutputLayer


def _loss_and_grads(layer, x, target, smoothing, fused: bool, bf16: bool):
    x = x.clone().requires_grad_()
    layer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        if fused:
            loss = layer.loss(x, target, smoothing)
        else:
            loss = F.cross_entropy(layer(x).float(), target, label_smoothing=smoothing, reduction="sum")
    loss.backward()
    return loss.detach(), x.grad, layer.weight.grad.clone(), layer.bias.grad.clone()


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("rows", [30, 128, 200])  # padded inside to a multiple of 128 rows, or not
def test_fused_loss_equals_cross_entropy(smoothing, bf16, rows):
    torch.manual_seed(0)
    layer = OutputLayer(16, 50)
    x, target = torch.randn(rows, 16), torch.randint(0, 50, (rows,))
    fused = _loss_and_grads(layer, x, target, smoothing, fused=True, bf16=bf16)
    reference = _loss_and_grads(layer, x, target, smoothing, fused=False, bf16=bf16)
    tolerance = dict(rtol=2e-2, atol=2e-2) if bf16 else dict(rtol=1e-5, atol=1e-5)
    for ours, theirs in zip(fused, reference):
        assert ours.dtype == theirs.dtype
        torch.testing.assert_close(ours, theirs, **tolerance)


def test_fused_loss_without_bias_and_a_second_backward_is_refused():
    layer = OutputLayer(8, 20, bias=False)
    x = torch.randn(5, 8, requires_grad=True)
    target = torch.randint(0, 20, (5,))
    loss = layer.loss(x, target, 0.1)
    torch.testing.assert_close(loss, F.cross_entropy(layer(x), target, label_smoothing=0.1, reduction="sum"))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError):  # the scores were overwritten by the first backward
        loss.backward()
