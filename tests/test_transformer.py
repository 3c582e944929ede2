"""Transformer: causal mask, cached decoding, attention weights of every layer and head, fused and
explicit attention, the warm-up schedule, config errors, and a small model that learns."""

import numpy as np
import pytest
import torch

import attnmt
from attnmt.core.config import TransformerConfig, model_config_of
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.seq2seq import BOS, PAD, build_model
from attnmt.seq2seq.transformer import Embeddings, FeedForward, MultiHeadAttention, attend, sinusoids
from attnmt.training import make_scheduler, noam, train
from attnmt.translation.align import force_attention
from conftest import assert_beam_of_one_equals_greedy, random_strings, toy_config


def untrained(**changes):
    config = model_config_of(
        **{
            "type": "transformer",
            "d_model": 32,
            "heads": 4,
            "feed_forward": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "dropout": 0.0,
            "attention_dropout": 0.0,
            **changes,
        }
    )
    return build_model(config, 20, 20).eval()


def random_batch(n=4, seed=0):
    """Sources and targets of different lengths, so both sides have padding."""
    g = torch.Generator().manual_seed(seed)

    def sequence():
        return torch.randint(4, 20, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()

    return make_batch([sequence() for _ in range(n)], [sequence() for _ in range(n)])


def full_log_probs(model, batch):
    """log-softmax of a teacher-forced pass, with PAD and BOS excluded as decode_step does."""
    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
    logits[..., PAD] = logits[..., BOS] = float("-inf")
    return torch.log_softmax(logits, dim=-1)


def assert_close_where_finite(a, b, atol=1e-5):
    finite = torch.isfinite(b)
    assert torch.equal(finite, torch.isfinite(a))
    torch.testing.assert_close(a[finite], b[finite], atol=atol, rtol=0)


# ---------------------------------------------------------------- model


@pytest.mark.parametrize("training", [False, True], ids=["explicit", "fused"])
def test_causal_mask_a_later_target_token_changes_no_earlier_output(training):
    model = untrained().train(training)  # dropout 0: train mode only switches to the fused kernel
    batch = random_batch()
    before, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
    k = 3
    changed = batch.tgt_in.clone()
    changed[:, k] = (changed[:, k] + 1) % 16 + 4
    after, _ = model(batch.src, batch.src_lengths, changed)
    torch.testing.assert_close(after[:, :k], before[:, :k], atol=0, rtol=0)
    assert (after[:, k:] - before[:, k:]).abs().amax(dim=-1).min() > 1e-4  # every later position moves


MARIAN_LIKE = {"scale_embeddings": False, "activation": "silu"}  # (with post-norm and halves: attnmt import's)


@pytest.mark.parametrize(
    "norm, positions, other",
    [("pre", "sinusoidal", {}), ("post", "learned", {}), ("post", "sinusoidal-halves", MARIAN_LIKE)],
)
def test_cached_incremental_decoding_equals_full_forward(norm, positions, other):
    model = untrained(norm=norm, positions=positions, **other)
    batch = random_batch()
    with torch.inference_mode():
        full = full_log_probs(model, batch)
        memory = model.encode(batch.src, batch.src_lengths)
        state = model.init_state(memory)
        steps = []
        for t in range(batch.tgt_in.size(1)):
            step = model.decode_step(batch.tgt_in[:, t], state, memory)
            state = step.state
            steps.append(step.log_probs)
            assert state.length == t + 1  # one cached key and value per position written
    assert_close_where_finite(torch.stack(steps, dim=1), full)


def test_sinusoid_halves_are_the_interleaved_sines_and_cosines_side_by_side():
    """positions: sinusoidal-halves (Marian's) holds PE(pos, 2i) of the interleaved table in column i and
    PE(pos, 2i+1) in column h + i (h = ceil(d/2)), for an even and an odd width."""
    for d_model in (32, 7):
        interleaved, halves = sinusoids(300, d_model), sinusoids(300, d_model, halves=True)
        h = (d_model + 1) // 2
        torch.testing.assert_close(halves[:, :h], interleaved[:, 0::2], atol=1e-4, rtol=0)
        torch.testing.assert_close(halves[:, h:], interleaved[:, 1::2], atol=1e-4, rtol=0)


def test_embeddings_unscaled_and_the_activations_are_their_equations():
    """scale_embeddings: false adds the token embeddings as they are; activation: silu and gelu are
    W_2 (z sigmoid(z)) and W_2 (z Phi(z)) of z = W_1 x; the defaults are today's sqrt(d_model) and relu."""
    tokens = torch.tensor([[5, 6, 7]])
    for scale in (True, False):
        embeddings = Embeddings(20, TransformerConfig(d_model=16, scale_embeddings=scale, dropout=0.0))
        expected = embeddings.tokens(tokens) * (4.0 if scale else 1.0) + sinusoids(3, 16)
        torch.testing.assert_close(embeddings(tokens), expected, atol=0, rtol=0)
    x = torch.randn(3, 16)
    for name, act in (("relu", torch.relu), ("silu", lambda z: z * torch.sigmoid(z)), ("gelu", None)):
        ff = FeedForward(16, 32, name)
        z = ff.W_1(x)
        act = act or (lambda z: z * 0.5 * (1 + torch.erf(z / 2**0.5)))
        torch.testing.assert_close(ff(x), ff.W_2(act(z)), atol=1e-6, rtol=0)
    assert TransformerConfig().activation == "relu" and TransformerConfig().scale_embeddings is True


def test_beam_reordering_of_the_cache_equals_decoding_the_reordered_batch():
    model = untrained()
    batch = random_batch()
    order = torch.tensor([2, 2, 0, 3])  # what beam search does: rows copied and moved
    with torch.inference_mode():
        memory = model.encode(batch.src, batch.src_lengths)
        state = model.init_state(memory)
        for t in range(3):
            state = model.decode_step(batch.tgt_in[:, t], state, memory).state
        memory, state = memory.select(order), state.select(order)
        step = model.decode_step(batch.tgt_in[order, 3], state, memory)
        log_probs, weights = step.log_probs, step.weights
        full = full_log_probs(model, batch)[order, 3]
        _, full_weights = model(batch.src, batch.src_lengths, batch.tgt_in)
    assert_close_where_finite(log_probs, full)
    torch.testing.assert_close(weights, full_weights[order, 3], atol=1e-6, rtol=0)


def test_steps_write_the_cache_in_place_and_copy_it_when_two_steps_extend_one_state():
    """A decoding step writes its keys and values into the buffers of the state it extends (no copy
    of the cache), until they are full; a second step from the same state (which another step has
    extended already) gets buffers of its own, and neither step's state sees the other's position."""
    from attnmt.seq2seq.transformer import CACHE_CHUNK

    model = untrained()
    batch = random_batch()
    tokens = batch.tgt_in[:, :3]
    with torch.inference_mode():
        full = full_log_probs(model, batch)
        memory = model.encode(batch.src, batch.src_lengths)
        first = model.decode_step(tokens[:, 0], model.init_state(memory), memory).state
        second = model.decode_step(tokens[:, 1], first, memory).state
        assert second.keys[0].data_ptr() == first.keys[0].data_ptr()  # written in place
        other = model.decode_step(torch.full_like(tokens[:, 1], 7), first, memory).state  # first again
        assert other.keys[0].data_ptr() != first.keys[0].data_ptr()  # its own buffers
        after_second = model.decode_step(tokens[:, 2], second, memory).log_probs
        after_other = model.decode_step(tokens[:, 2], other, memory).log_probs
        state = model.init_state(memory)
        for t in range(CACHE_CHUNK + 2):  # past the first buffers' room: they grow
            state = model.decode_step(batch.tgt_in[:, min(t, batch.tgt_in.size(1) - 1)], state, memory).state
        assert state.keys[0].size(2) == 2 * CACHE_CHUNK and state.length == CACHE_CHUNK + 2
        again = model.decode_step(tokens[:, 0], model.init_state(memory), memory).state
        again = model.decode_step(torch.full_like(tokens[:, 1], 7), again, memory).state  # on its own
        expected_other = model.decode_step(tokens[:, 2], again, memory).log_probs
    assert_close_where_finite(after_second, full[:, 2])  # the second step's cache is intact
    torch.testing.assert_close(after_other, expected_other, atol=1e-6, rtol=0)


def test_per_head_weights_have_their_shapes_and_sum_to_one_over_real_positions():
    model = untrained(encoder_layers=3, decoder_layers=2, heads=4)
    batch = random_batch(n=3)
    maps = model.attention_maps(batch.src, batch.src_lengths, batch.tgt_in)
    B, S, T = 3, batch.src.size(1), batch.tgt_in.size(1)
    assert maps["encoder"].shape == (B, 3, 4, S, S)
    assert maps["decoder"].shape == (B, 2, 4, T, T)
    assert maps["cross"].shape == (B, 2, 4, T, S)
    src_real = batch.src != PAD
    tgt_real = batch.tgt_in != PAD
    for i in range(B):
        encoder = maps["encoder"][i][:, :, src_real[i]]  # rows of real source tokens
        cross = maps["cross"][i][:, :, tgt_real[i]]  # rows of real target positions
        decoder = maps["decoder"][i][:, :, tgt_real[i]]
        for weights in (encoder, cross, decoder):
            torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert encoder[..., ~src_real[i]].abs().sum() == 0 and cross[..., ~src_real[i]].abs().sum() == 0
    assert not src_real.all() and not tgt_real.all()  # the batch has padding on both sides
    # The decoder sees no later position: its self-attention is lower triangular.
    assert torch.triu(maps["decoder"], diagonal=1).abs().max() == 0


def test_fused_and_explicit_attention_agree():
    torch.manual_seed(1)
    attention = MultiHeadAttention(32, 4, dropout=0.0)
    x, memory = torch.randn(3, 5, 32), torch.randn(3, 7, 32)
    mask = torch.rand(3, 1, 5, 7) > 0.3
    mask[..., 0] = True  # every query sees something
    k, v = attention.keys_values(memory)
    fused, none = attention(x, k, v, mask, need_weights=False)
    explicit, weights = attention(x, k, v, mask, need_weights=True)
    assert none is None and weights.shape == (3, 4, 5, 7)
    torch.testing.assert_close(explicit, fused, atol=1e-6, rtol=1e-5)
    assert weights[~mask.expand_as(weights)].abs().max() == 0
    # attend() is the equation itself: softmax(Q K^T / sqrt(d_k)) V.
    q, key, value = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    out, w = attend(q, key, value, None)
    torch.testing.assert_close(w, torch.softmax(q @ key.transpose(-1, -2) / 8**0.5, dim=-1))
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, key, value))


