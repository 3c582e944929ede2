"""The alignment layer: its equation on hand-made tensors, training it on a frozen model of a task
whose links are known, its folder and config, and attnmt align --aligner."""

import random
import shutil

import numpy as np
import pytest
import torch
import yaml

from attnmt.api import load
from attnmt.cli import main
from attnmt.core.errors import AttnmtError
from attnmt.training import train
from attnmt.translation.align import align, align_both_ways, alignment_matrices, alignment_scores, format_pharaoh
from attnmt.seq2seq.links import output_links
from attnmt.translation.aligner import AlignerConfig, OutputAligner, load_aligner, load_aligner_config, train_aligner
from attnmt.data.subwords import EOS, PAD
from attnmt.translation.alignment_layer import AlignmentLayer, explaining_pieces
from conftest import toy_config
from test_guided_alignment import LETTERS


def one_pair():
    """The frozen model's features of one pair: three decoder states, four encoder states (two
    source words, "</s>", padding), its attention, and the pieces: two target words, then "</s>"."""
    states, memory = torch.randn(1, 3, 3), torch.randn(1, 4, 4)
    attention = torch.softmax(torch.randn(1, 3, 4), dim=-1)
    src, targets = torch.tensor([[4, 5, EOS, PAD]]), torch.tensor([[6, 7, EOS]])
    return states, memory, torch.tensor([[True, True, True, False]]), attention, src, targets


def test_output_is_the_prior_weighted_lexicon_and_the_alignment_its_posterior():
    torch.manual_seed(0)
    layer = AlignmentLayer(state_size=3, memory_size=4, src_vocab_size=8, tgt_vocab_size=8, size=2)
    with torch.no_grad():
        layer.beta.fill_(0.7)
    states, memory, mask, attention, src, targets = one_pair()
    log_output, alignment = layer(states, memory, mask, attention, src, targets)
    scores = layer.W_q(states) @ layer.W_k(memory).transpose(1, 2) / 2**0.5 + 0.7 * attention.log()
    prior = scores[0, :, :2].softmax(-1)  # a word is explained by the two source words ...
    lexicon = layer.W_o(torch.tanh(layer.E(src[0]))).log_softmax(-1).exp()  # (S,V)
    for t in range(2):
        joint = prior[t] * lexicon[:2, targets[0, t]]
        torch.testing.assert_close(log_output[0, t], joint.sum().log())
        torch.testing.assert_close(alignment[0, t, :2], joint / joint.sum())
    assert torch.equal(alignment[0, :2, 2:], torch.zeros(2, 2))  # ... not by "</s>" nor padding
    # "</s>" by "</s>"
    torch.testing.assert_close(log_output[0, 2], lexicon[2, EOS].log())
    assert torch.equal(alignment[0, 2], torch.tensor([0.0, 0.0, 1.0, 0.0]))
    # the first steps of training: a uniform prior, whatever the states and the attention
    log_output, _ = layer(states, memory, mask, attention, src, targets, uniform_prior=True)
    torch.testing.assert_close(log_output[0, 0], lexicon[:2, 6].mean().log())


def test_the_prior_adds_a_learnt_bias_for_the_distance_from_the_diagonal():
    torch.manual_seed(0)
    layer = AlignmentLayer(state_size=3, memory_size=4, src_vocab_size=8, tgt_vocab_size=8, size=2, diagonal_buckets=5)
    states, memory, mask, attention, src, targets = one_pair()
    before, _ = layer(states, memory, mask, attention, src, targets)
    with torch.no_grad():
        layer.D.copy_(torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0]))
    after, alignment = layer(states, memory, mask, attention, src, targets)
    # m = n = 2: (i + 1/2)/2 - (t + 1/2)/2 is 0 on the diagonal (bucket 2), +1/2 above it (3), -1/2 below (1)
    scores = layer.W_q(states) @ layer.W_k(memory).transpose(1, 2) / 2**0.5 + layer.beta * attention.log()
    prior = (scores[0, :2, :2] + torch.tensor([[2.0, 3.0], [1.0, 2.0]])).softmax(-1)
    lexicon = layer.W_o(torch.tanh(layer.E(src[0]))).log_softmax(-1).exp()
    for t in range(2):
        joint = prior[t] * lexicon[:2, targets[0, t]]
        torch.testing.assert_close(after[0, t], joint.sum().log())
        torch.testing.assert_close(alignment[0, t, :2], joint / joint.sum())
    assert not torch.allclose(before[0, :2], after[0, :2])
    torch.testing.assert_close(before[0, 2], after[0, 2])  # "</s>" by "</s>", wherever it lies


