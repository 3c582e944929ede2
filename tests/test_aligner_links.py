"""Alignment layers trained towards reference word links (the aligner's ``links``): a file of the
training text's links (self-training from a first round of layers), or eflomal's links, each
direction towards its own."""

import pytest
import yaml

from attnmt.api import load
from attnmt.core.errors import AttnmtError
from attnmt.data.corpus import read_corpus
from attnmt.translation.align import align, alignment_scores, format_pharaoh, transposed
from attnmt.translation.aligner import AlignerConfig, load_aligner, load_aligner_config, train_aligner
from test_agreement import both_ways  # noqa: F401 (the fixture: a scramble model each way)
from test_alignment_layer import scrambled


def true_links(source: str, target: str) -> list[tuple[int, int]]:
    """The scramble's links: each upper-case target letter comes from its lower-case source letter."""
    words = source.split()
    return [(words.index(letter.lower()), j) for j, letter in enumerate(target.split())]


def shifted(links, by: int, words: int = 6):
    """Consistently wrong links: each target word linked to the source word ``by`` places further on."""
    return [((i + by) % words, j) for i, j in links]


def agreement_with(folder, aligner, reference, backward: bool = False) -> float:
    """1 - AER of ``aligner``'s links on new pairs against ``reference(source, target)`` links
    (source-target; the backward model aligns the pairs turned around)."""
    pairs, _ = scrambled(30, seed=4)
    translator = load(folder)
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    layer = load_aligner(aligner, translator)
    found = (
        align(translator, targets, sources, aligner=layer)
        if backward
        else align(translator, sources, targets, aligner=layer)
    )
    found = [set(transposed(links)) if backward else set(links) for links in found]
    wanted = [set(reference(s, t)) for s, t in pairs]
    return 1 - alignment_scores(found, wanted, wanted)["aer"]


def train_towards(
    both_ways,  # noqa: F811
    tmp_path,
    links,
    weight: float,
    messages: list,
    steps: int = 60,
    agreement: float = 4.0,
):
    forward, backward = both_ways
    name = f"{links is not None}-{steps}"
    config = AlignerConfig(
        model=forward,
        out=tmp_path / f"f{name}",
        backward_model=backward,
        backward_out=tmp_path / f"b{name}",
        agreement=agreement,
        links=links,
        links_weight=weight,
        steps=steps,
        lexicon_steps=20,
        size=16,
        learning_rate=0.01,
        threads=1,
    )
    train_aligner(config, messages.append)
    return tmp_path / f"f{name}", tmp_path / f"b{name}"


def training_pairs(model_dir):
    return read_corpus(load(model_dir).config.data.train.as_spec())


@pytest.mark.slow  # trains aligners: seconds each
def test_both_layers_learn_the_links_of_a_file(both_ways, tmp_path):  # noqa: F811
    """60 steps are too few for the layers alone; with the links of their training text, both find
    the links (the backward layer reads the file turned around)."""
    corpus = training_pairs(both_ways[0])
    links_file = tmp_path / "train.links"
    pairs = zip(corpus.sources, corpus.targets)
    links_file.write_text("".join(format_pharaoh(true_links(s, t)) + "\n" for s, t in pairs))
    scores, messages = {}, []
    for links in (None, str(links_file)):
        forward, backward = train_towards(both_ways, tmp_path, links, 10.0, messages)
        scores[links is not None] = (
            agreement_with(both_ways[0], forward, true_links),
            agreement_with(both_ways[1], backward, true_links, backward=True),
        )
    assert any("towards the links of" in m and "(weight 10.0)" in m for m in messages), messages
    assert any("per linked word" in m for m in messages), messages
    # (measured: 1.0 and 1.0 with the links; without, 0.45 and 0.51 on an AVX512 EPYC, 0.80 and
    # 0.82 on an AVX2 one: that the file's links score higher holds on every machine)
    assert min(scores[True]) > max(scores[False]), scores
    # the backward layer's config records the file as its partner's: target-source
    assert load_aligner_config(backward / "aligner.yaml").links_reversed
    assert not load_aligner_config(forward / "aligner.yaml").links_reversed


