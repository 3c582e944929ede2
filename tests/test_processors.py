"""attnmt.seq2seq.processors: sampling's filters are a log-probability processor, and both executors (the eager
one, decoding.Greedy, and the fixed-shape one, fast_decoding._Greedy) apply a pick's processors through one code
path, processors.choose, reached from search.decode in either."""

from dataclasses import dataclass

import pytest
import torch

from attnmt.core.config import MIN_SHAPING, DecodingConfig, Sampling
from attnmt.seq2seq import EOS, decoding, fast_decoding, processors
from attnmt.seq2seq import search as searches
from attnmt.seq2seq.processors import Sampler, SamplingFilters
from test_decoding import random_batch
from test_fast_decoding import assert_same_hypotheses, limits_of, tiny


class Banned:
    """A processor of our own: the columns of ``ids`` at -inf (a token the outputs may not hold)."""

    def __init__(self, ids: list[int]):
        self.ids = ids
        self.rows_seen: list[int] = []

    def __call__(self, log_probs: torch.Tensor) -> torch.Tensor:
        self.rows_seen.append(log_probs.size(0))
        return log_probs.index_fill(1, torch.tensor(self.ids, device=log_probs.device), float("-inf"))


@pytest.fixture
def chosen(monkeypatch):
    """Every call of processors.choose, the one code path: (the pick, the rows of its log-probabilities)."""
    calls, choose = [], processors.choose
    monkeypatch.setattr(
        processors, "choose", lambda log_probs, pick: calls.append((pick, len(log_probs))) or choose(log_probs, pick)
    )
    return calls


@pytest.mark.parametrize("graphs", [False, True])
def test_a_processor_is_applied_by_both_executors_through_one_code_path(chosen, graphs):
    """The same Sampler (a processor of ours, then sampling's filters at the smallest temperature: the most probable
    token left) in either executor: each step's choice goes through processors.choose, the processor sees every
    step's rows (the eager loop's shrink as sentences end, the fixed-shape loop's stay), no output holds a banned
    token, and both executors find the same hypotheses, scored by the model's own log-probabilities."""
    batch, model = random_batch(6, seed=6), tiny("gru-bahdanau")
    args = (model, batch.src, batch.src_lengths, limits_of(batch, "usual"))
    plain = decoding.greedy_search(*args)
    ids = sorted({t for [h] in plain for t in h.tokens if t != EOS})[:3]  # (tokens the plain search writes)
    found = {}
    for executor in (decoding, fast_decoding):
        banned = Banned(ids)
        pick = Sampler((banned, SamplingFilters(Sampling(temperature=MIN_SHAPING))), torch.Generator().manual_seed(0))
        chosen.clear()
        options = {"graphs": graphs} if executor is fast_decoding else {}
        found[executor] = executor.greedy_search(*args, pick=pick, **options)
        assert chosen and all(p is pick for p, _ in chosen)
        assert banned.rows_seen == [rows for _, rows in chosen]
        assert ids and not {t for [h] in found[executor] for t in h.tokens} & set(ids)
    assert_same_hypotheses(found[fast_decoding], found[decoding])


@pytest.mark.parametrize("fast", [False, True])
def test_decode_samples_through_the_filters_as_a_processor_in_either_executor(chosen, monkeypatch, fast):
    """search.decode's sampling: a Sampler whose processors are sampling's filters, chosen through
    processors.choose in the executor fast_here chooses; the same seed draws the same outputs."""
    monkeypatch.setattr(searches, "fast_here", lambda device, model: fast)
    batch, model = random_batch(5, seed=3), tiny("gru-luong-general")
    sampling = Sampling(top_k=5, top_p=0.9, temperature=0.8)

    def drawn():
        generator = torch.Generator().manual_seed(11)
        settings = DecodingConfig()
        return searches.decode(model, batch.src, batch.src_lengths, settings, sampling=sampling, generator=generator)

    first = drawn()
    picks = {id(p): p for p, _ in chosen}
    assert len(picks) == 1
    [pick] = picks.values()
    assert isinstance(pick, Sampler) and [type(p) for p in pick.processors] == [SamplingFilters]
    assert pick.processors[0].sampling == sampling
    rows = [rows for _, rows in chosen]
    assert rows == ([batch.src.size(0)] * len(rows) if fast else sorted(rows, reverse=True))
    assert [h[0].tokens for h in drawn()] == [h[0].tokens for h in first]