def test_a_null_word_explains_what_no_source_word_wrote():
    torch.manual_seed(0)
    layer = AlignmentLayer(state_size=3, memory_size=4, src_vocab_size=8, tgt_vocab_size=8, size=2, null_prior=0.2)
    with torch.no_grad():
        layer.e_0.copy_(torch.tensor([1.0, -2.0]))
    states, memory, mask, attention, src, targets = one_pair()
    log_output, alignment = layer(states, memory, mask, attention, src, targets)
    scores = layer.W_q(states) @ layer.W_k(memory).transpose(1, 2) / 2**0.5 + layer.beta * attention.log()
    prior = scores[0, :, :2].softmax(-1)
    lexicon = layer.W_o(torch.tanh(layer.E(src[0]))).log_softmax(-1).exp()
    null_lexicon = layer.W_o(torch.tanh(layer.e_0)).log_softmax(-1).exp()
    for t in range(2):
        words = 0.8 * prior[t] * lexicon[:2, targets[0, t]]
        null = 0.2 * null_lexicon[targets[0, t]]
        torch.testing.assert_close(log_output[0, t], (words.sum() + null).log())
        torch.testing.assert_close(alignment[0, t, :2], words / (words.sum() + null))  # sums to 1 - r_t,0
    torch.testing.assert_close(log_output[0, 2], lexicon[2, EOS].log())  # "</s>" by "</s>" alone
    assert torch.equal(alignment[0, 2], torch.tensor([0.0, 0.0, 1.0, 0.0]))


