"""Guided alignment: the loss on hand-made matrices, word links to piece links, the link files,
the config's checks, and a model trained with it on a task whose links are known."""

import math
import random
import shutil
from importlib.util import find_spec

import numpy as np
import pytest
import torch

from attnmt.api import load
from attnmt.cli import main
from attnmt.core.config import config_from_dict, config_to_yaml
from attnmt.core.errors import AttnmtError
from attnmt.training import train
from attnmt.translation.align import (
    align,
    align_both_ways,
    alignment_matrices,
    alignment_scores,
    format_pharaoh,
    grow_diag_final,
    transposed,
)
from attnmt.data.subwords import PAD
from attnmt.seq2seq.links import output_links
from attnmt.translation.guided_alignment import piece_links
from attnmt.translation.reference_links import alignment_loss, read_link_file, reference_attention
from attnmt.translation.training import prepare_data
from conftest import pair_config, require, toy_config


def test_loss_is_the_cross_entropy_of_the_linked_rows():
    weights = torch.tensor([[[0.5, 0.25, 0.25], [0.9, 0.05, 0.05], [0.2, 0.3, 0.5]]])
    # row 0: linked to source 0; row 1: no link (adds nothing); row 2: linked to sources 1 and 2
    reference = reference_attention([[(0, 0), (1, 2), (2, 2)]], src_width=3, tgt_width=3)
    assert torch.equal(reference, torch.tensor([[[1.0, 0, 0], [0, 0, 0], [0, 0.5, 0.5]]]))
    expected = -math.log(0.5) - 0.5 * math.log(0.3) - 0.5 * math.log(0.5)
    assert alignment_loss(weights, reference).item() == pytest.approx(expected)


def test_loss_ignores_padding_and_masked_positions():
    weights = torch.tensor([[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]]])
    reference = reference_attention([[(0, 0), (1, 1)]], src_width=2, tgt_width=2)  # smaller than the model's
    loss = alignment_loss(weights, reference)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(0.0, abs=1e-6)


def test_loss_gradient_moves_attention_towards_the_links():
    scores = torch.zeros(1, 1, 3, requires_grad=True)
    reference = reference_attention([[(2, 0)]], src_width=3, tgt_width=1)
    alignment_loss(torch.softmax(scores, dim=-1), reference).backward()
    assert scores.grad[0, 0, 2] < 0 < scores.grad[0, 0, 0]  # descent raises the linked score


def test_word_links_become_links_between_their_pieces():
    src, tgt = ["▁Ein", "▁Sch", "iff"], ["▁A", "▁sh", "ip", "▁."]
    assert piece_links([(0, 0), (1, 1)], src, tgt) == [(0, 0), (1, 1), (1, 2), (2, 1), (2, 2)]
    assert piece_links([(2, 0)], src, tgt) is None  # the source has two words: a link beyond them


def test_link_file_needs_one_line_per_corpus_line(tmp_path):
    path = tmp_path / "train.links"
    path.write_text("0-0 1-1\n\n0-1\n", encoding="utf-8")
    assert read_link_file(path, 3, one_based=False) == [[(0, 0), (1, 1)], [], [(0, 1)]]
    path.with_name("one.links").write_text("1-1 2-2\n\n1-2\n", encoding="utf-8")
    assert read_link_file(path.with_name("one.links"), 3, one_based=True) == [[(0, 0), (1, 1)], [], [(0, 1)]]
    with pytest.raises(AttnmtError, match=r"train.links: 3 lines .* data.train has 4 lines"):
        read_link_file(path, 4, one_based=False)
    path.write_text("0-0 x\n", encoding="utf-8")
    with pytest.raises(AttnmtError, match=r"train.links: line 1: malformed alignment link 'x'"):
        read_link_file(path, 1, one_based=False)
    path.write_text("0-1\n", encoding="utf-8")
    with pytest.raises(AttnmtError, match=r"line 1: link '0-1' has index 0.*1-based"):
        read_link_file(path, 1, one_based=True)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": {"attention": "none"}}, "model.attention none"),
        ({"model": {"type": "transformer", "decoder_layers": 2}, "guided": {"layer": 2}}, "the decoder has 2 layers"),
        ({"model": {"type": "transformer", "heads": 4}, "guided": {"heads": [1, 4]}}, "the model has 4 heads"),
        ({"model": {"attention": "bahdanau"}, "guided": {"full_context": True}}, "full_context is a Transformer"),
    ],
)
def test_config_refuses_what_has_no_such_attention(tmp_path, change, message):
    guided = {"links": "train.links", **change.get("guided", {})}
    raw = {
        "experiment_dir": str(tmp_path / "exp"),
        "data": {"train": {"tsv": "train.tsv"}},
        "model": change["model"],
        "training": {"max_steps": 1, "guided_alignment": guided},
    }
    with pytest.raises(AttnmtError, match=message):
        config_from_dict(raw, tmp_path)