@pytest.mark.slow  # trains aligners: seconds each
def test_a_reversed_links_file_is_read_turned_around(both_ways, tmp_path):  # noqa: F811
    corpus = training_pairs(both_ways[0])
    links_file = tmp_path / "reversed.links"
    links_file.write_text(
        "".join(format_pharaoh(transposed(true_links(s, t))) + "\n" for s, t in zip(corpus.sources, corpus.targets))
    )
    config = AlignerConfig(
        model=both_ways[0],
        out=tmp_path / "f",
        links=str(links_file),
        links_reversed=True,
        links_weight=10.0,
        steps=60,
        lexicon_steps=20,
        size=16,
        learning_rate=0.01,
        threads=1,
    )
    train_aligner(config, lambda m: None)
    # measured: 1.0; read the right way round, these links would be wrong ones
    assert agreement_with(both_ways[0], tmp_path / "f", true_links) > 0.9


@pytest.mark.slow  # trains aligners: seconds each
def test_links_eflomal_trains_each_direction_towards_its_own(both_ways, tmp_path, monkeypatch):  # noqa: F811
    """eflomal's forward links for the forward layer, its backward links (turned) for the backward
    layer: here two different wrong alignments (each target word linked to the source word one,
    or two, places after its own) stand in for eflomal's two directions."""
    calls = []

    def fake_eflomal(source, target, forward, backward, model=3):  # (eflomal's files in, its links files out)
        sources, targets = source.read_text().splitlines(), target.read_text().splitlines()
        calls.append(len(sources))
        for path, by in ((forward, 1), (backward, 2)):
            path.write_text(
                "".join(format_pharaoh(shifted(true_links(s, t), by)) + "\n" for s, t in zip(sources, targets))
            )

    monkeypatch.setattr("attnmt.translation.statistical_align.align_files", fake_eflomal)
    messages = []
    forward, backward = train_towards(both_ways, tmp_path, "eflomal", 10.0, messages, steps=150, agreement=0.0)
    assert calls == [len(training_pairs(both_ways[0]).sources)]
    assert any("with eflomal" in m for m in messages), messages
    # Each layer agrees with its own direction's links far more than with the other's (which share
    # no link with them): measured 0.89-0.98 against its own on AMD EPYCs, 0.69 on an Intel
    # Xeon, 0 against the other's. The comparison, not a level, is what this test is about.
    for folder, aligner, own, other, turned in (
        (both_ways[0], forward, 1, 2, False),
        (both_ways[1], backward, 2, 1, True),
    ):
        mine, theirs = (
            agreement_with(folder, aligner, lambda s, t, by=by: shifted(true_links(s, t), by), backward=turned)
            for by in (own, other)
        )
        assert mine > 0.5 and mine > theirs + 0.4, (own, mine, theirs)


def test_a_links_file_must_have_a_line_per_training_line(both_ways, tmp_path):  # noqa: F811
    links_file = tmp_path / "short.links"
    links_file.write_text("0-0\n")
    config = AlignerConfig(model=both_ways[0], out=tmp_path / "f", links=str(links_file), steps=1, threads=1)
    with pytest.raises(
        AttnmtError,
        match=r"short.links: 1 lines of alignment links, but .*train.tsv has 300 lines: "
        r"links needs one line per line",
    ):
        train_aligner(config, lambda m: None)
    assert not (tmp_path / "f").exists()


def test_links_are_read_from_the_config_files_folder(tmp_path):
    path = tmp_path / "aligner.yaml"
    path.write_text(yaml.safe_dump({"model": "m", "links": "train.links", "links_weight": 0.5}))
    config = load_aligner_config(path)
    assert config.links == str((tmp_path / "train.links").resolve()) and config.links_weight == 0.5
    path.write_text(yaml.safe_dump({"model": "m", "links": "eflomal"}))
    assert load_aligner_config(path).links == "eflomal"
    path.write_text(yaml.safe_dump({"model": "m", "links": "x", "links_weight": -1}))
    with pytest.raises(AttnmtError, match="links_weight: Input should be greater than or equal to 0"):
        load_aligner_config(path)