def test_a_jump_term_reads_where_the_previous_piece_went():
    torch.manual_seed(0)
    layer = AlignmentLayer(state_size=3, memory_size=4, src_vocab_size=8, tgt_vocab_size=8, size=2, jump_width=1)
    with torch.no_grad():
        layer.J.copy_(torch.tensor([-1.0, 0.5, 2.0]))  # J[-1], J[0], J[+1]
    mask = torch.tensor([[True, True, True, False]])  # two source words, "</s>", padding
    first = torch.tensor([[[0.2, 0.6, 0.0, 0.0], [0.9, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]])  # rows: t
    jumps = layer.jump_scores(first, mask)
    J = {-1: -1.0, 0: 0.5, 1: 2.0}

    def expected(q, i):  # q: where the previous piece went, over the places -1, 0, 1
        return np.log(sum(weight * np.exp(J[max(-1, min(1, i - j))]) for j, weight in q.items()))

    q_of = [{-1: 1.0}, {0: 0.25, 1: 0.75}, {0: 1.0}]  # first from place -1; then the previous row, renormalised
    for t, q in enumerate(q_of):
        for i in range(2):
            assert jumps[0, t, i].item() == pytest.approx(expected(q, i), rel=1e-5)
    states, memory, mask, attention, src, targets = one_pair()
    log_output, _ = layer(states, memory, mask, attention, src, targets)
    log_output.sum().backward()
    assert layer.J.grad.abs().sum() > 0  # learnt through the second pass
    uniform, _ = layer(states, memory, mask, attention, src, targets, uniform_prior=True)
    torch.testing.assert_close(
        uniform[0, 0], layer.W_o(torch.tanh(layer.E(src[0, :2]))).log_softmax(-1).exp()[:, 6].mean().log()
    )  # no jumps while the prior is held uniform


def test_diagonal_buckets_count_pieces_without_eos_and_padding():
    from attnmt.translation.alignment_layer import diagonal_distance_buckets

    mask = torch.tensor([[True, True, True, True, True], [True, True, True, False, False]])  # m = 4 and 2
    targets = torch.tensor([[6, 7, EOS], [6, EOS, PAD]])  # n = 2 and 1
    buckets = diagonal_distance_buckets(mask, targets, 9)
    assert buckets.shape == (2, 3, 5)
    # (i + 1/2)/m - (t + 1/2)/n mapped from [-1, 1] to 0..8, clamped at the ends
    assert buckets[0, 0].tolist() == [round(((i + 0.5) / 4 - 0.25 + 1) * 4) for i in range(5)]
    assert buckets[1, 0, :2].tolist() == [round(((i + 0.5) / 2 - 0.5 + 1) * 4) for i in range(2)]
    assert buckets.min() >= 0 and buckets.max() <= 8


def test_a_source_of_eos_alone_explains_every_target_piece():
    mask = torch.tensor([[True, False, False], [True, True, True]])
    allowed = explaining_pieces(mask, torch.tensor([[6, EOS], [6, EOS]]))
    assert allowed.tolist() == [
        [[True, False, False], [True, False, False]],
        [[True, True, False], [False, False, True]],
    ]


def test_the_lexicon_sees_only_its_piece():
    """Two sources that differ in one piece: the other pieces' lexicon rows are the same."""
    layer = AlignmentLayer(3, 4, 6, 5, 2)
    rows = [layer.W_o(torch.tanh(layer.E(torch.tensor(src)))) for src in ([4, 5], [4, 1])]
    torch.testing.assert_close(rows[0][0], rows[1][0])


ORDER = [5, 2, 0, 4, 1, 3]


def test_a_lookahead_reads_where_the_next_piece_went():
    torch.manual_seed(0)
    layer = AlignmentLayer(
        state_size=3, memory_size=4, src_vocab_size=8, tgt_vocab_size=8, size=2, jump_width=2, lookahead=True
    )
    with torch.no_grad():  # J left at 0: the jump term adds log 1 = 0, and only the lookahead is left
        layer.K.copy_(torch.tensor([-2.0, -1.0, 0.5, 2.0, 1.0]))  # K[-2..2]: the next piece goes one place on
    mask = torch.tensor([[True, True, True, False]])  # two source words, "</s>", padding
    first = torch.tensor([[[0.2, 0.6, 0.0, 0.0], [0.9, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]])  # rows: t
    scores = layer.jump_scores(first, mask)
    K = {-2: -2.0, -1: -1.0, 0: 0.5, 1: 2.0, 2: 1.0}

    def expected(q, i):  # q: where the next piece went, over the source pieces
        return np.log(sum(weight * np.exp(K[max(-2, min(2, j - i))]) for j, weight in q.items()))

    q_of = [{0: 1.0}, {2: 1.0}]  # the next row, renormalised; the last word's next is "</s>", at place 2
    for t, q in enumerate(q_of):
        for i in range(3):
            assert scores[0, t, i].item() == pytest.approx(expected(q, i), rel=1e-5)
    assert scores[0, 1, 1] > scores[0, 1, 0]  # the last word, just before "</s>"
    assert torch.equal(scores[0, 2, :3], scores[0, 2, :1].expand(3))  # "</s>" has no next: no preference
    states, memory, mask, attention, src, targets = one_pair()
    log_output, _ = layer(states, memory, mask, attention, src, targets)
    log_output.sum().backward()
    assert layer.K.grad.abs().sum() > 0  # learnt through the second pass
    with pytest.raises(ValueError, match="jump_width"):
        AlignmentLayer(state_size=3, memory_size=4, src_vocab_size=8, tgt_vocab_size=8, size=2, lookahead=True)


def scrambled(n: int, seed: int):
    """Six different letters, and the same letters in upper case in the order of a fixed scramble:
    target word j comes from source word ORDER[j]. (Different letters: a repeated letter is told
    apart by its place alone, which these small models hardly learn.)"""
    rng = random.Random(seed)
    pairs, links = [], []
    for _ in range(n):
        words = rng.sample(LETTERS, 6)
        pairs.append((" ".join(words), " ".join(words[i].upper() for i in ORDER)))
        links.append([(i, j) for j, i in enumerate(ORDER)])
    return pairs, links


@pytest.fixture(scope="module")
def scramble(tmp_path_factory):
    """A translation model of scrambled letters, whose Luong attention collapses onto one source
    word (as in test_guided_alignment), one piece per word, and an aligner trained on it."""
    folder = tmp_path_factory.mktemp("scramble")
    pairs, _ = scrambled(400, seed=5)
    config = toy_config(
        folder,
        pairs,
        model={"attention": "luong-general"},
        data={"subwords": {"type": "word", "vocab_size": 40, "joint": True}},
        training={"max_steps": 200, "validate_every": 1000, "threads": 1},
    )
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    aligner = AlignerConfig(
        model=config.experiment_dir, steps=150, lexicon_steps=50, size=32, learning_rate=0.01, threads=1
    )
    messages = []
    return config.experiment_dir, train_aligner(aligner, messages.append), messages


def test_an_aligner_finds_the_links_that_the_attention_misses(scramble):
    model_dir, aligner_dir, messages = scramble
    assert aligner_dir == model_dir / "aligner"
    assert any("training a layer of size 32 on 400 pairs" in m for m in messages), messages
    test_pairs, test_links = scrambled(60, seed=4)
    sources, targets = [s for s, _ in test_pairs], [t for _, t in test_pairs]
    gold = [set(links) for links in test_links]
    translator = load(model_dir)
    attention = alignment_scores(align(translator, sources, targets), gold, gold)["aer"]
    layer = load_aligner(aligner_dir, translator)
    aligned = alignment_scores(align(translator, sources, targets, aligner=layer), gold, gold)["aer"]
    # measured: 0 % with the aligner, 89 % with the attention
    assert aligned < 0.05 and attention > aligned + 0.5, (aligned, attention)


def loaded(scramble, n: int, seed: int):
    """The scramble model, its aligner, and the sources and targets of ``n`` new pairs."""
    model_dir, aligner_dir, _ = scramble
    pairs, _ = scrambled(n, seed=seed)
    translator = load(model_dir)
    return translator, load_aligner(aligner_dir, translator), [s for s, _ in pairs], [t for _, t in pairs]


def test_an_aligners_links_are_read_with_a_threshold_by_default(scramble):
    """The better reading of each on E4: argmax for the attention, threshold 0.5 for a posterior."""
    translator, layer, sources, targets = loaded(scramble, 8, seed=16)
    matrices = alignment_matrices(translator, sources, targets, aligner=layer)
    by_default = align(translator, sources, targets, aligner=layer)
    assert by_default == align(translator, sources, targets, aligner=layer, method="threshold", threshold=0.5)
    assert by_default == [sorted((int(i), int(j)) for j, i in zip(*np.nonzero(m >= 0.5))) for m in matrices]
    assert align(translator, sources, targets) == align(translator, sources, targets, method="argmax")
    [t] = translator.translate(sources[:1], align=True)
    assert t.alignment == align(translator, sources[:1], [t.text], aligner=layer, method="threshold")[0]


def test_align_command_reads_the_aligner(scramble, tmp_path, capsys):
    model_dir, aligner_dir, _ = scramble
    pairs, _ = scrambled(5, seed=9)
    (tmp_path / "s").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "t").write_text("".join(t + "\n" for _, t in pairs))
    files = ["--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t")]
    assert main(["align", str(model_dir), *files, "--aligner", str(aligner_dir), "-o", str(tmp_path / "a")]) == 0
    translator = load(model_dir)
    expected = align(
        translator, [s for s, _ in pairs], [t for _, t in pairs], aligner=load_aligner(aligner_dir, translator)
    )
    assert (tmp_path / "a").read_text().splitlines() == [format_pharaoh(links) for links in expected]
    for extra, message in (
        (["--shift"], "shift, layer, heads and full context are for the attention"),
        (["--full-context"], "shift, layer, heads and full context are for the attention"),
        (["--backward-aligner", str(aligner_dir)], "give --backward too"),
    ):
        assert main(["align", str(model_dir), *files, "--aligner", str(aligner_dir), *extra]) == 2
        assert message in capsys.readouterr().err