@pytest.mark.parametrize("layers, expected", [(1, -1), (3, -2)])
def test_a_transformer_trains_the_penultimate_layer_by_default(tmp_path, layers, expected):
    raw = {
        "experiment_dir": str(tmp_path / "exp"),
        "data": {"train": {"tsv": "train.tsv"}},
        "model": {"type": "transformer", "decoder_layers": layers},
        "training": {"max_steps": 1, "guided_alignment": {"links": "train.links"}},
    }
    guided = config_from_dict(raw, tmp_path).training.guided_alignment
    assert (guided.layer, guided.heads) == (expected, [0])


def test_a_links_file_is_read_from_the_config_files_folder(tmp_path):
    raw = {
        "experiment_dir": "exp",
        "data": {"train": {"tsv": "train.tsv"}},
        "training": {"max_steps": 1, "guided_alignment": {"links": "data/train.links"}},
    }
    config = config_from_dict(raw, tmp_path / "conf")
    assert config.training.guided_alignment.links == str((tmp_path / "conf" / "data" / "train.links").resolve())
    assert config.data.train.tsv == (tmp_path / "conf" / "train.tsv").resolve()  # as the data files
    for kept in ("eflomal", str(tmp_path / "abs.links")):
        raw["training"]["guided_alignment"]["links"] = kept
        assert config_from_dict(raw, tmp_path / "conf").training.guided_alignment.links == kept


def small_transformer(tmp_path):
    """An untrained Transformer of two decoder layers (vocabularies of 20) and a batch of three
    random pairs for it: the model, src, lengths, tgt_in."""
    from attnmt.seq2seq import build_model

    config = config_from_dict(
        {
            "experiment_dir": str(tmp_path),
            "data": {"train": {"tsv": "t.tsv"}},
            "model": {
                "type": "transformer",
                "d_model": 16,
                "heads": 2,
                "feed_forward": 32,
                "encoder_layers": 1,
                "decoder_layers": 2,
                "dropout": 0.0,
                "attention_dropout": 0.0,
            },
            "training": {"max_steps": 1},
        },
        tmp_path,
    )
    torch.manual_seed(0)
    model = build_model(config.model, 20, 20)
    return model, torch.randint(4, 20, (3, 5)), torch.tensor([5, 4, 2]), torch.randint(4, 20, (3, 6))


def test_a_transformer_gives_one_layers_cross_attention_in_training(tmp_path):
    model, src, lengths, tgt_in = small_transformer(tmp_path)
    model.train()
    states, weights = model.cross_attention_of(src, lengths, tgt_in, layer=-2)
    weights.sum().backward()  # trainable: gradients reach the layer's projections
    assert model.decoder_layers[0].cross_attention.W_q.weight.grad is not None
    model.eval()
    maps = model.attention_maps(src, lengths, tgt_in)["cross"]  # (B,L,H,T,S)
    torch.testing.assert_close(weights.detach(), maps[:, 0])
    torch.testing.assert_close(states.detach(), model.decoder_outputs(src, lengths, tgt_in)[0])


