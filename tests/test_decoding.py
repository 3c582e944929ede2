"""Greedy and beam search: agreement, ordering of scores, n-best lists, length limits."""

import numpy as np
import pytest
import torch

from attnmt.core.config import DecodingConfig, RNNConfig, TransformerConfig
from attnmt.data.batching import make_batch
from attnmt.seq2seq import EOS, build_model
from attnmt.seq2seq.decoding import (
    DecodingStopped,
    beam_search,
    best_candidates,
    greedy_search,
    length_penalty,
    max_output_lengths,
)
from attnmt.seq2seq.search import decode
from attention_helpers import rnn_fields
from conftest import assert_beam_of_one_equals_greedy, reverse


def untrained(attention):
    config = RNNConfig(
        **rnn_fields(
            attention=attention,
            embedding_size=16,
            encoder_hidden=8,
            decoder_hidden=16,
            attention_size=8,
            dropout=0.0,
            location_kernel=3,
        )
    )
    return build_model(config, 20, 20).eval()


def random_batch(n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return make_batch(
        [torch.randint(4, 20, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
    )


@pytest.mark.parametrize("attention", ["none", "bahdanau", "luong-general", "location"])
def test_beam_of_one_equals_greedy(attention):
    assert_beam_of_one_equals_greedy(untrained(attention), random_batch())


def test_outputs_respect_length_limits_and_end_in_eos_otherwise():
    model = untrained("bahdanau")
    batch = random_batch()
    limits = [1, 2, 3, 4, 5]
    for hyps in (
        greedy_search(model, batch.src, batch.src_lengths, limits),
        beam_search(model, batch.src, batch.src_lengths, limits, beam=3, n_best=3),
    ):
        for limit, sentence in zip(limits, hyps):
            for h in sentence:
                assert len(h.tokens) <= limit
                assert EOS not in h.tokens[:-1]


def count_decoder_rows(model):
    """Wraps model.decode_step to count the rows (hypotheses) it computes; returns the list of counts."""
    counts, step = [], model.decode_step

    def counted(prev, state, memory):
        counts.append(prev.size(0))
        return step(prev, state, memory)

    model.decode_step = counted
    return counts


def test_greedy_search_computes_each_sentence_only_until_it_ends(reverse_model):
    translator, sources = reverse_model
    ids = translator.src_subwords.encode(sources[:40])  # 3 to 8 characters: outputs end at different steps
    batch = make_batch(ids)
    limits = max_output_lengths(batch.src_lengths, 1.5, 10)
    counts = count_decoder_rows(translator.model)
    try:
        hyps = greedy_search(translator.model, batch.src, batch.src_lengths, limits)
    finally:
        del translator.model.decode_step
    lengths = [len(h[0].tokens) for h in hyps]
    assert len(set(lengths)) > 1
    # One row per sentence and output token: finished sentences left the batch.
    assert sum(counts) == sum(lengths)
    assert counts == sorted(counts, reverse=True) and counts[0] == len(ids)
    # Each sentence as if decoded alone.
    for sentence, limit, [ours] in zip(ids, limits, hyps):
        alone = make_batch([sentence])
        [[single]] = greedy_search(translator.model, alone.src, alone.src_lengths, [limit])
        assert ours.tokens == single.tokens
        assert ours.log_prob == pytest.approx(single.log_prob, abs=1e-4)
        torch.testing.assert_close(ours.attention, single.attention, atol=1e-5, rtol=0)


def test_beam_search_on_trained_model_never_scores_below_greedy(reverse_model):
    model, sources = reverse_model
    greedy = model.translate(sources[:60], beam=1)
    beam = model.translate(sources[:60], beam=5)
    for g, b in zip(greedy, beam):
        assert b.score >= g.score - 1e-4


def test_nbest_lists_are_sorted_distinct_and_carry_attention(reverse_model):
    model, sources = reverse_model
    for t in model.translate(sources[:10], beam=4, n_best=4):
        scores = [c.score for c in t.candidates]
        assert len(t.candidates) == 4 and scores == sorted(scores, reverse=True)
        assert len({tuple(c.tokens) for c in t.candidates}) == 4
        for c in t.candidates:
            assert c.attention.shape == (len(c.tokens), len(t.source_tokens))
            torch.testing.assert_close(torch.from_numpy(c.attention).sum(-1), torch.ones(len(c.tokens)))


def test_api_returns_text_tokens_score_attention_in_input_order(reverse_model):
    model, _ = reverse_model
    inputs = ["abc", "", "hgfedcb", "  ", "ja"]
    results = model.translate(inputs, beam=3)
    assert [r.source for r in results] == inputs
    assert results[1].text == "" and results[3].text == ""
    assert results[0].text == reverse("abc") and results[2].text == reverse("hgfedcb")
    first = results[0]
    assert first.tokens[-1] == "</s>" and first.source_tokens[-1] == "</s>"
    assert first.score < 0
    # The reversal is visible in the attention: output character k looks at input character n-1-k.
    letters = [i for i, p in enumerate(first.source_tokens) if p.strip("▁") in "abc" and p.strip("▁")]
    for k, piece in enumerate(p for p in first.tokens if p.strip("▁")):
        if piece != "</s>":
            assert first.attention[first.tokens.index(piece)].argmax() == letters[len(letters) - 1 - k]


def test_translate_rejects_bad_arguments(reverse_model):
    model, _ = reverse_model
    with pytest.raises(TypeError):
        model.translate("abc")
    with pytest.raises(ValueError):
        model.translate(["abc"], beam=2, n_best=3)


def test_length_penalty_is_wu_et_al():
    assert length_penalty(1, 1.0) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx((12 / 6) ** 0.6)
    assert length_penalty(10, 0.0) == 1.0


@pytest.mark.parametrize("beam", [2, 4])
def test_beam_tree_records_kept_pruned_and_finished_candidates(reverse_model, beam):
    model, _ = reverse_model
    translation, nodes = model.beam_tree("abcdefg", beam=beam)
    assert nodes[0]["status"] == "root" and nodes[0]["parent"] is None
    ids = {n["id"] for n in nodes}
    assert all(n["parent"] in ids for n in nodes[1:])
    by_step = {}
    for n in nodes[1:]:
        by_step.setdefault(n["step"], []).append(n)
        parent = nodes[n["parent"]]
        assert parent["status"] in ("root", "kept") and parent["step"] == n["step"] - 1
        assert n["log_prob"] <= parent["log_prob"] + 1e-6  # log-probabilities only go down
    for group in by_step.values():
        assert sum(n["status"] == "kept" for n in group) <= beam
        assert len(group) <= 2 * beam
    finished = [n for n in nodes if n["status"] == "finished"]
    assert finished and all(n["token"] == "</s>" for n in finished)
    # The best translation is a path of kept nodes ending in a finished node.
    best = max(finished, key=lambda n: n["log_prob"] / ((5 + n["step"]) / 6) ** 1.0)
    path, node = [], best
    while node["parent"] is not None:
        path.append(node["token"])
        node = nodes[node["parent"]]
    assert list(reversed(path)) == translation.tokens


def test_best_candidates_are_those_of_the_whole_vocabulary():
    g = torch.Generator().manual_seed(0)
    n, k, vocab = 3, 4, 50
    scores = -5 * torch.rand(n, k, generator=g)
    log_probs = torch.log_softmax(torch.randn(n * k, vocab, generator=g), dim=-1)
    top_scores, origin, token = best_candidates(scores, log_probs, k)
    expected, ids = (scores.view(-1, 1) + log_probs).view(n, k * vocab).topk(2 * k, dim=1)
    assert torch.equal(top_scores, expected)
    assert torch.equal(origin, ids // vocab) and torch.equal(token, ids % vocab)


def _assert_same_hypotheses(ours, theirs):
    assert [h.tokens for h in ours] == [h.tokens for h in theirs]
    assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-4)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.attention, b.attention)


def test_beam_wider_than_half_the_vocabulary():
    """The first step has one row per sentence: with fewer than 2 * beam tokens, its candidates
    are padded with impossible ones, and the search still fills the n-best list."""
    model, batch = untrained("bahdanau"), random_batch()  # 20 tokens
    for sentence in beam_search(model, batch.src, batch.src_lengths, [6] * 5, beam=12, n_best=12):
        assert len(sentence) == 12 and len({tuple(h.tokens) for h in sentence}) == 12


def test_beam_search_in_a_batch_equals_each_sentence_alone(reverse_model):
    """Sentences finish at different steps and leave the batch: the others must not notice."""
    translator, sources = reverse_model
    model, ids = translator.model, translator.src_subwords.encode(sources[:12])
    batch = make_batch(ids)
    limits = max_output_lengths(batch.src_lengths, 1.5, 10)
    together = beam_search(model, batch.src, batch.src_lengths, limits, beam=4, n_best=2)
    for i, sentence in enumerate(ids):
        alone = make_batch([sentence])
        [hypotheses] = beam_search(model, alone.src, alone.src_lengths, limits[i : i + 1], beam=4, n_best=2)
        _assert_same_hypotheses(together[i], hypotheses)


def test_bf16_output_layer_translates_like_float32(reverse_model):
    """quantize="bf16": the output layer's product in bf16, as in bf16 training; a confident
    model's translations stay the same, their scores move little."""
    translator, sources = reverse_model
    batch = make_batch(translator.src_subwords.encode(sources[:40]))
    generator = translator.model.generator
    for beam in (1, 4):
        full = decode(translator.model, batch.src, batch.src_lengths, DecodingConfig(), beam=beam)
        generator.compute_dtype = torch.bfloat16
        try:
            half = decode(translator.model, batch.src, batch.src_lengths, DecodingConfig(), beam=beam)
        finally:
            generator.compute_dtype = None
        assert [h[0].tokens for h in half] == [h[0].tokens for h in full]
        assert [h[0].score for h in half] == pytest.approx([h[0].score for h in full], abs=0.05)


def test_bf16_weight_copy_is_kept_until_the_weight_changes():
    layer = untrained("bahdanau").generator
    first = layer.weight_as(torch.bfloat16)
    assert layer.weight_as(torch.bfloat16) is first
    with torch.no_grad():
        layer.weight.add_(1.0)  # as an optimizer step does
    second = layer.weight_as(torch.bfloat16)
    assert second is not first
    torch.testing.assert_close(second.float(), layer.weight, atol=0.02, rtol=0.01)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_model_computing_nan_is_a_clear_error_not_an_empty_result(beam):
    from attnmt.core.errors import AttnmtError

    model = untrained("bahdanau")
    with torch.no_grad():
        model.generator.bias.fill_(float("nan"))
    batch = random_batch()
    with pytest.raises(AttnmtError, match=r"scores that are not numbers \(NaN\)"):
        decode(model, batch.src, batch.src_lengths, DecodingConfig(), beam=beam)


def test_beam_search_stops_a_sentence_that_cannot_improve_with_the_same_results(reverse_model, monkeypatch):
    """A sentence ends once no live hypothesis can reach its n best, even before ``beam`` of them
    have finished: fewer rows computed, the same hypotheses as the search without that rule."""
    import attnmt.seq2seq.decoding as decoding

    translator, sources = reverse_model
    batch = make_batch(translator.src_subwords.encode(sources[:40]))
    limits = max_output_lengths(batch.src_lengths, 1.5, 10)
    for alpha in (0.0, 1.0):
        counts = count_decoder_rows(translator.model)
        try:
            early = beam_search(translator.model, batch.src, batch.src_lengths, limits, beam=4, n_best=1, alpha=alpha)
        finally:
            del translator.model.decode_step
        with monkeypatch.context() as patch:
            patch.setattr(decoding, "cannot_improve", lambda *args: False)
            full_counts = count_decoder_rows(translator.model)
            try:
                full = beam_search(
                    translator.model, batch.src, batch.src_lengths, limits, beam=4, n_best=1, alpha=alpha
                )
            finally:
                del translator.model.decode_step
        assert sum(counts) < sum(full_counts)
        for a, b in zip(early, full):
            _assert_same_hypotheses(a, b)


def test_every_tensor_of_decoding_is_made_on_the_models_device(reverse_model, tiny_transformer):
    """With "meta" as the default device, a tensor made without naming its device lands there
    and the first operation mixing it with the model's (CPU) tensors fails: decoding, tracing,
    beam trees, forced attention, scoring, prefixes, the coverage penalty, constraints and Transformer
    attention maps name their device everywhere."""
    from attnmt.translation.align import force_attention

    translator, sources = reverse_model
    with torch.device("meta"):
        for beam in (1, 3):
            assert [t.text for t in translator.translate(sources[:5], beam=beam)] == [reverse(s) for s in sources[:5]]
        assert translator.trace(sources[0]).text == reverse(sources[0])
        translator.beam_tree(sources[0], beam=3)
        force_attention(translator, sources[:3], [reverse(s) for s in sources[:3]])
        translator.score(sources[:3], [reverse(s) for s in sources[:3]])
        for beam in (1, 3):
            translator.translate(sources[:3], beam=beam, prefix=["ab", "", "c"], shortlist=False)
        before = translator.config.decoding
        translator.set_decoding(coverage_penalty=0.4)
        try:
            translator.translate(sources[:3], beam=3)
            translator.translate(sources[:3], beam=3, constraints=[["ab"], [], ["c", "d"]])
        finally:
            translator.config = translator.config.model_copy(update={"decoding": before})
        tiny_transformer.score(["abc", "de"], ["cba", ""])
        tiny_transformer.translate(["abcdefghij" * 3], beam=2)
        tiny_transformer.attention("abc")
        tiny_transformer.attention("abc", "")


def test_every_tensor_of_the_servers_work_is_made_on_the_models_device(
    reverse_model, tiny_transformer, pair_model, monkeypatch
):
    """The same for the HTTP API: the work of each request (run in a worker thread, where "meta"
    is made the default device) for a translation model, a Transformer and a sentence-pair model."""
    from attnmt.serve import ServerLimits, create_app
    from attnmt.serve.models import LoadedModel
    from conftest import local_client

    run_chunks = LoadedModel.run_chunks

    async def on_meta(self, chunks, deadline, wanted=lambda: True):
        def made_on_meta(chunk):
            def run():
                with torch.device("meta"):
                    return chunk()

            return run

        return await run_chunks(self, [made_on_meta(chunk) for chunk in chunks], deadline, wanted)

    monkeypatch.setattr(LoadedModel, "run_chunks", on_meta)
    translator, sources = reverse_model
    app = create_app([translator.folder, tiny_transformer.folder, ("pairs", pair_model)], ServerLimits(timeout=60.0))
    transformer = tiny_transformer.folder.name
    with local_client(app) as client:
        for path, body in (
            ("/translate", {"text": sources[:3], "beam": 3, "n_best": 2}),
            ("/translate", {"text": sources[0]}),
            ("/trace", {"text": sources[0]}),
            ("/beam", {"text": sources[0], "beam": 3}),
            ("/translate", {"text": "abc", "model": transformer}),
            ("/attention", {"text": "abc", "model": transformer}),
            ("/score", {"text": sources[:2], "translation": ["ab", "c"]}),
            ("/translate", {"text": sources[:2], "prefix": ["ab", ""], "beam": 2}),
            ("/score", {"text": "abc", "translation": "cba", "model": transformer}),
            ("/classify", {"premise": "two red cats", "hypothesis": "two cats", "model": "pairs"}),
        ):
            response = client.post(path, json=body)
            assert response.status_code == 200, (path, response.text)
        [translation] = client.post("/translate", json={"text": sources[0]}).json()["translations"]
        assert translation["candidates"][0]["text"] == reverse(sources[0])


def test_an_unavailable_device_is_a_clear_error(reverse_model):
    from attnmt.api import load
    from attnmt.core.errors import AttnmtError

    translator, _ = reverse_model
    if not torch.cuda.is_available():
        with pytest.raises(AttnmtError, match="CUDA is not available here"):
            load(translator.folder, device="cuda")
    with pytest.raises(AttnmtError, match="not a device torch knows"):
        load(translator.folder, device="gpu7")
    assert load(translator.folder, device="cpu").model.generator.weight.device.type == "cpu"


class ConfidentModel:
    """A scripted decoder: from BOS it writes token 5 eight times then EOS, each with probability
    0.996; at any step on that path it may instead write 6, 7, 8 or 9 (0.001 each), after which it
    ends at once. Its unlikely hypotheses end early, long before its likely one."""

    has_attention = False
    PATH, VOCAB = 8, 10

    def encode(self, src, lengths, window=None):
        from attnmt.seq2seq.decoder import Memory

        batch = src.size(0)
        return Memory(
            torch.zeros(batch, 1, 1), None, torch.ones(batch, 1, dtype=torch.bool), torch.zeros(batch, 1), window
        )

    def init_state(self, memory):
        from dataclasses import dataclass

        from attnmt.seq2seq.base import Batched

        @dataclass
        class Position(Batched):
            written: torch.Tensor  # tokens 5 written so far; -1 once off the path

        return Position(torch.zeros(memory.states.size(0), dtype=torch.long))

    def init_fixed_state(self, memory, steps):  # (the searches of fast_decoding: its state keeps its shape)
        return self.init_state(memory)

    def decode_step(self, prev, state, memory):
        from dataclasses import replace

        from attnmt.seq2seq.base import StepOutput

        written = torch.where((prev == 5) | (prev == 2), state.written + (prev == 5).long(), torch.full_like(prev, -1))
        probs = torch.full((prev.size(0), self.VOCAB), 1e-6)
        on_path = written >= 0
        probs[on_path, 6:10] = 1e-3
        probs[on_path & (written < self.PATH), 5] = 0.996
        probs[on_path & (written >= self.PATH), EOS] = 0.996
        probs[~on_path, EOS] = 0.999
        probs[:, :3] = 0.0  # PAD, UNK, BOS
        log_probs = (probs / probs.sum(-1, keepdim=True)).log()
        return StepOutput(log_probs, replace(state, written=written), None, None, torch.zeros(1), torch.zeros(1))


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("beam", [2, 5])
def test_unlikely_hypotheses_ending_early_do_not_stop_the_search_before_the_likely_one_ends(beam, alpha):
    model = ConfidentModel()
    src, lengths = torch.ones(3, 1, dtype=torch.long), torch.ones(3, dtype=torch.long)
    [greedy], *_ = greedy_search(model, src, lengths, [30] * 3, alpha)
    [best], *_ = beam_search(model, src, lengths, [30] * 3, beam=beam, alpha=alpha)
    assert greedy.tokens == [5] * ConfidentModel.PATH + [EOS]
    assert best.tokens == greedy.tokens and best.score == pytest.approx(greedy.score)


@pytest.mark.parametrize("attention", ["bahdanau", "location", "luong-general"])
def test_beam_of_one_equals_greedy_with_an_attention_window(attention):
    model = untrained(attention)
    assert_beam_of_one_equals_greedy(model, random_batch(), window=(1, 2))


@pytest.mark.parametrize("attention", ["bahdanau", "location", "luong-general"])
def test_the_attention_window_travels_with_the_call_and_nothing_sets_it_on_the_model(attention, monkeypatch):
    """Issue 24: the window is a decoding setting (decode's settings.attention_window, which the
    memory carries to every step), not an attribute set on a built model: the decoder has none, and
    one model decoding with several windows in turn keeps each output within its window, gives the
    same output for the same window again, and has no attribute of any module set meanwhile."""
    from attnmt.core.errors import AttnmtError
    from attnmt.seq2seq.attention import window_mask

    model, batch = untrained(attention), random_batch(8)
    assert not hasattr(model.decoder, "window")
    sets, setattr_of_modules = [], torch.nn.Module.__setattr__

    def recorded(module, name, value):
        sets.append((type(module).__name__, name))
        setattr_of_modules(module, name, value)

    monkeypatch.setattr(torch.nn.Module, "__setattr__", recorded)
    outputs = {}
    for window in [(0, 1), None, (2, 0), (0, 1)]:
        for beam in (1, 3):
            decoded = decode(model, batch.src, batch.src_lengths, DecodingConfig(attention_window=window), beam=beam)
            output = [(h.tokens, h.attention) for hypotheses in decoded for h in hypotheses]
            first = outputs.setdefault((window, beam), output)
            assert all(a[0] == b[0] and torch.equal(a[1], b[1]) for a, b in zip(first, output, strict=True))
            if window is None:
                continue
            for hypotheses in decoded:
                weights = hypotheses[0].attention
                start = torch.zeros(1, weights.size(1))
                start[0, 0] = 1.0  # the first step's previous weights: all on the first position
                for before, row in zip(torch.cat([start, weights]), weights):
                    inside = window_mask(before[None], torch.ones(1, weights.size(1), dtype=torch.bool), *window)[0]
                    assert row[~inside].sum() == 0
    assert (outputs[None, 1][0][1] > 0).all() and (outputs[(0, 1), 1][0][1] == 0).any()  # the window is used
    assert sets == [] and not hasattr(model.decoder, "window")
    monkeypatch.undo()
    transformer = build_model(
        TransformerConfig(d_model=16, heads=2, feed_forward=32, encoder_layers=1, decoder_layers=1),
        20,
        20,
    ).eval()
    with pytest.raises(AttnmtError, match="for RNN decoders with attention"):
        decode(transformer, batch.src, batch.src_lengths, DecodingConfig(attention_window=(1, 1)))


def test_attention_window_from_python_and_the_command_line(reverse_model, tiny_transformer, tmp_path, capsys):
    """translator.attention_window and --attention-window decode within the window (each row's weight
    only from the previous row's median to one position after it); bad windows are clear errors."""
    from attnmt.cli import main
    from attnmt.core.errors import AttnmtError

    translator, sources = reverse_model
    translator.attention_window = (0, 1)
    try:
        assert translator.config.decoding.attention_window == (0, 1)
        for t in translator.translate(sources[:20], beam=3):
            weights = torch.as_tensor(t.attention)
            for before, row in zip(weights, weights[1:]):
                median = int((before.cumsum(0) < 0.5).sum())
                assert row[:median].sum() == 0 and row[median + 2 :].sum() == 0
        with pytest.raises(AttnmtError, match="two whole numbers"):
            translator.attention_window = (-1, 2)
    finally:
        translator.attention_window = None
    assert translator.config.decoding.attention_window is None
    with pytest.raises(AttnmtError, match="for RNN decoders with attention"):
        tiny_transformer.attention_window = (1, 1)

    src = tmp_path / "src.txt"
    src.write_text("\n".join(sources[:5]) + "\n", encoding="utf-8")
    assert main(["translate", str(translator.folder), "-i", str(src), "--attention-window", "0,1", "--beam", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5
    with pytest.raises(SystemExit):
        main(["translate", str(translator.folder), "-i", str(src), "--attention-window", "2"])
    assert "give LEFT,RIGHT" in capsys.readouterr().err
    assert main(["translate", str(tiny_transformer.folder), "-i", str(src), "--attention-window", "1,1"]) == 2
    assert "for RNN decoders with attention" in capsys.readouterr().err


# --- stopping between decoder steps (issue 27, point 9: the server's time limit) -------------------


def stopping_after(steps: list, n: int | None):
    """A ``stop`` that says True once ``steps`` (the decoder steps counted so far) has n of them;
    never with n None. Returns (stop, the number of times it was asked)."""
    asked = [0]

    def stop():
        asked[0] += 1
        return n is not None and len(steps) >= n

    return stop, asked


def assert_same_hypotheses(ours, theirs):
    assert [[h.tokens for h in s] for s in ours] == [[h.tokens for h in s] for s in theirs]
    assert [[h.score for h in s] for s in ours] == [[h.score for h in s] for s in theirs]
    for s, t in zip(ours, theirs):
        for h, g in zip(s, t):
            torch.testing.assert_close(h.attention, g.attention, atol=0, rtol=0)


@pytest.mark.parametrize("n", [1, 3])
def test_beam_search_stops_between_decoder_steps_when_told(n):
    """``stop`` is asked after each step that leaves the search unfinished: once it says True, the
    search raises DecodingStopped without another step; a stop that never fires changes nothing."""
    model = untrained("bahdanau")
    batch = random_batch()
    limits = [12] * batch.src.size(0)
    plain = beam_search(model, batch.src, batch.src_lengths, limits, beam=3, n_best=2)
    steps = count_decoder_rows(model)
    stop, asked = stopping_after(steps, None)
    unstopped = beam_search(model, batch.src, batch.src_lengths, limits, beam=3, n_best=2, stop=stop)
    assert_same_hypotheses(unstopped, plain)
    assert len(steps) > n + 1 and asked[0] == len(steps) - 1  # asked between every two steps
    steps.clear()
    stop, asked = stopping_after(steps, n)
    with pytest.raises(DecodingStopped) as stopped:
        beam_search(model, batch.src, batch.src_lengths, limits, beam=3, n_best=2, stop=stop)
    assert len(steps) == n and stopped.value.steps == n and asked[0] == n


def test_beam_tree_and_trace_stop_between_decoder_steps_when_told(reverse_model):
    """Translator.beam_tree and Translator.trace (what /beam and /trace run) stop after the step
    under way once ``stop`` says so, and give the same results with a stop that never fires."""
    translator, _ = reverse_model
    text = "abcdefgh"
    tree, traced = translator.beam_tree(text, beam=3), translator.trace(text, top_k=3)
    steps = count_decoder_rows(translator.model)
    try:
        for run in (
            lambda stop: translator.beam_tree(text, beam=3, stop=stop),
            lambda stop: translator.trace(text, top_k=3, stop=stop),
        ):
            steps.clear()
            stop, asked = stopping_after(steps, None)
            result = run(stop)
            assert len(steps) > 4 and asked[0] == len(steps) - 1
            if isinstance(result, tuple):
                assert result[1] == tree[1]
                assert [(c.tokens, c.score) for c in result[0].candidates] == [
                    (c.tokens, c.score) for c in tree[0].candidates
                ]
                assert all(
                    np.array_equal(c.attention, d.attention) for c, d in zip(result[0].candidates, tree[0].candidates)
                )
            else:
                assert result.tokens == traced.tokens
                np.testing.assert_array_equal(result.attention, traced.attention)
                assert all(np.array_equal(a.state, b.state) for a, b in zip(result.steps, traced.steps))
            steps.clear()
            stop, _ = stopping_after(steps, 3)
            with pytest.raises(DecodingStopped):
                run(stop)
            assert len(steps) == 3  # the third step was under way when the stop fired; no fourth
    finally:
        del translator.model.decode_step


@pytest.mark.parametrize("attention", ["bahdanau", "luong-general", "luong-dot", "luong-concat"])
def test_beam_search_shares_each_sentences_memory_among_its_hypotheses(attention, monkeypatch):
    """The k hypotheses of a sentence attend to one copy of its memory, as k queries: the same
    hypotheses as with the memory repeated for every row (Batched.for_beams), and no copy made."""
    from attnmt.seq2seq.base import Batched
    from attnmt.seq2seq.decoder import Memory

    config = RNNConfig(
        **rnn_fields(
            attention=attention, embedding_size=16, encoder_hidden=8, decoder_hidden=16, attention_size=8, dropout=0.0
        )
    )
    model, batch = build_model(config, 20, 20).eval(), random_batch(n=7, seed=3)
    rows = []
    step = model.decode_step
    monkeypatch.setattr(
        model,
        "decode_step",
        lambda prev, state, memory: (
            rows.append((prev.numel(), memory.states.size(0), memory.beam)) or step(prev, state, memory)
        ),
    )
    shared = beam_search(model, batch.src, batch.src_lengths, [7, 3, 9, 5, 8, 4, 6], beam=4, n_best=3)
    assert all(n == sentences * beam for n, sentences, beam in rows)
    assert any(beam == 4 for _, _, beam in rows) and any(s < 7 for _, s, beam in rows if beam == 4)
    monkeypatch.setattr(Memory, "for_beams", Batched.for_beams)  # every row its own copy, as before
    rows.clear()
    repeated = beam_search(model, batch.src, batch.src_lengths, [7, 3, 9, 5, 8, 4, 6], beam=4, n_best=3)
    assert all(n == sentences and beam == 1 for n, sentences, beam in rows)
    for ours, theirs in zip(shared, repeated):
        _assert_same_hypotheses(ours, theirs)


@pytest.mark.parametrize("attention, window", [("location", None), ("bahdanau", (2, 2)), ("none", None)])
def test_a_memory_read_row_by_row_is_repeated_for_every_hypothesis(attention, window):
    """Location attention and attention windows read each row's previous weights, and no attention
    reads the final state per row: their memory is not shared (k copies, as Batched.for_beams)."""
    model, batch = untrained(attention), random_batch()
    memory = model.encode(batch.src, batch.src_lengths, window)
    beams = memory.for_beams(torch.arange(5), 1, 3)
    assert not memory.shareable and beams.beam == 1 and beams.states.size(0) == 15