def test_both_directions_take_an_aligner_each(scramble):
    translator, layer, sources, targets = loaded(scramble, 5, seed=9)
    # the same model both ways round is enough to see that each direction reads its own aligner
    both = align_both_ways(translator, translator, sources, sources, "intersection", (layer, None))
    forward = align(translator, sources, sources, aligner=layer)
    backward = align(translator, sources, sources)
    assert both == [sorted(set(f) & {(i, j) for j, i in b}) for f, b in zip(forward, backward)]
    assert targets  # (the pairs have targets; aligning sources with themselves keeps the vocabulary)


def test_an_aligner_is_used_only_with_the_weights_it_was_trained_on(scramble, tmp_path):
    model_dir, aligner_dir, _ = scramble
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    weights = other / "best.safetensors"
    with torch.no_grad():
        translator = load(other)
        next(translator.model.parameters()).add_(1.0)
    from attnmt.core.checkpoint import save_model

    save_model(translator.model, weights)
    with pytest.warns(UserWarning, match=r"word links from the attention, not from the aligner: .*not on those of"):
        translator = load(other)  # the copied folder's aligner is not for these weights
    assert translator.aligner is None
    with pytest.raises(AttnmtError, match=r"trained on the weights of .*, not on those of .*other/best.safetensors"):
        load_aligner(aligner_dir, translator)
    with pytest.raises(AttnmtError, match=r"not an aligner folder"):
        load_aligner(tmp_path, load(model_dir))