def test_a_full_context_pass_sees_the_whole_target_but_its_padding(tmp_path):
    model, src, lengths, tgt_in = small_transformer(tmp_path)
    model.eval()
    tgt_in[2, 4:] = PAD
    changed = tgt_in.clone()
    changed[:, 3] = (tgt_in[:, 3] - 3) % 16 + 4  # another word at position 3

    def cross(tokens, full_context):
        return model.attention_maps(src, lengths, tokens, full_context)["cross"]  # (B,L,H,T,S)

    torch.testing.assert_close(cross(tgt_in, False)[:, :, :, :3], cross(changed, False)[:, :, :, :3])  # the past only
    assert not torch.allclose(cross(tgt_in, True)[:, :, :, 0], cross(changed, True)[:, :, :, 0])  # sees position 3
    alone = model.attention_maps(src[2:, :2], lengths[2:], tgt_in[2:, :4], True)["cross"]
    torch.testing.assert_close(cross(tgt_in, True)[2:, :, :, :4, :2], alone)  # not the padding after it
    model.train()
    states, weights = model.cross_attention_of(src, lengths, tgt_in, layer=0, full_context=True)
    weights.sum().backward()  # trainable
    assert model.decoder_layers[0].cross_attention.W_q.weight.grad is not None
    model.eval()
    torch.testing.assert_close(weights.detach(), cross(tgt_in, True)[:, 0])
    torch.testing.assert_close(states.detach(), model.decoder_outputs(src, lengths, tgt_in)[0])  # the causal pass


@pytest.mark.slow  # trains a model
def test_a_model_trained_with_full_context_is_aligned_with_it(tmp_path):
    pairs, links = permuted_pairs(40, seed=3)
    (tmp_path / "train.links").write_text("".join(" ".join(f"{i}-{j}" for i, j in pair) + "\n" for pair in links))
    transformer = {
        "type": "transformer",
        "d_model": 16,
        "heads": 2,
        "feed_forward": 32,
        "encoder_layers": 1,
        "decoder_layers": 1,
    }
    guided = {"links": str(tmp_path / "train.links"), "full_context": True}
    config = toy_config(
        tmp_path,
        pairs,
        model=transformer,
        training={"max_steps": 2, "validate_every": 1000, "threads": 1, "guided_alignment": guided},
    )
    train(config, log=lambda m: None, progress=False)
    translator = load(config.experiment_dir)
    sources, targets = [s for s, _ in pairs[:6]], [t for _, t in pairs[:6]]
    full = alignment_matrices(translator, sources, targets, full_context=True)
    by_default = alignment_matrices(translator, sources, targets)
    causal = alignment_matrices(translator, sources, targets, full_context=False)
    assert all(np.array_equal(a, b) for a, b in zip(full, by_default))
    assert not all(np.allclose(a, b) for a, b in zip(full, causal))
    (tmp_path / "s").write_text("\n".join(sources) + "\n")
    (tmp_path / "t").write_text("\n".join(targets) + "\n")
    written = {}
    for flag, full_context in (("--full-context", True), ("--no-full-context", False)):
        main(
            [
                "align",
                str(config.experiment_dir),
                "--src",
                str(tmp_path / "s"),
                "--tgt",
                str(tmp_path / "t"),
                flag,
                "-o",
                str(tmp_path / "out"),
            ]
        )
        written[full_context] = (tmp_path / "out").read_text().splitlines()
        expected = align(translator, sources, targets, full_context=full_context)
        assert written[full_context] == [format_pharaoh(links) for links in expected]
    assert written[True] != written[False]
    rnn = load(first_model(tmp_path / "rnn", pairs))
    with pytest.raises(AttnmtError, match="not a Transformer: full context"):
        alignment_matrices(rnn, sources, targets, full_context=True)