def test_whole_model_fused_and_explicit_paths_agree():
    model = untrained()
    batch = random_batch()
    explicit, weights = model.eval()(batch.src, batch.src_lengths, batch.tgt_in)
    fused, none = model.train()(batch.src, batch.src_lengths, batch.tgt_in)
    assert none is None and weights.shape == (*batch.tgt_in.shape, batch.src.size(1))
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_beam_of_one_equals_greedy():
    assert_beam_of_one_equals_greedy(untrained(), random_batch(n=5))


def test_shared_embeddings_are_one_matrix():
    model = untrained(share_embeddings=True)
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight is model.generator.weight
    with pytest.raises(AttnmtError, match="share_embeddings"):
        build_model(TransformerConfig(share_embeddings=True), 20, 30)


# ---------------------------------------------------------------- schedule and config


def test_noam_schedule_warms_up_linearly_then_decays_as_inverse_square_root(tmp_path):
    assert noam(100, 100) == pytest.approx(1.0)
    assert noam(50, 100) == pytest.approx(0.5)
    assert noam(400, 100) == pytest.approx(0.5)
    config = toy_config(tmp_path, [("a", "a")], training={"schedule": "noam", "warmup_steps": 4, "learning_rate": 0.01})
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    scheduler = make_scheduler(optimizer, config.training)
    rates = []
    for _ in range(8):  # the rate of each update, then the step
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([0.01 * noam(step, 4) for step in range(1, 9)])
    assert max(rates) == pytest.approx(0.01) and rates.index(max(rates)) == 3


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(AttnmtError, match=r"heads \(3\) must divide d_model \(32\)"):
        toy_config(tmp_path, [("a", "a")], model={"type": "transformer", "d_model": 32, "heads": 3})
    with pytest.raises(AttnmtError, match=r"model\.share_embeddings needs one joint vocabulary"):
        toy_config(
            tmp_path,
            [("a", "a")],
            model={"type": "transformer", "share_embeddings": True},
            data={"subwords": {"type": "char", "vocab_size": 40, "joint": False}},
        )
    with pytest.raises(AttnmtError, match="model.type"):
        toy_config(tmp_path, [("a", "a")], model={"type": "transfomer"})
    with pytest.raises(AttnmtError, match="training.schedule"):
        toy_config(tmp_path, [("a", "a")], training={"schedule": "cosine"})
    with pytest.raises(AttnmtError, match="model.activation"):  # (Marian's name; attnmt's is silu)
        toy_config(tmp_path, [("a", "a")], model={"type": "transformer", "activation": "swish"})


