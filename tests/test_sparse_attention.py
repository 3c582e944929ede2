"""Sparse attention: sparsemax (Martins & Astudillo 2016) and 1.5-entmax (Peters et al. 2019) in
place of the softmax (model.attention_normalizer); their equations, the decoder's paths, the
searches, the errors, and a trained model through load, trace, HTTP and figures."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnmt.core.config import RNNConfig, model_config_of, load_config
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq import build_model, decoding, fast_decoding
from attnmt.seq2seq.attention import BahdanauAttention, LuongGeneralAttention, build_attention, normalize
from attention_helpers import rnn_fields, small_rnn_config
from test_attention import (
    SRC_VOCAB,
    TGT_VOCAB,
    padded_batch,
    searches_matching_teacher_forcing,
    steps_matching_forward,
)

SPARSE = ["sparsemax", "entmax15"]


def make_sparse_model(normalizer, attention="bahdanau", input_feeding=True, layers=1, rnn_type="gru", **options):
    config = small_rnn_config(
        attention=attention,
        attention_normalizer=normalizer,
        rnn_type=rnn_type,
        input_feeding=input_feeding,
        decoder_layers=layers,
        **options,
    )
    return build_model(config, SRC_VOCAB, TGT_VOCAB).eval()


def threshold(e: torch.Tensor, weight_of) -> torch.Tensor:
    """tau with sum_j weight_of(e_j - tau) = 1, by bisection (weight_of is 0 below 0, increasing above)."""
    low, high = e.max() - 1.0 - 1e-9, e.max()  # each map gives the top score at most 1: tau >= max - 1
    for _ in range(200):
        tau = (low + high) / 2
        low, high = (tau, high) if weight_of(e - tau).sum() > 1 else (low, tau)
    return (low + high) / 2


def test_sparsemax_is_the_projection_onto_the_simplex():
    """a = [e - tau]_+ with sum 1, tau found here by bisection: positions scored below tau get exactly 0."""
    e = torch.tensor([1.2, 0.9, -0.5, 1.0, 0.0], dtype=torch.float64)
    tau = threshold(e, lambda x: x.clamp(min=0))
    expected = (e - tau).clamp(min=0)
    torch.testing.assert_close(normalize(e, "sparsemax"), expected)
    assert normalize(e, "sparsemax").tolist()[2] == 0.0 and normalize(e, "sparsemax").tolist()[4] == 0.0
    # the projection: no point of the simplex is closer to e (random points of it, Dirichlet)
    others = torch.distributions.Dirichlet(torch.ones(5, dtype=torch.float64)).sample((2000,))
    assert ((others - e).norm(dim=-1) >= (expected - e).norm() - 1e-12).all()


def test_entmax15_is_its_equation():
    """1.5-entmax: a_j = [e_j / 2 - tau]_+^2 with sum 1."""
    e = torch.tensor([2.0, 1.5, -1.0, 0.3, 1.9, -3.0], dtype=torch.float64)
    tau = threshold(e / 2, lambda x: x.clamp(min=0) ** 2)
    expected = ((e / 2 - tau).clamp(min=0)) ** 2
    weights = normalize(e, "entmax15")
    torch.testing.assert_close(weights, expected)
    assert (weights == 0).sum() == 3 and weights.sum().item() == pytest.approx(1.0)


@pytest.mark.parametrize("normalizer", SPARSE)
def test_sparse_attention_weights_and_context(normalizer):
    """The attention module: scores as before, weights normalizer(e) over the real positions (0 at
    padding), context their weighted sum; with spread-out scores some real positions get exactly 0."""
    attention = build_attention("luong-general", 4, 6, 5, normalizer=normalizer)
    assert isinstance(attention, LuongGeneralAttention) and attention.normalizer == normalizer
    s, h = 3 * torch.randn(2, 3, 4), torch.randn(2, 8, 6)
    mask = torch.tensor([[True] * 8, [True] * 5 + [False] * 3])
    context, weights, scores = attention(s, h, attention.project_keys(h), mask)
    for b, length in enumerate([8, 5]):
        expected = torch.zeros(3, 8)
        expected[:, :length] = normalize(scores[b, :, :length], normalizer)
        torch.testing.assert_close(weights[b], expected)
        torch.testing.assert_close(context[b], expected @ h[b])
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    assert (weights[mask.unsqueeze(1).expand_as(weights)] == 0).any()


@pytest.mark.parametrize("normalizer", SPARSE)
def test_the_gradient_reaches_the_scores_of_the_support_only(normalizer):
    """A position outside the support (weight 0) gets no gradient: what makes the maps sparse in
    training too. The gradient of the others is the library's (checked against finite differences)."""
    e = torch.tensor([[2.0, 1.8, -1.0, 1.5, -2.0]], dtype=torch.float64, requires_grad=True)
    weights = normalize(e, normalizer)
    (weights * torch.arange(5.0, dtype=torch.float64)).sum().backward()
    assert (e.grad[weights == 0] == 0).all() and (e.grad[weights > 0] != 0).any()
    assert torch.autograd.gradcheck(lambda x: normalize(x, normalizer), (e.detach().requires_grad_(),))