@pytest.mark.slow  # trains a model
def test_a_guided_transformers_links_are_read_where_guidance_trained_them(tmp_path, capsys):
    from attnmt.serve import create_app
    from attnmt.translation.align import GuidedAttentionLinks
    from conftest import local_client

    pairs, links = permuted_pairs(40, seed=4)
    (tmp_path / "train.links").write_text("".join(" ".join(f"{i}-{j}" for i, j in pair) + "\n" for pair in links))
    transformer = {
        "type": "transformer",
        "d_model": 16,
        "heads": 2,
        "feed_forward": 32,
        "encoder_layers": 1,
        "decoder_layers": 2,
    }
    guided = {"links": str(tmp_path / "train.links"), "layer": 0, "heads": [1]}
    config = toy_config(
        tmp_path,
        pairs,
        model=transformer,
        training={"max_steps": 40, "validate_every": 1000, "threads": 1, "guided_alignment": guided},
    )
    train(config, log=lambda m: None, progress=False)
    translator = load(config.experiment_dir)
    assert isinstance(translator.aligner, GuidedAttentionLinks)
    sources, targets = [s for s, _ in pairs[:5]], [t for _, t in pairs[:5]]
    trained = alignment_matrices(translator, sources, targets, layer=0, heads=[1])
    assert all(np.array_equal(a, b) for a, b in zip(alignment_matrices(translator, sources, targets), trained))
    assert not all(
        np.allclose(a, b) for a, b in zip(alignment_matrices(translator, sources, targets, layer=-1), trained)
    )

    # the translations' links: each output forced through the guided heads, in Python, the CLI and HTTP
    translations = translator.translate(sources, beam=2, align=True)
    outputs = [t.text for t in translations]
    assert all(o.strip() for o in outputs)  # words to link
    expected = align(translator, sources, outputs, layer=0, heads=[1])
    assert [t.best.alignment for t in translations] == expected
    assert [t.alignment for t in translator.translate(sources, beam=2)] == expected  # found when asked
    (tmp_path / "s").write_text("\n".join(sources) + "\n")
    main(["translate", str(config.experiment_dir), "-i", str(tmp_path / "s"), "--beam", "2", "--report-align"])
    assert capsys.readouterr().out.splitlines() == [f"{o} ||| {format_pharaoh(x)}" for o, x in zip(outputs, expected)]
    main(
        [
            "translate",
            str(config.experiment_dir),
            "-i",
            str(tmp_path / "s"),
            "--beam",
            "2",
            "--report-align",
            "--aligner",
            "none",
        ]
    )  # the search's own attention: the last layer, every head
    searched = [output_links(t.attention, t.source_tokens, t.tokens) for t in translations]
    assert searched != expected  # (so the lines above tell the two apart)
    assert capsys.readouterr().out.splitlines() == [f"{o} ||| {format_pharaoh(x)}" for o, x in zip(outputs, searched)]
    with local_client(create_app([config.experiment_dir])) as client:
        assert client.get("/models").json()[0]["word_links"] == "guided_attention"
        body = client.post("/translate", json={"text": sources, "beam": 2, "align": True}).json()
    assert [[tuple(x) for x in t["candidates"][0]["alignment"]] for t in body["translations"]] == expected


def first_model(folder, pairs):
    config = toy_config(folder, pairs, training={"max_steps": 1, "validate_every": 1000, "threads": 1})
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


def test_config_takes_a_file_or_eflomal(tmp_path):
    raw = {
        "experiment_dir": str(tmp_path / "exp"),
        "data": {"train": {"tsv": "train.tsv"}},
        "training": {"max_steps": 1, "guided_alignment": {"links": "eflomal", "weight": 0.5}},
    }
    assert config_from_dict(raw, tmp_path).training.guided_alignment.weight == 0.5
    raw["training"]["guided_alignment"] = {"links": "x", "weight": 0}
    with pytest.raises(AttnmtError, match="weight"):
        config_from_dict(raw, tmp_path)


# ---------------------------------------------------------------- trained: a task with known links

LETTERS = "abcdefghij"


def permuted_pairs(n: int, seed: int):
    """Space-separated letters and the same letters, each written in upper case, in the order of
    a fixed scramble: the reference links are known (target word j comes from source word
    ORDER[j])."""
    rng = random.Random(seed)
    pairs, links = [], []
    for _ in range(n):
        words = [rng.choice(LETTERS) for _ in range(6)]
        order = [5, 2, 0, 4, 1, 3]
        pairs.append((" ".join(words), " ".join(words[i].upper() for i in order)))
        links.append([(i, j) for j, i in enumerate(order)])
    return pairs, links