def test_config_file_names_its_fields_and_reads_paths_from_its_folder(tmp_path):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "aligner.yaml"
    path.write_text(yaml.safe_dump({"model": "../runs/en-fr", "train": {"tsv": "pairs.tsv"}, "steps": 10}))
    config = load_aligner_config(path)
    assert config.model == (tmp_path / "runs" / "en-fr").resolve()
    assert config.train.tsv == (tmp_path / "conf" / "pairs.tsv").resolve()
    assert config.folder == config.model / "aligner"
    path.write_text(yaml.safe_dump({"model": "m", "stesp": 10}))
    with pytest.raises(AttnmtError, match=r"aligner.yaml: invalid configuration\n  stesp: unknown field"):
        load_aligner_config(path)
    path.write_text(yaml.safe_dump({"model": "m", "size": 0}))
    with pytest.raises(AttnmtError, match=r"size: Input should be greater than 0"):
        load_aligner_config(path)
    path.write_text(yaml.safe_dump({"model": "nowhere"}))
    with pytest.raises(AttnmtError, match=r"model: .*nowhere: no such folder"):
        train_aligner(load_aligner_config(path), log=lambda m: None)


def test_an_aligner_with_a_lookahead_is_saved_and_loaded_with_it(scramble, tmp_path):
    model_dir, _, _ = scramble
    config = AlignerConfig(
        model=model_dir, out=tmp_path / "look", steps=3, lexicon_steps=1, size=8, jump_width=2, threads=1
    )
    assert config.jump_lookahead  # the default
    layer = load_aligner(train_aligner(config, log=lambda m: None), load(model_dir))
    assert layer.K is not None and layer.K.shape == (5,) and layer.K.abs().sum() > 0
    config = config.model_copy(update={"out": tmp_path / "ahead", "jump_lookahead": False})
    assert load_aligner(train_aligner(config, log=lambda m: None), load(model_dir)).K is None
    no_jumps = AlignerConfig(
        model=model_dir, out=tmp_path / "still", steps=3, lexicon_steps=1, size=8, jump_width=0, threads=1
    )
    layer = load_aligner(train_aligner(no_jumps, log=lambda m: None), load(model_dir))
    assert layer.J is None and layer.K is None  # with no jumps, no lookahead by default
    assert not load_aligner_config(tmp_path / "still" / "aligner.yaml").jump_lookahead  # and its folder says so
    path = tmp_path / "aligner.yaml"
    path.write_text(yaml.safe_dump({"model": "m", "jump_width": 0, "jump_lookahead": True}))
    with pytest.raises(AttnmtError, match=r"aligner.yaml: invalid configuration\n.*jump_lookahead .* jump_width > 0"):
        load_aligner_config(path)


def test_translate_reports_the_aligners_links_of_its_output(scramble, tmp_path, capsys):
    model_dir, aligner_dir, _ = scramble
    pairs, _ = scrambled(4, seed=11)
    src = tmp_path / "s"
    src.write_text("".join(s + "\n" for s, _ in pairs))
    argv = ["translate", str(model_dir), "-i", str(src), "--beam", "2", "--n-best", "2"]
    assert main([*argv, "--report-align", "--aligner", str(aligner_dir), "-o", str(tmp_path / "out")]) == 0
    lines = [line.split(" ||| ") for line in (tmp_path / "out").read_text().splitlines()]
    assert len(lines) == 8  # two candidates of each
    translator = load(model_dir)
    sources = [pairs[int(number)][0] for number, _, _, _ in lines]
    expected = align(
        translator, sources, [text for _, text, _, _ in lines], aligner=load_aligner(aligner_dir, translator)
    )
    assert [links for *_, links in lines] == [format_pharaoh(pair) for pair in expected]
    assert main([*argv, "--aligner", str(aligner_dir)]) == 2
    assert "give one of them" in capsys.readouterr().err