# ---------------------------------------------------------------- a trained model


@pytest.fixture(scope="module")
def copy_model(tmp_path_factory):
    """A small Transformer trained to copy strings of 3-8 letters (about 12 s on one thread); best of
    six validations by dev loss. At a learning rate of 0.002, 500 steps reached 99.5% with seed 1, 400
    steps 84-93%, 600 steps 96%, 99% and 98.5% with the training seeds 42, 1 and 2; at 0.004 (these
    settings), 420 steps reach 98.5%, 96% and 96.5%, 300 steps 94%."""
    folder = tmp_path_factory.mktemp("copy")
    train_src, dev_src = random_strings(4000, 3, 8, seed=1), random_strings(200, 3, 8, seed=2)
    config = toy_config(
        folder,
        [(s, s) for s in train_src],
        [(s, s) for s in dev_src],
        model={
            "type": "transformer",
            "d_model": 64,
            "heads": 4,
            "feed_forward": 128,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "dropout": 0.0,
            "attention_dropout": 0.0,
            "share_embeddings": True,
        },
        training={
            "max_steps": 420,
            "validate_every": 70,
            "learning_rate": 0.004,
            "schedule": "noam",
            "warmup_steps": 50,
            "adam_betas": [0.9, 0.98],
            "early_stopping_metric": "loss",
            "threads": 1,
        },
    )
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    return attnmt.load(config.experiment_dir), dev_src