def trained_aer(folder, pairs, test_pairs, test_links, model, guided, steps: int = 200) -> float:
    config = toy_config(
        folder,
        pairs,
        model=model,
        training={"max_steps": steps, "validate_every": 1000, "threads": 1, "guided_alignment": guided},
    )
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    translator = load(config.experiment_dir)
    hyps = align(translator, [s for s, _ in test_pairs], [t for _, t in test_pairs])
    gold = [set(pair) for pair in test_links]
    if guided is not None:  # a model whose alignment is known: its own translations' links are those
        translations = translator.translate([s for s, _ in test_pairs], beam=1)  # (letters not all learnt yet)
        right = [t.alignment == sorted(links) for t, links in zip(translations, test_links) if len(t.text.split()) == 6]
        assert len(right) >= 50 and sum(right) >= 0.9 * len(right), (len(right), sum(right))
    return alignment_scores(hyps, gold, gold)["aer"]


@pytest.mark.slow
def test_guided_alignment_lowers_aer_on_a_task_with_known_links(tmp_path):
    pairs, links = permuted_pairs(600, seed=3)
    test_pairs, test_links = permuted_pairs(60, seed=4)
    (tmp_path / "train.links").write_text("".join(" ".join(f"{i}-{j}" for i, j in pair) + "\n" for pair in links))
    guided = {"links": str(tmp_path / "train.links"), "weight": 1.0}
    rnn = {"attention": "luong-general"}
    aer = {
        name: trained_aer(tmp_path / name, pairs, test_pairs, test_links, rnn, how)
        for name, how in (("plain", None), ("guided", guided))
    }
    # Measured: guided 0 %, plain 83 % (its attention collapses onto one source word)
    assert aer["guided"] < 0.1 and aer["plain"] > aer["guided"] + 0.3, aer
    # A Transformer's heads (here both heads of its one decoder layer, the attention align reads):
    # 0 % guided, 4.7 % without (200 steps). Guided, it learns in fewer steps than the RNN: 0 % after 80 with the
    # training seeds 42, 1, 2 and 3 (and after 50), where the guided RNN needs 200 (not all of its
    # translations have the 6 words after 160 with seed 42)
    transformer = {
        "type": "transformer",
        "d_model": 32,
        "heads": 2,
        "feed_forward": 64,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "dropout": 0.0,
        "attention_dropout": 0.0,
    }
    assert (
        trained_aer(
            tmp_path / "transformer", pairs, test_pairs, test_links, transformer, {**guided, "heads": [0, 1]}, steps=80
        )
        < 0.02
    )


def test_eflomal_links_are_computed_once_and_mapped_to_pieces(tmp_path):
    require(find_spec("eflomal") is not None, "pip install eflomal (attnmt[experiments])")
    pairs, _ = permuted_pairs(200, seed=5)
    config = toy_config(tmp_path, pairs, training={"guided_alignment": {"links": "eflomal"}})
    messages = []
    data = prepare_data(config, log=messages.append)
    assert any("aligning 200 training pairs with eflomal" in m for m in messages)
    cached = config.experiment_dir / "alignment" / "train.eflomal.links"
    assert len(cached.read_text().splitlines()) == 200
    assert len(data.train.alignments) == 200 and sum(map(bool, data.train.alignments)) > 150
    # every piece link joins a target piece and a source piece of the pair
    for links, src, tgt in zip(data.train.alignments, data.train.src_ids, data.train.tgt_ids):
        assert all(s < len(src) and t < len(tgt) for s, t in links)
    messages.clear()
    again = prepare_data(config, log=messages.append)
    assert not any("aligning" in m for m in messages), messages
    assert again.train.alignments == data.train.alignments


# ---------------------------------------------------------------- links: self (the attention of a first round)


def self_config(tmp_path, **guided):
    raw = {
        "experiment_dir": str(tmp_path / "exp"),
        "data": {"train": {"tsv": "train.tsv"}},
        "training": {"max_steps": 1, "guided_alignment": guided},
    }
    return config_from_dict(raw, tmp_path)


