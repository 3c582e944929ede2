"""Attention heads switched off at test time (attnmt.seq2seq.heads): a masked head's output is 0
before W_o and nothing else changes; with every cross-attention head off the decoder cannot see the
source; the Python, command-line and error paths."""

import numpy as np
import pytest
import torch

from attnmt.api import load
from attnmt.core.config import RNNConfig
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq import build_model
from attnmt.seq2seq.heads import every_head, mask_heads, parse_heads
from attnmt.seq2seq.transformer import MultiHeadAttention
from attnmt.training import train
from conftest import random_strings, reverse, toy_config
from test_compare import run_cli
from test_transformer import random_batch, untrained


def test_a_masked_head_adds_nothing_before_the_output_projection():
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4, 0.0).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    k, v = attention.keys_values(memory)
    attention.head_mask = torch.tensor([1.0, 0.0, 1.0, 1.0])
    for need_weights in (True, False):  # the written-out equation and the fused kernel
        masked, _ = attention(x, k, v, None, need_weights)
        q = attention.split_heads(attention.W_q(x))
        heads = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) @ v  # (B,H,T,d_k), d_k = 4
        heads[:, 1] = 0.0
        expected = attention.W_o(heads.transpose(1, 2).reshape(2, 3, 16))
        torch.testing.assert_close(masked, expected, atol=1e-5, rtol=1e-5)


def test_without_cross_attention_heads_the_decoder_cannot_see_the_source():
    model, batch = untrained(), random_batch()
    cross = [head for head in every_head(model) if head[0] == "cross"]
    assert len(cross) == 2 * 4 and len(every_head(model)) == 3 * 2 * 4
    before = model(batch.src, batch.src_lengths, batch.tgt_in)[0]
    mask_heads(model, cross)
    blind = model(batch.src, batch.src_lengths, batch.tgt_in)[0]
    other = model(batch.src.flip(0), batch.src_lengths.flip(0), batch.tgt_in)[0]  # other sources, same targets
    torch.testing.assert_close(blind, other)
    assert not torch.allclose(blind, before)
    mask_heads(model, [])  # every head on again
    torch.testing.assert_close(model(batch.src, batch.src_lengths, batch.tgt_in)[0], before)


def test_heads_are_named_kind_layer_head_and_a_wrong_one_is_an_error():
    assert parse_heads("cross.2.0, encoder.0.3,") == [("cross", 2, 0), ("encoder", 0, 3)]
    for bad in ("cross.2", "heads.0.1", "cross.a.1", "cross.-1.0"):
        with pytest.raises(AttnmtError, match="KIND.LAYER.HEAD"):
            parse_heads(bad)
    with pytest.raises(AttnmtError, match="no head cross.2.0 in this model: it has 2 encoder and 2 decoder layers"):
        mask_heads(untrained(), [("cross", 2, 0)])
    rnn = build_model(RNNConfig(embedding_size=8, encoder_hidden=8, decoder_hidden=8, attention_size=8), 20, 20)
    with pytest.raises(AttnmtError, match="in a Transformer .*one attention of one head"):
        mask_heads(rnn, [("cross", 0, 0)])
    from attnmt.seq2seq.ensemble import Ensemble

    with pytest.raises(AttnmtError, match="this is an ensemble: heads are switched off in one model"):
        mask_heads(Ensemble([untrained(), untrained()]), [("cross", 0, 0)])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("heads")
    pairs = [(s, reverse(s)) for s in random_strings(200, 3, 8, seed=5)]
    config = toy_config(
        folder,
        pairs,
        pairs[:10],
        model={
            "type": "transformer",
            "d_model": 16,
            "heads": 2,
            "feed_forward": 32,
            "encoder_layers": 1,
            "decoder_layers": 1,
        },
        training={"max_steps": 3, "validate_every": 3},
    )
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