def test_half_precision_scores_are_normalized_in_float32():
    e = torch.tensor([[1.0, 0.999, 0.5, -1.0]]).to(torch.bfloat16)
    for normalizer in SPARSE:
        weights = normalize(e, normalizer)
        assert weights.dtype == torch.float32
        torch.testing.assert_close(weights, normalize(e.float(), normalizer))


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("input_feeding", [True, False])
@pytest.mark.parametrize("attention", ["bahdanau", "luong-general", "location"])
@pytest.mark.parametrize("normalizer", SPARSE)
def test_stepwise_decoding_equals_teacher_forced_forward(normalizer, attention, input_feeding, rnn_type):
    """Every decoder path (step by step, sequential, all steps at once for Luong without input
    feeding) normalizes the scores the same way."""
    torch.manual_seed(0)
    model = make_sparse_model(normalizer, attention, input_feeding, rnn_type=rnn_type)
    steps = steps_matching_forward(model, *padded_batch())
    assert all(torch.allclose(step.weights.sum(-1), torch.ones(3)) for step in steps)


@pytest.mark.parametrize("local", ["local-m", "local-p"])
def test_local_attention_with_sparsemax(local):
    """Luong's local attention normalizes inside its window with the model's map: local-m's weights
    are sparsemax of the window's scores (local-p then multiplies them by its Gaussian)."""
    torch.manual_seed(0)
    model = make_sparse_model("sparsemax", "luong-general", local_attention=local, local_window=2)
    src, lengths, tgt = padded_batch()
    steps = steps_matching_forward(model, src, lengths, tgt)
    if local == "local-m":
        for t, step in enumerate(steps):
            p = torch.minimum(torch.tensor(t), lengths - 1)
            window = (torch.arange(src.size(1)) - p[:, None]).abs() <= 2
            inside = window & (torch.arange(src.size(1)) < lengths[:, None])
            torch.testing.assert_close(
                step.weights, normalize(step.scores.masked_fill(~inside, float("-inf")), "sparsemax")
            )


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("normalizer", SPARSE)
def test_searches_of_sparse_attention_match_teacher_forcing_and_each_other(normalizer, beam):
    """Beam search and greedy search: their best output scores as teacher forcing scores it, its
    attention is the forced pass's (zeros where it has them); the fixed-shape searches of GPUs (on
    static buffers here) return the same, with the coverage penalty, whose log never meets a 0."""
    torch.manual_seed(0)
    model = make_sparse_model(normalizer, "bahdanau")
    with torch.no_grad():
        model.generator.bias[3] -= 2.0  # outputs of several steps (3 = EOS)
    best = searches_matching_teacher_forcing(model, *padded_batch()[:2], beam, **({} if beam == 1 else {"beta": 0.2}))
    assert all(torch.isfinite(torch.tensor(hypothesis.score)) for hypothesis in best)


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="attention.none.normalizer"):
        RNNConfig(attention={"type": "none", "normalizer": "entmax15"})
    with pytest.raises(ValueError, match="attention.bahdanau.normalizer"):
        RNNConfig(attention={"normalizer": "sparsemax15"})
    with pytest.raises(ValueError, match="unknown attention normalizer 'softermax'"):
        build_attention("bahdanau", 4, 4, 4, normalizer="softermax")
    with pytest.raises(ValueError, match="unknown attention normalizer"):
        normalize(torch.zeros(3), "softermax")
    path = tmp_path / "c.yaml"
    path.write_text(
        "experiment_dir: x\ndata: {train: {src: a, tgt: b}}\ntraining: {max_steps: 1, "
        "guided_alignment: {links: c}}\nmodel: {attention: {normalizer: sparsemax}}\n"
    )
    with pytest.raises(AttnmtError, match="guided_alignment.*model.attention.normalizer: sparsemax.*exactly 0"):
        load_config(path)