def test_config_links_self_needs_a_first_round(tmp_path):
    with pytest.raises(AttnmtError, match=r"training.guided_alignment: .*links: self needs first_round"):
        self_config(tmp_path, links="self")
    with pytest.raises(AttnmtError, match=r"training.guided_alignment: .*first_round is for links: self"):
        self_config(tmp_path, links="train.links", first_round="round1")
    with pytest.raises(AttnmtError, match=r"first_round_backward is for links: self \(links is 'eflomal'\)"):
        self_config(tmp_path, links="eflomal", first_round_backward="back")
    guided = self_config(
        tmp_path / "configs", links="self", first_round="round1", first_round_backward="../back"
    ).training.guided_alignment
    # relative to the config's folder, like data.train
    assert (guided.first_round, guided.first_round_backward) == (
        (tmp_path / "configs" / "round1").resolve(),
        (tmp_path / "back").resolve(),
    )
    assert (
        self_config(tmp_path, links="self", first_round=str(tmp_path / "r")).training.guided_alignment.first_round
        == tmp_path / "r"
    )


@pytest.fixture(scope="module")
def first_rounds(tmp_path_factory):
    """Two first rounds without guidance on one toy corpus (a few seconds): source -> target, and
    target -> source (the same file, its columns swapped)."""
    folder = tmp_path_factory.mktemp("first_rounds")
    pairs, _ = permuted_pairs(200, seed=5)
    forward = toy_config(folder / "forward", pairs, training={"max_steps": 40, "threads": 1})
    tsv = str(forward.data.train.tsv)
    backward = toy_config(
        folder / "backward",
        pairs,
        training={"max_steps": 40, "threads": 1},
        data={"train": {"tsv": tsv, "src_column": 1, "tgt_column": 0}},
    )
    for config in (forward, backward):
        torch.manual_seed(0)
        train(config, log=lambda m: None, progress=False)
    return pairs, tsv, forward.experiment_dir, backward.experiment_dir


def second_round(folder, pairs, max_steps=1, data=None, **guided):
    return toy_config(
        folder,
        pairs,
        data=data,
        training={"max_steps": max_steps, "threads": 1, "guided_alignment": {"links": "self", **guided}},
    )


def refuse(*args, **kwargs):
    raise AssertionError("the links were computed again")


def test_self_links_are_the_first_rounds_attention_links_computed_once(tmp_path, first_rounds, monkeypatch):
    pairs, _, forward, _ = first_rounds
    config = second_round(tmp_path, pairs, max_steps=10, first_round=str(forward))
    messages = []
    train(config, log=messages.append, progress=False)
    assert (config.experiment_dir / "best.safetensors").is_file()
    assert f"word links: aligning 200 training pairs with the attention of {forward}" in messages
    cached = config.experiment_dir / "alignment" / "train.self.links"
    expected = align(load(forward), [s for s, _ in pairs], [t for _, t in pairs])
    assert cached.read_text().splitlines() == [format_pharaoh(links) for links in expected]
    # the second round trains towards them: word links -> piece links, as with eflomal's file
    data = prepare_data(config, log=messages.append)
    assert data.train.alignments == [
        piece_links(links, data.src_sw.pieces(s), data.tgt_sw.pieces(t))
        for links, s, t in zip(expected, data.train.src_ids, data.train.tgt_ids)
    ]
    assert sum(map(bool, data.train.alignments)) == 200
    monkeypatch.setattr("attnmt.translation.guided_alignment.align", refuse)  # the same text and model: read back
    assert prepare_data(config, log=lambda m: None).train.alignments == data.train.alignments
    second_round(tmp_path, pairs[:150], first_round=str(forward))  # a changed text: aligned again
    monkeypatch.undo()
    messages.clear()
    assert len(prepare_data(config, log=messages.append).train.alignments) == 150
    assert any("aligning 150 training pairs" in m for m in messages), messages
    assert cached.read_text().splitlines() == [format_pharaoh(links) for links in expected[:150]]