def test_the_filters_are_sampler_s_draw():
    """decoding.sampler (where its callers found it) is processors.sampler: the filters' softmax, drawn."""
    rows = torch.tensor([[-0.1, -2.0, -3.0, -9.0], [-1.5, -0.5, -4.0, -2.0]]).expand(500, 2, 4).reshape(1000, 4)
    sampling = Sampling(top_k=3, top_p=0.95, temperature=1.3)
    assert decoding.sampler is processors.sampler
    drawn = processors.sampler(sampling, torch.Generator().manual_seed(5))(rows)
    probs = SamplingFilters(sampling)(rows).softmax(-1)
    again = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(5)).squeeze(1)
    assert torch.equal(drawn, again)


def test_a_prefix_forces_its_tokens_through_the_same_processors_in_both_executors(monkeypatch):
    """A prefix's restrictions (the loop processor prefix.Prefix) are processors.Forced (the prefix's tokens) and
    processors.Allowed (the pieces spelling its word), the same two in either executor, each seeing every step's rows
    while it restricts them; both executors find the same hypotheses, each beginning with its prefix."""
    from attnmt.seq2seq.prefix import Prefix
    from test_fast_decoding import PREFIXES, prefixed_limits

    seen = []
    for processor in (processors.Forced, processors.Allowed):
        call = processor.__call__
        monkeypatch.setattr(
            processor, "__call__", lambda self, log_probs, call=call: seen.append(type(self)) or call(self, log_probs)
        )
    batch, model = random_batch(6, seed=7), tiny("gru-bahdanau")
    args = (model, batch.src, batch.src_lengths, prefixed_limits(limits_of(batch, "usual")))
    found = {}
    for executor in (decoding, fast_decoding):
        seen.clear()
        found[executor] = executor.beam_search(*args, 3, 2, processors=(Prefix(PREFIXES, None, batch.src.device),))
        assert {processors.Forced, processors.Allowed} <= set(seen)
    assert_same_hypotheses(found[fast_decoding], found[decoding])
    for tokens, hypotheses in zip(PREFIXES.tokens, found[fast_decoding]):
        assert all(h.tokens[: len(tokens)] == tokens for h in hypotheses)


def test_forced_and_allowed_restrict_as_the_prefix_did():
    """Forced: a row's forced token keeps its log-probability, every other column -inf (PAD: the row as it is);
    Allowed: the columns not allowed at -inf."""
    log_probs = torch.randn(3, 6).log_softmax(-1)
    forced = processors.Forced(torch.tensor([[4], [0], [2]]), 0)(log_probs)
    assert torch.equal(forced[1], log_probs[1])
    for row, token in ((0, 4), (2, 2)):
        assert forced[row, token] == log_probs[row, token]
        assert torch.isinf(forced[row]).sum() == 5
    allowed = torch.tensor([[True] * 6, [False, True, False, True, False, False], [False] * 5 + [True]])
    kept = processors.Allowed(allowed)(log_probs)
    assert torch.equal(kept[allowed], log_probs[allowed]) and bool((kept[~allowed] == float("-inf")).all())


class NoRepeats:
    """A loop processor of our own (decoding.run_eager and fast_decoding's step apply it): a row may not write a
    token it has written (EOS always may). Its state, the tokens each row has written (rows, V), is tensors only, so
    the fixed-shape executor carries it too, and moves with the rows: beam search's reordering, the eager loop's
    finished rows leaving (processors.Processed)."""

    def __init__(self, vocabulary: int):
        self.vocabulary, self.steps_seen = vocabulary, 0

    def start(self, memory, fixed: bool):
        return Written(torch.zeros(memory.states.size(0), self.vocabulary, dtype=torch.bool))

    def __call__(self, t, prev_tokens, log_probs, state):
        self.steps_seen += 1
        written = state.tokens | torch.nn.functional.one_hot(prev_tokens, self.vocabulary).bool()
        written[:, EOS] = False
        return log_probs.masked_fill(written, float("-inf")), Written(written)


@dataclass
class Written:
    tokens: torch.Tensor  # (rows, V)

    def select(self, index):
        return Written(self.tokens[index])


def repeats(hypotheses) -> bool:
    return any(len(set(h.tokens)) < len(h.tokens) for found in hypotheses for h in found)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_loop_processor_handed_to_decode_restricts_every_step_in_either_executor(monkeypatch, beam):
    """search.decode(processors=...) on a plain model: the loop applies the processor at every step (without it
    the outputs repeat tokens, with it none does), its state selected with the rows, in either executor (the
    fixed-shape one faked: search.fast_here) with the same hypotheses; with a prefix (of no repeated token), after
    the prefix."""
    from attnmt.seq2seq.prefix import Prefixes

    prefixes = Prefixes([[5], [], [7, 8], [], [12], [9, 10, 11]])
    batch, model, settings = random_batch(6, seed=7), tiny("gru-bahdanau"), DecodingConfig(beam=beam)
    args = (model, batch.src, batch.src_lengths, settings)
    assert repeats(searches.decode(*args, n_best=beam))
    found = {}
    for fast in (False, True):
        monkeypatch.setattr(searches, "fast_here", lambda device, model, fast=fast: fast)
        processor = NoRepeats(20)
        found[fast] = searches.decode(*args, n_best=beam, processors=(processor,))
        assert processor.steps_seen > 0 and not repeats(found[fast])
        prefixed = searches.decode(*args, prefixes=prefixes, processors=(NoRepeats(20),))
        assert not repeats(prefixed)
        for tokens, [h, *_] in zip(prefixes.tokens, prefixed):
            assert h.tokens[: len(tokens)] == tokens
    assert_same_hypotheses(found[True], found[False])