def test_a_model_folders_aligner_gives_its_translations_links(scramble):
    """MODEL/aligner, trained on the weights loaded: Translation.alignment, translate(align=True)
    and align_outputs read it; without it (aligner None) the attention."""
    model_dir, aligner_dir, _ = scramble
    translator = load(model_dir)
    assert isinstance(translator.aligner, OutputAligner) and translator.aligner.folder == aligner_dir
    pairs, _ = scrambled(6, seed=13)
    sources = [s for s, _ in pairs] + [" "]
    layer = load_aligner(aligner_dir, translator)
    translations = translator.translate(sources, beam=2, n_best=2, align=True)
    for t in translations[:-1]:
        expected = align(translator, [t.source] * 2, [c.text for c in t.candidates], aligner=layer)
        assert [c.alignment for c in t.candidates] == expected
    assert translations[-1].alignment == [] and translations[-1].best.alignment == []  # no source words
    lazy = translator.translate(sources[:3], beam=2, n_best=2)
    assert [t.best.alignment for t in lazy] == [None] * 3  # found when asked for
    assert [t.alignment for t in lazy] == [t.candidates[0].alignment for t in translations[:3]]
    translator.aligner = None
    attention = translator.translate(sources[:-1], beam=2)
    assert [t.alignment for t in attention] == [output_links(t.attention, t.source_tokens, t.tokens) for t in attention]
    assert [t.alignment for t in attention] != [t.alignment for t in translations[:-1]]  # (it collapses)


def test_the_server_links_words_with_the_model_folders_aligner(scramble):
    from attnmt.serve import create_app
    from conftest import local_client

    model_dir, aligner_dir, _ = scramble
    pairs, _ = scrambled(3, seed=14)
    translator = load(model_dir)
    with local_client(create_app([model_dir])) as client:
        assert client.get("/models").json()[0]["word_links"] == "aligner"
        body = client.post("/translate", json={"text": [s for s, _ in pairs], "beam": 2, "align": True}).json()
    texts = [t["candidates"][0]["text"] for t in body["translations"]]
    expected = align(translator, [s for s, _ in pairs], texts, aligner=load_aligner(aligner_dir, translator))
    assert [[tuple(x) for x in t["candidates"][0]["alignment"]] for t in body["translations"]] == expected


def test_translate_command_reads_the_folders_aligner_unless_told_none(scramble, tmp_path):
    model_dir, aligner_dir, _ = scramble
    pairs, _ = scrambled(4, seed=15)
    src = tmp_path / "s"
    src.write_text("".join(s + "\n" for s, _ in pairs))
    translator = load(model_dir)
    written = {}
    for aligner in (None, "none"):
        out = tmp_path / f"out-{aligner}"
        assert (
            main(
                [
                    "translate",
                    str(model_dir),
                    "-i",
                    str(src),
                    "--align-file",
                    str(out),
                    "-o",
                    str(tmp_path / "o"),
                    *(["--aligner", aligner] if aligner else []),
                ]
            )
            == 0
        )
        written[aligner] = out.read_text().splitlines()
    outputs = (tmp_path / "o").read_text().splitlines()
    layer = load_aligner(aligner_dir, translator)
    assert written[None] == [
        format_pharaoh(links) for links in align(translator, [s for s, _ in pairs], outputs, aligner=layer)
    ]
    translator.aligner = None
    assert written["none"] == [format_pharaoh(t.alignment) for t in translator.translate([s for s, _ in pairs])]


def test_mean_symmetrization_keeps_the_links_both_directions_half_believe_in(scramble):
    model_dir, aligner_dir, _ = scramble
    pairs, _ = scrambled(5, seed=9)
    sources = [s for s, _ in pairs]
    translator = load(model_dir)
    layer = load_aligner(aligner_dir, translator)
    there = alignment_matrices(translator, sources, sources, aligner=layer)
    back = alignment_matrices(translator, sources, sources)  # (a model of its own source: the vocabulary fits)
    for threshold in (0.5, 0.2):
        expected = [
            sorted({(int(i), int(j)) for j, i in zip(*np.nonzero((f + b.T) / 2 >= threshold))})
            for f, b in zip(there, back)
        ]
        assert (
            align_both_ways(translator, translator, sources, sources, "mean", (layer, None), threshold=threshold)
            == expected
        )
    assert any(expected)  # (at 0.2)
    union = [
        sorted(set(f) | {(i, j) for j, i in b})
        for f, b in zip(align(translator, sources, sources, aligner=layer), align(translator, sources, sources))
    ]
    assert expected != union  # not a symmetrization of hard links
    with pytest.raises(AttnmtError, match=r"threshold must be in \(0, 1\]"):
        align_both_ways(translator, translator, sources, sources, "mean", threshold=0)