def test_self_links_are_computed_again_for_other_weights(tmp_path, first_rounds):
    pairs, _, forward, backward = first_rounds
    model = tmp_path / "round1"
    shutil.copytree(forward, model)
    config = second_round(tmp_path, pairs, first_round=str(model))
    prepare_data(config, log=lambda m: None)
    for name in ("best.safetensors", "last.safetensors"):  # another model of the same shapes
        shutil.copyfile(backward / name, model / name)
    messages = []
    prepare_data(config, log=messages.append)
    assert any("aligning 200 training pairs" in m for m in messages), messages
    cached = config.experiment_dir / "alignment" / "train.self.links"
    expected = align(load(model), [s for s, _ in pairs], [t for _, t in pairs])
    assert cached.read_text().splitlines() == [format_pharaoh(links) for links in expected]


def test_self_links_are_computed_again_when_they_would_be_read_another_way(tmp_path, first_rounds, monkeypatch):
    """A cache made when the default reading was another one is not reused."""
    pairs, _, forward, _ = first_rounds
    config = second_round(tmp_path, pairs, first_round=str(forward))
    prepare_data(config, log=lambda m: None)
    monkeypatch.setattr("attnmt.translation.guided_alignment.default_method", lambda from_aligner: "threshold")
    messages = []
    prepare_data(config, log=messages.append)
    assert any("aligning 200 training pairs" in m for m in messages), messages


def test_self_links_of_both_directions_are_symmetrized(tmp_path, first_rounds):
    pairs, tsv, forward, backward = first_rounds
    config = second_round(
        tmp_path, pairs, data={"train": {"tsv": tsv}}, first_round=str(forward), first_round_backward=str(backward)
    )
    messages = []
    prepare_data(config, log=messages.append)
    assert any(f"with the attention of {forward} and {backward} (grow-diag-final)" in m for m in messages), messages
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    there, back = load(forward), load(backward)
    expected = align_both_ways(there, back, sources, targets, "grow-diag-final")
    assert expected == [
        grow_diag_final(f, transposed(b)) for f, b in zip(align(there, sources, targets), align(back, targets, sources))
    ]
    lines = (config.experiment_dir / "alignment" / "train.self.links").read_text().splitlines()
    assert lines == [format_pharaoh(links) for links in expected]
    assert lines != [format_pharaoh(links) for links in align(there, sources, targets)]  # not one direction's


def test_self_links_refuse_a_first_round_that_does_not_fit(tmp_path, first_rounds):
    pairs, tsv, forward, backward = first_rounds
    same_file = {"train": {"tsv": tsv}}
    cases = [
        ({"first_round": str(tmp_path / "nowhere")}, r"first_round: .*nowhere: no such folder"),
        ({"first_round": str(tmp_path)}, r"first_round: .*not a model folder \(no config.yaml\)"),
        (
            {"first_round": str(backward)},
            r"first_round: .* was trained on data.train target -> source; "
            r"it must be source -> target",
        ),
        (
            {"first_round": str(forward), "first_round_backward": str(forward)},
            r"first_round_backward: .* was trained on data.train source -> target; it must be target -> source",
        ),
    ]
    for guided, message in cases:
        config = second_round(tmp_path / "second", pairs, data=same_file, **guided)
        with pytest.raises(AttnmtError, match="training.guided_alignment." + message):
            prepare_data(config, log=lambda m: None)
    pair_folder = tmp_path / "pairs"
    pair_folder.mkdir()
    (pair_folder / "config.yaml").write_text(config_to_yaml(config_from_dict(pair_config(pair_folder), pair_folder)))
    config = second_round(tmp_path / "second", pairs, first_round=str(pair_folder))
    with pytest.raises(AttnmtError, match=r"first_round: .*pairs is a model of task pairs, not a translation model"):
        prepare_data(config, log=lambda m: None)
    digits = [(s.translate(str.maketrans(LETTERS, "0123456789")), t) for s, t in pairs]  # letters it never saw
    config = second_round(tmp_path / "digits", digits, first_round=str(forward))
    with pytest.raises(AttnmtError, match=r"first_round: .* does not know \d+% of the pieces of the training sources"):
        prepare_data(config, log=lambda m: None)
