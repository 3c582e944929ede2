"""Vocabulary shortlists (attnmt.translation.shortlist): the lexical table from piece links, the output layer
restricted to a batch's candidates, exactness with a shortlist of every piece, the command and
its errors."""

import json
import shutil
from importlib.util import find_spec

import pytest
import torch

from attnmt.cli import main
from attnmt.core.config import DecodingConfig
from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import EOS, UNK
from attnmt.seq2seq import fast_decoding
from attnmt.seq2seq.decoding import max_output_lengths
from attnmt.seq2seq.search import decode
from attnmt.seq2seq.shortlist import Shortlist, restricted
from attnmt.translation.shortlist import lexical_table
from conftest import require
from test_decoding import random_batch
from test_fast_decoding import tiny

VOCABULARY = 20  # of tiny() models, both sides


def every_piece() -> Shortlist:
    return Shortlist([[] for _ in range(VOCABULARY)], range(VOCABULARY))


def assert_identical(ours, theirs):
    """Same tokens, scores and attention, bit for bit."""
    for a, b in zip(ours, theirs, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [(h.score, h.log_prob) for h in a] == [(h.score, h.log_prob) for h in b]
        for x, y in zip(a, b):
            assert (x.attention is None and y.attention is None) or torch.equal(x.attention, y.attention)


@pytest.mark.parametrize("name", ["gru-bahdanau", "gru-none", "lstm-location", "transformer"])
@pytest.mark.parametrize("beam", [1, 4])
def test_a_shortlist_of_every_piece_gives_the_full_vocabularys_result_exactly(name, beam):
    model, batch = tiny(name), random_batch(6)
    full = decode(model, batch.src, batch.src_lengths, DecodingConfig(), beam=beam, n_best=min(beam, 3))
    short = decode(
        model, batch.src, batch.src_lengths, DecodingConfig(), beam=beam, n_best=min(beam, 3), shortlist=every_piece()
    )
    assert_identical(short, full)


def test_a_shortlist_of_every_piece_is_exact_with_the_bf16_output_layer_too():
    model, batch = tiny("gru-bahdanau"), random_batch(6)
    model.generator.compute_dtype = torch.bfloat16
    full = decode(model, batch.src, batch.src_lengths, DecodingConfig(), beam=4, n_best=2)
    assert_identical(
        decode(model, batch.src, batch.src_lengths, DecodingConfig(), beam=4, n_best=2, shortlist=every_piece()), full
    )


@pytest.mark.parametrize("beam", [1, 4])
def test_a_shortlist_restricts_the_outputs_to_its_pieces(beam):
    model, batch = tiny("gru-bahdanau"), random_batch(6)
    allowed = {7, 8, 11}
    table = Shortlist([[] for _ in range(VOCABULARY)], allowed)
    for sentence in decode(
        model, batch.src, batch.src_lengths, DecodingConfig(), beam=beam, n_best=beam, shortlist=table
    ):
        for hypothesis in sentence:
            assert set(hypothesis.tokens) <= allowed | {EOS, UNK}
    # the output layer is whole again afterwards
    assert model.generator._restricted is None


def test_the_restricted_vocabulary_is_the_union_of_the_batchs_candidates_and_the_frequent_pieces():
    candidates = [[] for _ in range(VOCABULARY)]
    candidates[5], candidates[6], candidates[9] = [12, 13], [13, 14], [19]
    table = Shortlist(candidates, [4])
    src = torch.tensor([[5, 6, 0], [6, 6, 6]])  # (9 absent: its candidate 19 is not kept)
    assert table.vocabulary(src).tolist() == [0, 1, 2, 3, 4, 12, 13, 14]


def test_a_shortlist_gives_the_reference_searchs_results_in_the_fixed_shape_searches():
    model, batch = tiny("gru-bahdanau"), random_batch(6)
    table = Shortlist([[8, 9, 10] for _ in range(VOCABULARY)], [4, 5])
    vocabulary = table.vocabulary(batch.src)
    limits = max_output_lengths(batch.src_lengths, 1.5, 5)
    for beam in (1, 3):
        reference = decode(
            model,
            batch.src,
            batch.src_lengths,
            DecodingConfig(max_length_offset=5),
            beam=beam,
            n_best=1,
            shortlist=table,
        )
        with restricted(model, vocabulary):
            for graphs in (False, True):
                if beam == 1:
                    fast = fast_decoding.greedy_search(
                        model, batch.src, batch.src_lengths, limits, graphs=graphs, vocabulary=vocabulary
                    )
                else:
                    fast = fast_decoding.beam_search(
                        model, batch.src, batch.src_lengths, limits, beam, 1, graphs=graphs, vocabulary=vocabulary
                    )
                assert [[h.tokens for h in s] for s in fast] == [[h.tokens for h in s] for s in reference]


def test_the_lexical_table_counts_piece_links_and_target_frequencies():
    pairs = [
        ([10, 11], [20, 21, 21], [(0, 0), (1, 1), (1, 2)]),
        ([11, 12], [21, 22], [(0, 0), (0, 1), (1, 1)]),
        ([10], [22, 20], [(0, 1)]),
    ]
    candidates, frequent = lexical_table(pairs, top=2, frequent=2)
    # 10: 20 twice; 11: 21 three times, 22 once; 12: 22 once
    assert candidates == {10: [20], 11: [21, 22], 12: [22]}
    assert frequent == [21, 20]  # 21 three times; 20 and 22 twice each: the smaller id first


# ------------------------------------------------------------------------------ the command


@pytest.fixture(scope="module")
def shortlisted(reverse_model, tmp_path_factory):
    """A copy of the reverse model's folder with its shortlist.json, built by the command."""
    require(find_spec("eflomal") is not None, "pip install eflomal (attnmt[experiments])")
    model, dev = reverse_model
    folder = tmp_path_factory.mktemp("shortlisted") / "model"
    shutil.copytree(model.folder, folder)
    assert main(["shortlist", str(folder), "--top", "5", "--frequent", "3"]) == 0
    return folder, dev


def test_the_command_writes_a_table_that_translates_as_before_when_it_covers_the_outputs(shortlisted):
    from attnmt.api import load

    folder, dev = shortlisted
    table = json.loads((folder / "shortlist.json").read_text())
    assert table["top"] == 5 and len(table["frequent"]) == 3
    assert all(len(row) <= 5 for row in table["candidates"]) and any(table["candidates"])
    model = load(folder)
    full = model.translate(dev[:40], beam=3)
    short = model.translate(dev[:40], beam=3, shortlist=True)
    # a reversed string has the pieces of its source: eflomal's links find them
    assert sum(a.text == b.text for a, b in zip(short, full)) >= 36


def test_translate_and_evaluate_take_the_shortlist_option(shortlisted, tmp_path, capsys):
    folder, dev = shortlisted
    source = tmp_path / "src.txt"
    source.write_text("\n".join(dev[:5]) + "\n")
    out = tmp_path / "out.txt"
    assert main(["translate", str(folder), "-i", str(source), "-o", str(out), "--shortlist"]) == 0
    assert len(out.read_text().splitlines()) == 5
    assert (
        main(
            [
                "evaluate",
                str(folder),
                "--src",
                str(source),
                "--ref",
                str(source),
                "--shortlist",
                str(folder / "shortlist.json"),
            ]
        )
        == 0
    )


def test_a_missing_or_foreign_table_is_a_clear_one_line_error(shortlisted, tmp_path):
    from attnmt.api import load

    folder, dev = shortlisted
    model = load(folder)
    with pytest.raises(AttnmtError, match="no shortlist table there") as error:
        model.translate(dev[:2], shortlist=tmp_path / "none.json")
    assert "\n" not in str(error.value)
    table = json.loads((folder / "shortlist.json").read_text())
    table["target_vocabulary"] = "0" * 64
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps(table))
    with pytest.raises(AttnmtError, match="built for other vocabularies") as error:
        model.translate(dev[:2], shortlist=foreign)
    assert "\n" not in str(error.value)
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "attnmt-shortlist"}')
    with pytest.raises(AttnmtError, match="broken.json: .*attnmt shortlist"):
        model.translate(dev[:2], shortlist=broken)
    with pytest.raises(AttnmtError, match="not int8"):
        load(folder, quantize="int8").translate(dev[:2], shortlist=True)


def test_the_configs_decoding_shortlist_is_the_default_and_stays_inside_the_folder(shortlisted, tmp_path):
    import yaml

    from attnmt.api import load

    source, dev = shortlisted
    folder = tmp_path / "model"
    shutil.copytree(source, folder)

    def with_shortlist(name):
        config = yaml.safe_load((folder / "config.yaml").read_text())
        config["decoding"]["shortlist"] = name
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        return load(folder)

    model = with_shortlist("shortlist.json")
    assert model.shortlist_table(None) is model.shortlist_table(True) is not None
    assert [t.text for t in model.translate(dev[:5])] == [t.text for t in model.translate(dev[:5], shortlist=True)]
    assert model.shortlist_table(False) is None
    shutil.copy(folder / "shortlist.json", tmp_path / "outside.json")
    with pytest.raises(AttnmtError, match="leads outside the model folder"):
        with_shortlist("../outside.json").translate(dev[:2])