def test_softmax_stays_the_default_and_its_weights_are_never_zero():
    model = make_sparse_model("softmax")
    assert isinstance(model.decoder.attention, BahdanauAttention) and model.decoder.attention.normalizer == "softmax"
    assert model.config.attention_name == "bahdanau"
    src, lengths, tgt = padded_batch()
    _, weights = model(src, lengths, tgt)
    real = torch.arange(src.size(1)) < lengths[:, None]
    assert (weights.transpose(0, 1)[:, real] > 0).all()


def test_every_tensor_of_sparse_attention_is_made_on_the_models_device():
    """With "meta" as the default device, a tensor made without naming its device lands there and
    mixing it with the model's (CPU) tensors fails: training's pass and backward, the searches."""
    models = [make_sparse_model(normalizer, input_feeding=False) for normalizer in SPARSE]
    src, lengths, tgt = padded_batch()
    limits = decoding.max_output_lengths(lengths, 1.5, 5)
    with torch.device("meta"):
        for model in models:
            logits, _ = model(src, lengths, tgt)
            logits.sum().backward()
            with torch.inference_mode():
                decoding.beam_search(model, src, lengths, limits, beam=3)
            fast_decoding.beam_search(model, src, lengths, limits, beam=3, graphs=True)


@pytest.fixture(scope="module")
def sparse_model(tmp_path_factory):
    """A sparsemax model trained, saved and loaded through the usual code (30 steps, a few seconds)."""
    from conftest import copy_model

    return copy_model(tmp_path_factory.mktemp("sparse"), 30, attention_normalizer="sparsemax")


@pytest.mark.slow
def test_a_trained_sparse_model_translates_traces_and_describes_itself(sparse_model):
    """Translations and their attention (exact zeros), the trace (the same weights, its normalizer),
    the beam tree, the server's /models and /trace, `attnmt info` and the step figure."""
    from attnmt.info import model_info
    from attnmt.serve import create_app
    from attnmt.viz import decoder_step_figure
    from conftest import local_client

    translator = sparse_model
    [greedy] = translator.translate(["abcdefg"], beam=1)
    trace = translator.trace("abcdefg")
    torch.testing.assert_close(
        torch.as_tensor(trace.attention), torch.as_tensor(greedy.attention), atol=1e-6, rtol=1e-5
    )
    assert trace.normalizer == "sparsemax" and (trace.attention == 0).any()
    translator.beam_tree("abcdefg", beam=2)
    assert translator.describe()["attention_normalizer"] == "sparsemax"
    assert "bahdanau sparsemax attention" in model_info(translator.folder)["model"]
    with local_client(create_app([translator.folder])) as client:
        body = client.post("/trace", json={"text": "abcdefg"}).json()
        [info] = client.get("/models").json()
    assert info["attention_normalizer"] == "sparsemax" and body["normalizer"] == "sparsemax"
    zeros = sum(w == 0 for w in body["steps"][0]["weights"])
    assert zeros > 0
    figure = decoder_step_figure(trace, 0)
    ax = next(a for a in figure.axes if a.get_label() == "weights")
    assert f"sparsemax(e)_j (the largest outlined; {zeros} of {len(trace.source_tokens)} exactly 0)" in ax.get_title()


SPARSITY = Path(__file__).resolve().parents[1] / "benchmarks" / "attention_sparsity.py"


def test_the_sparsity_figures_of_the_benchmark():
    """benchmarks/attention_sparsity.py (E6): pieces attended, steps on one piece, pieces holding 90 %
    of the weight, top weight; support links are every word weight above 0."""
    spec = importlib.util.spec_from_file_location("attention_sparsity", SPARSITY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    s = module.sparsity([np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]), np.array([[0.2, 0.7, 0.1, 0.0]])])
    assert s == pytest.approx(
        {"pieces": 10 / 3, "attended": 2.0, "one": 1 / 3, "ninety": 5 / 3, "top": 2.2 / 3, "steps": 3}
    )
    assert module.support_links(np.array([[0.0, 0.6, 0.4], [1.0, 0.0, 0.0]])) == [(0, 1), (1, 0), (2, 0)]


