"""Saliency (attnmt.translation.saliency): gradient x input of each source piece for each output piece,
batched as force_attention is; it follows the reversal of the reverse model, SmoothGrad draws from its
seed, and `attnmt align --saliency` writes its links."""

import numpy as np
import pytest
import torch

from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.translation.align import align
from attnmt.translation.saliency import saliency_matrices
from conftest import reverse
from test_align import reversal_share


def by_hand(model, source: str, target: str) -> np.ndarray:
    """One pair, one output piece at a time: |d log p(y_t) / d e_j . e_j|, rows normalized."""
    net = model.model
    src = model.src_subwords.encode([source])[0]
    tgt = model.tgt_subwords.encode([target])[0]
    batch = make_batch([src], [tgt])
    embeddings = net.encoder.embed(batch.src).detach().requires_grad_(True)
    rows = []
    for t in range(batch.tgt_out.size(1)):
        original = net.encoder.embed.forward
        net.encoder.embed.forward = lambda ids, e=embeddings: e  # this pair's embeddings, as leaves
        try:
            states, _ = net.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in)
        finally:
            net.encoder.embed.forward = original
        log_probs = torch.log_softmax(net.generator(states), dim=-1)[0, t, batch.tgt_out[0, t]]
        [grad] = torch.autograd.grad(log_probs, embeddings)
        rows.append((grad * embeddings).sum(-1).abs()[0].detach().numpy())
    matrix = np.stack(rows)
    return matrix / matrix.sum(1, keepdims=True)


def test_saliency_is_gradient_times_input_batched_as_attention_is(reverse_model):
    model, sources = reverse_model
    sources = sources[:12]
    targets = [reverse(s) for s in sources]
    matrices = saliency_matrices(model, sources, targets, batch_size=5)  # (batches with padding)
    for s, matrix in zip(sources, matrices):
        assert matrix.shape == (len(s) + 2, len(s) + 2)
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-5)
    for i in (0, 7):
        np.testing.assert_allclose(matrices[i], by_hand(model, sources[i], targets[i]), atol=1e-4)
    assert model.model.training is False


def test_saliency_follows_the_reversal(reverse_model):
    model, sources = reverse_model
    sources = sources[:40]
    links = align(model, sources, [reverse(s) for s in sources], words=False, saliency=0)
    assert reversal_share(sources, links) >= 0.8


def test_smoothgrad_draws_from_its_seed(reverse_model):
    model, sources = reverse_model
    pair = (sources[:3], [reverse(s) for s in sources[:3]])
    plain = saliency_matrices(model, *pair)
    smooth = saliency_matrices(model, *pair, samples=4, seed=1)
    again = saliency_matrices(model, *pair, samples=4, seed=1)
    other = saliency_matrices(model, *pair, samples=4, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(smooth, again))
    assert not all(np.allclose(a, b) for a, b in zip(smooth, other))
    assert not all(np.allclose(a, b) for a, b in zip(smooth, plain))


def test_the_command_line_and_what_saliency_does_not_take(reverse_model, tmp_path, capsys):
    from attnmt.cli import main

    model, sources = reverse_model
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("abc dej\nfgh\n", encoding="utf-8")
    tgt.write_text("jed cba\nhgf\n", encoding="utf-8")
    assert main(["align", str(model.folder), "--src", str(src), "--tgt", str(tgt), "--saliency", "2"]) == 0
    expected = align(model, ["abc dej", "fgh"], ["jed cba", "hgf"], saliency=2)
    assert capsys.readouterr().out.splitlines() == [" ".join(f"{i}-{j}" for i, j in links) for links in expected]
    with pytest.raises(AttnmtError, match="saliency"):
        align(model, ["abc"], ["cba"], saliency=0, shift=True)


def test_a_transformers_saliency_and_a_model_without_source_tokens():
    from attnmt.seq2seq.ensemble import Ensemble
    from attnmt.translation.saliency import saliency_of
    from test_transformer import random_batch, untrained

    model, batch = untrained(share_embeddings=True), random_batch()  # (the target's lookup is the source's)
    weights = saliency_of(model, batch, samples=2)
    assert weights.shape == (*batch.tgt_out.shape, batch.src.size(1))
    real = batch.src != 0
    assert torch.all(weights[~real.unsqueeze(1).expand_as(weights)] == 0)  # padding: nothing
    torch.testing.assert_close(weights.sum(-1), torch.ones(batch.tgt_out.shape))
    with pytest.raises(AttnmtError, match="reads no source tokens"):
        saliency_of(Ensemble([model, untrained()]), batch)


def test_the_server_gives_saliency_beside_attention(reverse_model):
    from attnmt.serve import create_app
    from attnmt.translation.align import force_attention
    from conftest import local_client

    model, sources = reverse_model
    with local_client(create_app([model.folder])) as client:
        answer = client.post("/saliency", json={"text": "abc", "translation": "cba"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["tokens"] == ["▁", "c", "b", "a", "</s>"] and body["source_tokens"] == ["▁", "a", "b", "c", "</s>"]
        np.testing.assert_allclose(body["saliency"], saliency_matrices(model, ["abc"], ["cba"])[0], atol=1e-4)
        np.testing.assert_allclose(body["attention"], force_attention(model, ["abc"], ["cba"])[0], atol=1e-4)
        own = client.post("/saliency", json={"text": "abcd"}).json()
        assert own["translation"] == model.translate(["abcd"])[0].text
        assert client.post("/saliency", json={"text": "abc", "translation": ""}).status_code == 422