def test_a_model_without_attention_gets_an_aligner_too(tmp_path):
    """Its prior is the layer's own (the model has no attention to start from)."""
    pairs, _ = scrambled(40, seed=12)
    config = toy_config(tmp_path, pairs, model={"attention": "none"}, training={"max_steps": 2, "threads": 1})
    train(config, log=lambda m: None, progress=False)
    folder = train_aligner(
        AlignerConfig(
            model=config.experiment_dir,
            steps=2,
            lexicon_steps=1,
            size=8,
            threads=1,
            diagonal_buckets=9,
            null_prior=0.3,
            jump_width=3,
        ),
        log=lambda m: None,
    )
    translator = load(config.experiment_dir)
    layer = load_aligner(folder, translator)
    [links] = align(translator, pairs[0][:1], pairs[0][1:], aligner=layer, method="argmax")
    assert len(links) == 6  # argmax: one link per target word
    assert layer.D.shape == (9,) and layer.D.abs().sum() > 0  # trained (one step after the uniform one), and kept
    assert float(layer.p0) == pytest.approx(0.3) and layer.e_0.abs().sum() > 0
    assert layer.J.shape == (7,) and layer.J.abs().sum() > 0


def test_links_self_can_read_the_first_rounds_aligner(scramble, tmp_path):
    from attnmt.translation.training import prepare_data

    model_dir, aligner_dir, _ = scramble
    pairs, _ = scrambled(400, seed=5)  # the first round's training text
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]

    def second_round(**guided):
        return toy_config(
            tmp_path,
            pairs,
            data={"subwords": {"type": "word", "vocab_size": 40, "joint": True}},
            training={
                "max_steps": 1,
                "threads": 1,
                "guided_alignment": {"links": "self", "first_round": str(model_dir), **guided},
            },
        )

    config = second_round(first_round_aligner=str(aligner_dir))
    messages = []
    prepare_data(config, log=messages.append)
    assert f"word links: aligning 400 training pairs with the alignment layers of {model_dir}" in messages
    translator = load(model_dir)
    expected = align(translator, sources, targets, aligner=load_aligner(aligner_dir, translator))
    cached = (config.experiment_dir / "alignment" / "train.self.links").read_text().splitlines()
    assert cached == [format_pharaoh(links) for links in expected]
    assert cached != [format_pharaoh(links) for links in align(translator, sources, targets)]  # not the attention
    with pytest.raises(AttnmtError, match=r"training.guided_alignment.first_round_aligner: .*not an aligner folder"):
        prepare_data(second_round(first_round_aligner=str(tmp_path)), log=lambda m: None)


@pytest.mark.parametrize(
    "guided, message",
    [
        ({"links": "eflomal", "first_round_aligner": "a"}, "first_round_aligner is for links: self"),
        ({"links": "self", "first_round": "r", "first_round_backward_aligner": "a"}, "give that too"),
        ({"links": "self", "first_round": "r", "symmetrize": "mean"}, "give first_round_backward"),
        ({"links": "self", "first_round": "r", "first_round_backward": "b", "symmetrize": "diagonal"}, "symmetrize"),
    ],
)
def test_config_of_self_links_with_aligners(tmp_path, guided, message):
    from attnmt.core.config import config_from_dict

    raw = {
        "experiment_dir": str(tmp_path),
        "data": {"train": {"tsv": "t.tsv"}},
        "training": {"max_steps": 1, "guided_alignment": guided},
    }
    with pytest.raises(AttnmtError, match=message):
        config_from_dict(raw, tmp_path)


def test_both_aligners_are_averaged_by_default(tmp_path):
    from attnmt.core.config import config_from_dict

    def symmetrization(**guided):
        raw = {
            "experiment_dir": str(tmp_path),
            "data": {"train": {"tsv": "t.tsv"}},
            "training": {
                "max_steps": 1,
                "guided_alignment": {"links": "self", "first_round": "r", "first_round_backward": "b", **guided},
            },
        }
        return config_from_dict(raw, tmp_path).training.guided_alignment.symmetrization

    assert symmetrization() == "grow-diag-final"
    assert symmetrization(first_round_aligner="a", first_round_backward_aligner="c") == "mean"
    assert symmetrization(first_round_aligner="a", first_round_backward_aligner="c", symmetrize="union") == "union"