@pytest.mark.slow
def test_the_sparsity_benchmark_reads_a_trained_model(sparse_model, tmp_path):
    pairs, gold = tmp_path / "pairs", tmp_path / "gold"
    pairs.write_text("ab cd ||| ab cd\nefg h ||| efg h\n")
    gold.write_text("1-1 2-2\n1-1 2-2\n")
    done = subprocess.run(
        [
            sys.executable,
            str(SPARSITY),
            str(sparse_model.folder),
            "--src",
            str(pairs),
            "--gold",
            str(gold),
            "--one-based",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    header, line = done.stdout.splitlines()
    assert "AER support" in header and "bahdanau sparsemax" in line and line.count("%") == 3  # one piece, 2 AERs


@pytest.mark.slow
def test_a_sentence_pair_model_with_sparsemax_classifies_and_says_so(tmp_path):
    """task: pairs with model.attention_normalizer: sparsemax trains, loads and classifies; its
    result, /models and the pair figure name the map."""
    from attnmt.api import load
    from attnmt.core.config import config_from_dict
    from attnmt.pairs.figures import pair_figure
    from attnmt.serve import create_app
    from attnmt.training import train
    from conftest import local_client, pair_config

    raw = pair_config(tmp_path, model={"attention_normalizer": "sparsemax"}, training={"max_steps": 20, "threads": 1})
    config = config_from_dict(raw, tmp_path)
    train(config, log=lambda message: None, progress=False)
    classifier = load(config.experiment_dir)
    [result] = classifier.classify([("a b c d", "a b e d")])
    assert result.normalizer == "sparsemax"
    np.testing.assert_allclose(result.premise_attention.sum(1), 1, atol=1e-5)
    axes = pair_figure(result).axes
    assert any(ax.get_title() == "attend: sparsemax over the hypothesis (rows sum to 1)" for ax in axes)
    with local_client(create_app([config.experiment_dir])) as client:
        [info] = client.get("/models").json()
    assert info["attention_normalizer"] == "sparsemax"


TRANSFORMER = dict(
    type="transformer",
    d_model=16,
    heads=2,
    feed_forward=32,
    encoder_layers=2,
    decoder_layers=2,
    dropout=0.0,
    attention_dropout=0.0,
)


@pytest.mark.parametrize("normalizer", SPARSE)
def test_every_head_of_a_sparse_transformer_uses_the_map_and_never_the_fused_kernel(normalizer, monkeypatch):
    """Every head of every layer (encoder and decoder self-attention, cross-attention): weights
    normalizer(Q K^T / sqrt(d_k)) over the unmasked keys, with exact zeros; training's pass too
    takes the written-out path (the fused kernel knows only the softmax); decoding step by step
    equals the teacher-forced pass."""
    import math

    import torch.nn.functional as F

    from attnmt.seq2seq.transformer import MultiHeadAttention

    torch.manual_seed(0)
    model = build_model(
        model_config_of(**rnn_fields(**TRANSFORMER, attention_normalizer=normalizer)), SRC_VOCAB, TGT_VOCAB
    )
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, MultiHeadAttention):
                module.W_q.weight.mul_(8)  # spread-out scores: sparse weights
    src, lengths, tgt = padded_batch()
    seen = []

    def recording(self, x, k, v, mask, need_weights=False):
        out, weights = original(self, x, k, v, mask, need_weights=True)
        q = self.split_heads(self.W_q(x))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~mask, float("-inf"))
        torch.testing.assert_close(weights, normalize(scores, normalizer))
        seen.append((weights == 0).any().item())
        return out, weights if need_weights else None

    original = MultiHeadAttention.forward
    monkeypatch.setattr(MultiHeadAttention, "forward", recording)
    monkeypatch.setattr(F, "scaled_dot_product_attention", None)  # calling it would fail
    model.train()
    logits, _ = model(src, lengths, tgt)
    logits.sum().backward()
    assert len(seen) == 2 + 2 * 2 and all(seen)  # 2 encoder layers, 2 decoder layers of 2 attentions
    monkeypatch.setattr(MultiHeadAttention, "forward", original)
    steps_matching_forward(model.eval(), src, lengths, tgt)
    assert "transformer with " + normalizer + " attention" in repr(model.config.transformer_name)
