"""Sampling instead of search: the draws follow the model's distribution as temperature, top_k and
top_p shape it, a seed repeats them, and `attnmt translate --sample` and `translate(sampling=...)`
give them."""

import math

import pytest
import torch

from attnmt.api import load
from attnmt.cli import main
from attnmt.core.config import MIN_SHAPING, Sampling
from attnmt.seq2seq.decoding import sampler
from attnmt.training import train
from conftest import random_strings, toy_config

PROBS = torch.tensor([0.5, 0.25, 0.15, 0.1, 0.0])  # one step's distribution; the last token is impossible


def frequencies(sampling: Sampling, draws: int = 40_000) -> torch.Tensor:
    rows = PROBS.log().expand(draws, -1)
    picked = sampler(sampling, torch.Generator().manual_seed(0))(rows)
    return torch.bincount(picked, minlength=len(PROBS)).float() / draws


@pytest.mark.parametrize(
    "sampling, expected",
    [
        (Sampling(), PROBS),
        (Sampling(temperature=0.5), PROBS**2 / (PROBS**2).sum()),  # p^(1/T), renormalized
        (Sampling(top_k=2), torch.tensor([2 / 3, 1 / 3, 0, 0, 0])),
        (Sampling(top_p=0.7), torch.tensor([2 / 3, 1 / 3, 0, 0, 0])),  # 0.5 < 0.7: the second is needed too
        (Sampling(top_p=0.5), torch.tensor([1.0, 0, 0, 0, 0])),  # the first alone reaches 0.5
        (Sampling(top_k=3, top_p=0.9), torch.tensor([0.5, 0.25, 0.15, 0, 0]) / 0.9),
    ],
    ids=["plain", "temperature", "top-k", "top-p", "top-p-one", "both"],
)
def test_draws_follow_the_shaped_distribution(sampling, expected):
    assert torch.allclose(frequencies(sampling), expected, atol=0.01)


@pytest.fixture(scope="module")
def model(tmp_path_factory):  # (the tests that use it are marked slow: it trains)
    folder = tmp_path_factory.mktemp("sampling")
    pairs = [(s, s[::-1]) for s in random_strings(300, 3, 8, seed=1)]
    config = toy_config(folder, pairs, training={"max_steps": 60, "validate_every": 1000, "threads": 1})
    train(config, log=lambda m: None, progress=False)
    return load(config.experiment_dir)


TEXTS = random_strings(12, 3, 8, seed=9)


@pytest.mark.slow
def test_top_k_1_is_greedy_search_with_its_scores(model):
    """Also at another temperature: a draw's score is the model's log-probability of it (over the
    length penalty), not that of the shaped distribution."""
    greedy = model.translate(TEXTS, beam=1)
    for sampling in ({"top_k": 1}, {"top_k": 1, "temperature": 2.0}):
        drawn = model.translate(TEXTS, sampling=sampling)
        assert [t.text for t in drawn] == [t.text for t in greedy]
        assert [t.score for t in drawn] == pytest.approx([t.score for t in greedy])


@pytest.mark.slow
def test_a_seed_repeats_the_draws_and_another_seed_does_not(model):
    def drawn(seed):
        return [t.text for t in model.translate(TEXTS, sampling={"seed": seed, "temperature": 1.5})]

    assert drawn(1) == drawn(1)
    assert drawn(1) != drawn(2)
    assert drawn(1) != [t.text for t in model.translate(TEXTS, beam=1)]


@pytest.mark.slow
def test_sampling_takes_no_beam(model):
    with pytest.raises(ValueError, match="beam must be 1"):
        model.translate(TEXTS, beam=5, sampling={})


@pytest.mark.slow
def test_translate_command_samples(model, tmp_path, capsys):
    (tmp_path / "in").write_text("\n".join(TEXTS) + "\n")
    command = [
        "translate",
        str(model.folder),
        "-i",
        str(tmp_path / "in"),
        "--sample",
        "--seed",
        "4",
        "--temperature",
        "1.5",
        "--top-k",
        "5",
        "--top-p",
        "0.95",
    ]
    assert main(command) == 0
    first = capsys.readouterr().out
    assert main(command) == 0
    assert capsys.readouterr().out == first
    expected = model.translate(TEXTS, sampling=Sampling(seed=4, temperature=1.5, top_k=5, top_p=0.95))
    assert first.splitlines() == [t.text for t in expected]


@pytest.mark.slow
@pytest.mark.parametrize(
    "options, message",
    [
        (["--seed", "1"], "--seed shape sampling: give --sample too"),
        (["--sample", "--beam", "5"], "takes no --beam or --n-best"),
        (["--sample", "--n-best", "2", "--beam", "2"], "takes no --beam or --n-best"),
    ],
)
def test_translate_command_says_what_does_not_go_together(model, tmp_path, capsys, options, message):
    (tmp_path / "in").write_text("abc\n")
    assert main(["translate", str(model.folder), "-i", str(tmp_path / "in"), *options]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_bad_sampling_values_are_refused(model, capsys):
    with pytest.raises(SystemExit):
        main(["translate", str(model.folder), "--sample", "--top-p", "0"])
    assert "probability in (0, 1]" in capsys.readouterr().err
    with pytest.raises(ValueError, match="top_p"):
        model.translate(TEXTS, sampling={"top_p": 1.5})
    assert math.isclose(Sampling().top_p, 1.0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "options, message",
    [
        (["--sample", "--temperature", "1e-300"], "--temperature 1e-300: Input should be greater than or equal to"),
        (["--sample", "--temperature", "inf"], "--temperature inf: Input should be a finite number"),
        (["--sample", "--top-p", "1e-300"], "--top-p 1e-300: Input should be greater than or equal to"),
        (["--sample", "--seed", "9" * 23], "--seed 99999999999999999999999: Input should be less than or equal to"),
        (["--length-penalty", "1e308"], "decoding.length_penalty: Input should be less than or equal to 10"),
        (["--length-penalty", "nan"], "decoding.length_penalty: Input should be a finite number"),
    ],
)
def test_out_of_range_sampling_and_penalty_options_are_one_line_errors(model, tmp_path, capsys, options, message):
    """Each was a traceback: NaN in the draw, torch's seed overflow, an OverflowError of the penalty."""
    (tmp_path / "in").write_text("abc\n")
    assert main(["translate", str(model.folder), "-i", str(tmp_path / "in"), *options]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_at_the_smallest_temperature_and_top_p_sampling_is_greedy_and_finite():
    """MIN_SHAPING is within the float32 arithmetic of the draw (1e-45 and 1e-46 were not): every row,
    even one of very low log-probabilities or with impossible tokens, draws its most probable token."""
    rows = torch.tensor([[-0.01, -5.0, -math.inf], [-80.0, -80.5, -math.inf], [-3000.0, -2999.9, -4000.0]])
    for sampling in (Sampling(temperature=MIN_SHAPING), Sampling(top_p=MIN_SHAPING)):
        assert sampler(sampling, torch.Generator().manual_seed(0))(rows).tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="temperature"):
        Sampling(temperature=MIN_SHAPING / 10)
    with pytest.raises(ValueError, match="seed"):
        Sampling(seed=2**63)