def test_small_transformer_learns_to_copy_strings(copy_model):
    model, sources = copy_model
    outputs = model.translate(sources, beam=1)
    accuracy = sum(o.text == s for o, s in zip(outputs, sources)) / len(sources)
    assert accuracy >= 0.95, accuracy


def test_attention_of_every_layer_and_head_from_the_api(copy_model):
    model, _ = copy_model
    [translation] = model.translate(["abcdef"], beam=3)
    maps = model.attention("abcdef", translation)
    S, T = len(translation.source_tokens), len(translation.tokens)
    assert maps["encoder"].shape == (2, 4, S, S)
    assert maps["decoder"].shape == (2, 4, T, T)
    assert maps["cross"].shape == (2, 4, T, S)
    assert maps["source_tokens"] == translation.source_tokens and maps["tokens"] == translation.tokens
    assert maps["decoder_tokens"] == ["<s>"] + translation.tokens[:-1]
    for name in ("encoder", "decoder", "cross"):
        np.testing.assert_allclose(maps[name].sum(-1), 1.0, atol=1e-5)
    # The translation's matrix is the last layer's cross-attention averaged over heads, and so
    # is what forced alignment reads.
    np.testing.assert_allclose(translation.attention, maps["cross"][-1].mean(0), atol=1e-5)
    [forced] = force_attention(model, ["abcdef"], [translation.text])
    np.testing.assert_allclose(forced, maps["cross"][-1].mean(0), atol=1e-5)
    # Without a translation, attention() translates; with a string, it forces that string.
    assert model.attention("abcdef")["tokens"] == translation.tokens
    forced = model.attention("abcdef", "ab")
    assert forced["tokens"][-1] == "</s>" and "".join(forced["tokens"][:-1]).strip("▁") == "ab"
    assert forced["cross"].shape == (2, 4, len(forced["tokens"]), S)


def test_beam_search_n_best_and_trace_of_a_transformer(copy_model):
    model, sources = copy_model
    for t in model.translate(sources[:5], beam=4, n_best=3):
        assert len(t.candidates) == 3
        assert [c.score for c in t.candidates] == sorted((c.score for c in t.candidates), reverse=True)
        assert t.candidates[0].attention.shape == (len(t.tokens), len(t.source_tokens))
    trace = model.trace("abcdef")
    [greedy] = model.translate(["abcdef"], beam=1)
    assert trace.text == greedy.text
    np.testing.assert_allclose(trace.attention, greedy.attention, atol=1e-5)
    step = trace.steps[0]
    assert step.scores is None and step.context.shape == (64,) and step.state.shape == (64,)