def test_translate_and_evaluate_take_heads_to_mask(tiny, tmp_path, capsys):
    model = load(tiny)
    plain = [c.score for c in model.translate(["abc", "bcd"], beam=2, n_best=2)[0].candidates]
    model.mask_heads("cross.0.1")
    masked = [c.score for c in model.translate(["abc", "bcd"], beam=2, n_best=2)[0].candidates]
    assert masked != plain
    source = tmp_path / "in.txt"
    source.write_text("abc\nbcd\n", encoding="utf-8")
    assert run_cli("translate", tiny, "-i", source, "--beam", 2, "--n-best", 2, "--mask-heads", "cross.0.1") == 0
    scores = [float(line.split(" ||| ")[2]) for line in capsys.readouterr().out.splitlines()[:2]]
    assert scores == pytest.approx(masked, abs=1e-4)
    assert run_cli("evaluate", tiny, "--src", source, "--ref", source, "--mask-heads", "cross.0.2") == 2
    assert "no head cross.0.2" in capsys.readouterr().err
    int8 = load(tiny, quantize="int8")  # (its linear layers quantized: the mask is made beside them)
    int8.mask_heads([("encoder", 0, 0)])
    assert int8.translate(["abc"])[0].text is not None


def test_the_server_switches_a_requests_heads_off_and_no_others(tiny, monkeypatch):
    """/translate and /attention take mask_heads; concurrent requests with other heads off (or none)
    are decoded apart, each as the model with its own heads off, and the model is left as it was."""
    from attnmt.serve import ServerLimits, create_app
    from conftest import local_client
    from test_serve import post_together

    reference = load(tiny)
    app = create_app([tiny], ServerLimits(batch_wait=0.5))  # a wide window: all get in
    model = app.state.models[tiny.name]
    original, calls = model.translator.translate, []
    monkeypatch.setattr(
        model.translator,
        "translate",
        lambda texts, *args, **kwargs: calls.append(list(texts)) or original(texts, *args, **kwargs),
    )
    bodies = [
        {"text": "abc", "beam": 2, "n_best": 2, "mask_heads": "cross.0.1"},
        {"text": "bcd", "beam": 2, "n_best": 2},
        {"text": "cde", "beam": 2, "n_best": 2, "mask_heads": "cross.0.1"},
        {"text": "abcd", "beam": 2, "n_best": 2, "mask_heads": "encoder.0.0,cross.0.1"},
    ]
    with local_client(app) as client:
        responses = post_together(client, bodies)
        for body, response in zip(bodies, responses):
            reference.mask_heads(body.get("mask_heads", ""))
            [expected] = reference.translate([body["text"]], beam=2, n_best=2)
            got = response.json()["translations"][0]["candidates"]
            assert [c["score"] for c in got] == pytest.approx([c.score for c in expected.candidates], abs=1e-4)
        heads_of_text = {body["text"]: body.get("mask_heads") for body in bodies}
        assert all(len({heads_of_text[text] for text in call}) == 1 for call in calls)  # never decoded together
        assert all(
            a.head_mask is None
            for layer in model.translator.model.decoder_layers
            for a in (layer.self_attention, layer.cross_attention)
        )
        reference.mask_heads("encoder.0.1")
        maps = client.post("/attention", json={"text": "abc", "translation": "cba", "mask_heads": "encoder.0.1"})
        assert maps.status_code == 200
        expected = reference.attention("abc", "cba")
        np.testing.assert_allclose(maps.json()["cross"], expected["cross"], atol=1e-5)
        reference.mask_heads("")
        assert not np.allclose(maps.json()["cross"], reference.attention("abc", "cba")["cross"], atol=1e-5)
        for bad, message in (
            ("cross.3.0", "no head cross.3.0"),
            ("cross.0", "KIND.LAYER.HEAD"),
            ("<b>", "string_pattern_mismatch"),
        ):
            answer = client.post("/translate", json={"text": "abc", "mask_heads": bad})
            assert answer.status_code == 422 and message in answer.text, answer.text