@pytest.mark.parametrize("fast", [False, True])
def test_a_prefix_is_a_processor_of_the_loop_not_a_model_wrapper(monkeypatch, fast):
    """decode(prefixes=...) is each search with the loop processor prefix.Prefix on the plain model, whose own
    decode_step the loop calls: greedy, beam and constrained, in either executor (the fixed-shape one faked)."""
    from attnmt.seq2seq import constraints
    from attnmt.seq2seq.prefix import Prefix
    from test_fast_decoding import CONSTRAINTS, PREFIXES

    monkeypatch.setattr(searches, "fast_here", lambda device, model: fast)
    batch, model, settings = random_batch(6, seed=7), tiny("lstm-location"), DecodingConfig()
    steps, decode_step = [], model.decode_step
    monkeypatch.setattr(model, "decode_step", lambda *a: steps.append(1) or decode_step(*a))
    module, constrained = (fast_decoding, fast_decoding) if fast else (decoding, constraints)
    alpha, prefix = settings.length_penalty, (Prefix(PREFIXES, None, batch.src.device),)
    assert not isinstance(prefix[0], torch.nn.Module)
    for options, search in (
        ({"beam": 1}, lambda *a: module.greedy_search(*a, alpha, processors=prefix)),
        ({"beam": 3, "n_best": 2}, lambda *a: module.beam_search(*a, 3, 2, alpha, processors=prefix)),
        (
            {"beam": 3, "constraints": CONSTRAINTS},
            lambda *a: constrained.constrained_beam_search(*a, CONSTRAINTS, 3, 1, alpha, processors=prefix),
        ),
    ):
        steps.clear()
        expected = searches.decode(model, batch.src, batch.src_lengths, settings, prefixes=PREFIXES, **options)
        assert steps  # (the model's own steps)
        limits = decoding.output_limits(batch.src_lengths, settings, PREFIXES, options.get("constraints"))
        assert_same_hypotheses(search(model, batch.src, batch.src_lengths, limits), expected)
        for tokens, hypotheses in zip(PREFIXES.tokens, expected):
            assert all(h.tokens[: len(tokens)] == tokens for h in hypotheses)


def test_one_call_of_decode_step_drives_both_executors(monkeypatch):
    """issue 51: the model's decode_step is called at one place of the searches' code, processors.processed_step,
    which both executors' loops (decoding.run_eager, fast_decoding.run_fixed) call at every step, with loop
    processors or without: no other loop of attnmt.seq2seq calls the model's step (an ensemble's step calls its
    members')."""
    import ast
    from pathlib import Path

    import attnmt
    from test_fast_decoding import CONSTRAINTS

    callers = []
    for path in sorted(Path(attnmt.__file__).parent.rglob("*.py")):
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                calls = [
                    node
                    for node in ast.walk(function)
                    if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "decode_step"
                ]
                if calls and function.name != "decode_step":  # (an ensemble's step: its members')
                    callers.append((path.name, function.name, len(calls)))
    assert callers == [("processors.py", "processed_step", 1)]
    batch, model, settings = random_batch(4, seed=3), tiny("gru-bahdanau"), DecodingConfig(beam=2)
    looped, stepped, decode_step = [], [], model.decode_step
    monkeypatch.setattr(model, "decode_step", lambda *a: stepped.append(1) or decode_step(*a))
    for module in (decoding, fast_decoding):  # (where each executor's loop found it)
        monkeypatch.setattr(module, "processed_step", lambda *a: looped.append(1) or processors.processed_step(*a))
    for fast in (False, True):
        monkeypatch.setattr(searches, "fast_here", lambda device, model, fast=fast: fast)
        for options in ({"beam": 1}, {"beam": 2}, {"beam": 2, "constraints": CONSTRAINTS[:4]}):
            looped.clear()
            stepped.clear()
            searches.decode(model, batch.src, batch.src_lengths, settings, **options)
            assert stepped and len(looped) == len(stepped)
