"""Word alignment from attention: forced decoding, merging pieces into words, Pharaoh files, AER."""

import contextlib
import io
import json
import re

import numpy as np
import pytest

from attnmt.cli import main
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.links import alignments_from_attention, output_links, word_matrix
from attnmt.translation.align import (
    align,
    align_both_ways,
    alignment_scores,
    force_attention,
    format_pharaoh,
    parse_pharaoh,
    read_gold,
    read_hypotheses,
    score_files,
)
from attnmt.viz.words import word_spans
from conftest import random_strings, reverse, toy_config


def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# A hand-made gold alignment of two sentence pairs and a hypothesis.
#
#   gold 1: 0-0 1-2 2?1 2p2   S1 = {0-0, 1-2}          P1 = S1 + {2-1, 2-2}
#   gold 2: 0-1 1-0 0?0       S2 = {0-1, 1-0}          P2 = S2 + {0-0}
#   hyp 1:  0-0 2-1 1-1       A1∩S1 = {0-0}            A1∩P1 = {0-0, 2-1}
#   hyp 2:  0-1 0-0           A2∩S2 = {0-1}            A2∩P2 = {0-1, 0-0}
#
#   |A| = 5, |S| = 4, |A∩S| = 2, |A∩P| = 4
#   precision = 4/5, recall = 2/4 = 1/2, AER = 1 - (2 + 4) / (5 + 4) = 1/3
GOLD = ["0-0 1-2 2?1 2p2", "0-1 1-0 0?0"]
GOLD_ONE_BASED = ["1-1 2-3 3?2 3p3", "1-2 2-1 1?1"]
HYP = ["0-0 2-1 1-1", "0-1 0-0"]


def test_scores_on_hand_made_gold(tmp_path):
    scores = score_files(write(tmp_path / "gold", GOLD), write(tmp_path / "hyp", HYP))
    assert scores == {
        "aer": pytest.approx(1 / 3, abs=1e-12),
        "precision": pytest.approx(4 / 5, abs=1e-12),
        "recall": pytest.approx(1 / 2, abs=1e-12),
        "sentences": 2,
    }


def test_one_based_gold_gives_the_same_scores(tmp_path):
    gold = write(tmp_path / "gold1", GOLD_ONE_BASED)
    scores = score_files(gold, write(tmp_path / "hyp", HYP), one_based=True)
    assert scores["aer"] == pytest.approx(1 / 3, abs=1e-12)
    assert scores["precision"] == pytest.approx(4 / 5, abs=1e-12)
    assert scores["recall"] == pytest.approx(1 / 2, abs=1e-12)
    # Read as 0-based, the same file gives other links: 1-1 is not 0-0.
    assert score_files(gold, tmp_path / "hyp")["aer"] != pytest.approx(1 / 3)
    with pytest.raises(AttnmtError, match=r"line 1: link '0-0' has index 0"):
        read_gold(write(tmp_path / "zero", ["0-0"]), one_based=True)


def test_perfect_and_empty_hypotheses():
    sure, possible = [{(0, 0), (1, 1)}], [{(0, 0), (1, 1), (2, 1)}]
    assert alignment_scores([{(0, 0), (1, 1)}], sure, possible) == {
        "aer": 0.0,
        "precision": 1.0,
        "recall": 1.0,
        "sentences": 1,
    }
    # possible links are never required: a hypothesis with them too is still perfect in AER
    assert alignment_scores([{(0, 0), (1, 1), (2, 1)}], sure, possible)["aer"] == 0.0
    assert alignment_scores([set()], sure, possible) == {"aer": 1.0, "precision": 0.0, "recall": 0.0, "sentences": 1}


def test_parsing_sure_and_possible_links():
    sure, possible = parse_pharaoh("0-0 3?1  12p7\t2-10")
    assert sure == {(0, 0), (2, 10)}
    assert possible == {(0, 0), (3, 1), (12, 7), (2, 10)}  # sure links are possible too
    assert parse_pharaoh("") == (set(), set())
    assert parse_pharaoh("2-3 1p2", one_based=True) == ({(1, 2)}, {(1, 2), (0, 1)})


def test_gold_file_keeps_empty_lines(tmp_path):
    sure, possible = read_gold(write(tmp_path / "gold", ["0-0 1?1", "", "2p0"]))
    assert sure == [{(0, 0)}, set(), set()]
    assert possible == [{(0, 0), (1, 1)}, set(), {(2, 0)}]


@pytest.mark.parametrize("token", ["1-x", "1-2-3", "-1-2", "1:2", "1=2", "12"])
def test_malformed_gold_names_file_line_and_token(tmp_path, token):
    path = write(tmp_path / "gold.txt", ["0-0", f"0-1 {token}"])
    with pytest.raises(AttnmtError) as info:
        read_gold(path)
    message = str(info.value)
    assert str(path) in message and "line 2" in message and repr(token) in message


def test_hypotheses_have_only_sure_links(tmp_path):
    assert read_hypotheses(write(tmp_path / "hyp", ["0-0 1-2", ""])) == [{(0, 0), (1, 2)}, set()]
    with pytest.raises(AttnmtError, match=r"hyp: line 1: possible link '1\?2'"):
        read_hypotheses(write(tmp_path / "hyp", ["0-0 1?2"]))


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    gold, hyp = write(tmp_path / "gold", GOLD), write(tmp_path / "hyp", HYP + ["0-0"])
    with pytest.raises(AttnmtError) as info:
        score_files(gold, hyp)
    message = str(info.value)
    assert f"{gold} has 2 lines" in message and f"{hyp} has 3" in message
    with pytest.raises(AttnmtError, match="hypothesis has 1, the gold alignment 2"):
        alignment_scores([set()], [set(), set()], [set(), set()])


def test_gold_without_sure_links_is_an_error():
    with pytest.raises(AttnmtError, match="no sure links"):
        alignment_scores([{(0, 0)}], [set()], [{(0, 0)}])


def test_pharaoh_output_is_sorted_and_deduplicated():
    assert format_pharaoh([(2, 0), (0, 1), (0, 0), (10, 2), (2, 0)]) == "0-0 0-1 2-0 10-2"
    assert format_pharaoh([]) == ""


# ---------------------------------------------------------------- pieces -> words


def test_word_spans():
    assert word_spans(["▁Das", "▁Haus", "chen", "▁ist"]) == [(0, 1), (1, 3), (3, 4)]
    assert word_spans(["▁", "1989", "▁le"]) == [(0, 2), (2, 3)]  # a lone "▁" starts a word
    assert word_spans(["ab", "c", "▁d"]) == [(0, 2), (2, 3)]  # the first piece always starts one


def test_word_matrix_sums_source_pieces_and_averages_target_pieces():
    src = ["▁Das", "▁Haus", "chen", "</s>"]  # 2 source words: Das, Hauschen
    tgt = ["▁The", "▁lit", "tle", "▁house", "</s>"]  # 3 target words: The, little, house
    matrix = np.array(
        [
            [0.7, 0.1, 0.1, 0.1],  # ▁The
            [0.1, 0.2, 0.6, 0.1],  # ▁lit
            [0.3, 0.1, 0.5, 0.1],  # tle
            [0.0, 0.8, 0.1, 0.1],  # ▁house
            [0.0, 0.0, 0.1, 0.9],  # </s> (dropped)
        ]
    )
    words = word_matrix(matrix, src, tgt)
    # The: Das 0.7, Hauschen 0.1 + 0.1; little: mean of the rows (0.1, 0.8) and (0.3, 0.6); house: 0.0, 0.9
    np.testing.assert_allclose(words, [[0.7, 0.2], [0.2, 0.7], [0.0, 0.9]])
    assert alignments_from_attention(words) == [(0, 0), (1, 1), (1, 2)]
    with pytest.raises(ValueError, match="does not match"):
        word_matrix(matrix[:, :3], src, tgt)


def test_alignment_methods():
    matrix = np.array([[0.6, 0.3, 0.1], [0.45, 0.45, 0.1], [0.0, 0.2, 0.8]])  # rows: target words
    assert alignments_from_attention(matrix) == [(0, 0), (0, 1), (2, 2)]
    assert alignments_from_attention(matrix, "threshold", threshold=0.4) == [(0, 0), (0, 1), (1, 1), (2, 2)]
    assert alignments_from_attention(matrix, "threshold", threshold=0.7) == [(2, 2)]
    assert alignments_from_attention(np.zeros((2, 0))) == []  # an empty source: no links
    with pytest.raises(ValueError, match="unknown alignment method"):
        alignments_from_attention(matrix, "intersection")


def test_output_links_merge_words_and_leave_out_the_end_of_sentence():
    src, tgt = ["▁Das", "▁Haus", "chen", "</s>"], ["▁The", "▁little", "▁house", "</s>"]
    matrix = np.array(
        [
            [0.9, 0.05, 0.05, 0.0],  # The -> Das
            [0.1, 0.3, 0.5, 0.1],  # little -> Haus+chen (0.8)
            [0.2, 0.7, 0.1, 0.0],  # house -> Hauschen
            [0.0, 0.0, 0.1, 0.9],
        ]
    )  # </s>: no link, even though it attends to </s>
    assert output_links(matrix, src, tgt) == [(0, 0), (1, 1), (1, 2)]
    assert output_links(matrix, src, tgt, words=False) == [(0, 0), (1, 2), (2, 1)]
    # shifted: row t is the step after piece t (the last row keeps its own weights)
    assert output_links(matrix, src, tgt, words=False, shift=True) == [(1, 1), (2, 0), (2, 2)]
    assert output_links(matrix, src, tgt, method="threshold", threshold=0.85) == [(0, 0)]
    assert output_links(matrix[:3, :3], src[:3], tgt[:3]) == [(0, 0), (1, 1), (1, 2)]  # without "</s>"


# ---------------------------------------------------------------- a trained model


def test_forced_attention_on_the_reverse_model(reverse_model):
    model, sources = reverse_model
    sources = sources[:40]
    targets = [reverse(s) for s in sources]
    matrices = force_attention(model, sources, targets, batch_size=16)
    assert len(matrices) == len(sources)
    for s, matrix in zip(sources, matrices):
        # character pieces: "▁" + one per character + "</s>", on both sides
        assert matrix.shape == (len(s) + 2, len(s) + 2)
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-5)
    # Batching, padding and order do not change the weights.
    single = force_attention(model, sources[::-1], targets[::-1], batch_size=1)[::-1]
    for a, b in zip(matrices, single):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert model.model.training is False


def test_forced_attention_equals_the_attention_of_greedy_translation(reverse_model):
    model, sources = reverse_model
    translations = model.translate(sources[:30], beam=1)
    checked = 0
    for s, t in zip(sources, translations):
        [forced] = force_attention(model, [s], [t.text])
        forced_pieces = model.tgt_subwords.pieces(model.tgt_subwords.encode([t.text])[0]) + ["</s>"]
        if forced_pieces == t.tokens:  # a finished translation whose pieces the text gives back
            np.testing.assert_allclose(forced, t.attention, atol=1e-5)
            checked += 1
    assert checked >= 20


def reversal_share(sources: list[str], links) -> float:
    """The share of the character links (pieces: "▁", then one per character) that follow the
    reversal; each target piece has one link (argmax)."""
    right = total = 0
    for s, pair_links in zip(sources, links):
        n = len(s)
        assert sorted(j for _, j in pair_links) == list(range(n + 1))  # argmax: one link per target piece
        for i, j in pair_links:
            if j >= 1:  # target character j-1 is source character n-1-(j-1): piece n-j+1
                total += 1
                right += i == n + 1 - j
    return right / total


def test_character_alignment_of_reversal_follows_the_reversal(reverse_model):
    model, sources = reverse_model
    sources = sources[:50]
    links = align(model, sources, [reverse(s) for s in sources], words=False)  # pieces, not merged
    assert reversal_share(sources, links) >= 0.8


def test_word_alignment_indices_are_those_of_whitespace_words(reverse_model):
    model, _ = reverse_model
    [links] = align(model, ["abc dej"], ["jed cba"])
    assert sorted(j for _, j in links) == [0, 1]  # one link per target word
    assert all(i in (0, 1) for i, _ in links)
    [links] = align(model, ["abc dej"], ["jed cba"], method="threshold", threshold=0.01)
    assert {(i, j) for i in (0, 1) for j in (0, 1)} >= set(links) and links
    with pytest.raises(AttnmtError, match="threshold must be in"):
        align(model, ["abc"], ["cba"], method="threshold", threshold=1.5)


def test_both_directions_symmetrized(reverse_model):
    model, sources = reverse_model
    sources = [" ".join(s[:3]) for s in sources[:20]]  # words of one character: "a b c" <-> "c b a"
    targets = [reverse(s) for s in sources]
    forward = align(model, sources, targets)
    backward = [sorted((j, i) for i, j in links) for links in align(model, targets, sources)]
    both = {
        method: align_both_ways(model, model, sources, targets, method)
        for method in ("intersection", "union", "grow-diag-final")
    }
    for k in range(len(sources)):
        assert set(both["intersection"][k]) == set(forward[k]) & set(backward[k])
        assert set(both["union"][k]) == set(forward[k]) | set(backward[k])
        assert set(both["intersection"][k]) <= set(both["grow-diag-final"][k]) <= set(both["union"][k])
    with pytest.raises(AttnmtError, match="unknown symmetrization"):
        align_both_ways(model, model, sources, targets, "grow")


def test_transformer_layer_and_heads_choose_the_attention_aligned(tiny_transformer):
    sources, targets = ["ab cd", "efg h"], ["ab cd", "efg h"]
    maps = force_attention(tiny_transformer, sources, targets, layers=True, heads=[1])
    every_head = force_attention(tiny_transformer, sources, targets, layers=True)
    assert maps[0].shape == every_head[0].shape and not np.allclose(maps[0], every_head[0])
    piece_links = align(tiny_transformer, sources, targets, words=False, layer=0, heads=[1])
    expected = [alignments_from_attention(m[0][:-1, :-1]) for m in maps]
    assert piece_links == expected
    default = align(tiny_transformer, sources, targets, words=False)
    assert default == align(tiny_transformer, sources, targets, words=False, layer=-1)
    with pytest.raises(AttnmtError, match="has 2 decoder layers"):
        align(tiny_transformer, sources, targets, layer=2)
    with pytest.raises(AttnmtError, match="has 4 heads"):
        align(tiny_transformer, sources, targets, layer=0, heads=[4])


def test_cli_align_writes_one_line_per_pair(reverse_model, tmp_path):
    model, sources = reverse_model
    src_lines = sources[:5] + [""] + ["abc dej"]
    tgt_lines = [reverse(s) for s in sources[:5]] + [""] + ["jed cba"]
    src, tgt = write(tmp_path / "src.txt", src_lines), write(tmp_path / "tgt.txt", tgt_lines)
    out = tmp_path / "out.align"
    code, stdout, err = run("align", model.folder, "--src", src, "--tgt", tgt, "-o", out, "--batch-size", 3)
    assert code == 0, err
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == len(src_lines) + 1  # ends in a newline
    lines = lines[:-1]
    assert lines[:5] == ["0-0"] * 5  # one word on each side
    assert lines[5] == ""  # the empty pair
    assert re.fullmatch(r"[01]-[01] [01]-[01]", lines[6])  # two words on each side
    code, stdout, err = run("align", model.folder, "--src", src, "--tgt", tgt)
    assert code == 0, err
    assert stdout.split("\n")[:-1] == lines


def test_cli_translate_report_align_writes_the_links_of_each_output(reverse_model, tmp_path):
    model, sources = reverse_model
    lines = [" ".join(s[i : i + 2] for i in range(0, len(s), 2)) for s in sources[:30]] + [""]  # words of 2 letters
    src, links_file = write(tmp_path / "src.txt", lines), tmp_path / "out.links"
    code, stdout, err = run(
        "translate", model.folder, "-i", src, "--beam", 1, "--report-align", "--align-file", links_file
    )
    assert code == 0, err
    written, links = stdout.split("\n")[:-1], links_file.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(written) == len(links) == len(lines) and written[-1] == " ||| " and links[-1] == ""
    expected = model.translate(lines[:-1], beam=1)
    for line, pharaoh, t in zip(written, links, expected):
        assert line == f"{t.text} ||| {pharaoh}" and pharaoh == format_pharaoh(t.alignment)
        words, source_words = len(t.text.split()), len(t.source.split())
        assert sorted(j for _, j in t.alignment) == list(range(words))  # argmax: one link per output word
        assert all(i < source_words for i, _ in t.alignment)
    # (that the links are right is tested on a model whose alignment is known: test_guided_alignment.py)
    code, stdout, err = run(
        "translate", model.folder, "-i", src, "--beam", 2, "--n-best", 2, "--align-file", links_file
    )
    assert code == 0, err and " ||| " not in stdout.split("\n")[0].split(" ||| ", 2)[2]  # links in the file only
    assert len(links_file.read_text(encoding="utf-8").split("\n")[:-1]) == len(stdout.split("\n")[:-1])


def test_cli_align_both_ways_shifted_and_layers(reverse_model, tmp_path):
    model, sources = reverse_model
    src_lines = [" ".join(s[:3]) for s in sources[:10]]
    tgt_lines = [reverse(s) for s in src_lines]
    src, tgt = write(tmp_path / "src.txt", src_lines), write(tmp_path / "tgt.txt", tgt_lines)
    code, stdout, err = run(
        "align", model.folder, "--src", src, "--tgt", tgt, "--backward", model.folder, "--symmetrize", "intersection"
    )
    assert code == 0, err
    expected = align_both_ways(model, model, src_lines, tgt_lines, "intersection")
    assert stdout.split("\n")[:-1] == [format_pharaoh(links) for links in expected]
    code, stdout, err = run("align", model.folder, "--src", src, "--tgt", tgt, "--shift")
    assert code == 0, err
    assert stdout.split("\n")[:-1] == [format_pharaoh(x) for x in align(model, src_lines, tgt_lines, shift=True)]
    code, _, err = run("align", model.folder, "--src", src, "--tgt", tgt, "--layer", 0)
    assert code == 2 and "no attention layers" in err
    with pytest.raises(SystemExit):  # argparse: usage and the message on stderr
        run("align", model.folder, "--src", src, "--tgt", tgt, "--heads", "0,x")


def test_cli_align_line_count_mismatch(reverse_model, tmp_path):
    model, _ = reverse_model
    src, tgt = write(tmp_path / "src.txt", ["abc", "de"]), write(tmp_path / "tgt.txt", ["cba"])
    code, stdout, err = run("align", model.folder, "--src", src, "--tgt", tgt)
    assert code == 2 and stdout == ""
    assert "Traceback" not in err
    assert f"{src} has 2 lines" in err and f"{tgt} has 1" in err


def test_model_without_attention_is_refused(tmp_path):
    from attnmt.api import load
    from attnmt.training import train

    pairs = [(s, reverse(s)) for s in random_strings(64, 3, 6, seed=3)]
    config = toy_config(tmp_path, pairs, model={"attention": "none"}, training={"max_steps": 2})
    train(config, log=lambda m: None, progress=False)
    translator = load(config.experiment_dir)
    with pytest.raises(AttnmtError, match="attention 'none'"):
        force_attention(translator, ["abc"], ["cba"])
    src, tgt = write(tmp_path / "src.txt", ["abc"]), write(tmp_path / "tgt.txt", ["cba"])
    code, stdout, err = run("align", config.experiment_dir, "--src", src, "--tgt", tgt)
    assert code == 2 and "Traceback" not in err
    assert "attention 'none'" in err and stdout == ""


def test_cli_align_score(tmp_path):
    gold, hyp = write(tmp_path / "gold", GOLD), write(tmp_path / "hyp", HYP)
    code, stdout, err = run("align-score", "--gold", gold, "--hyp", hyp)
    assert code == 0, err
    assert re.search(r"AER\s+0\.3333", stdout)
    assert re.search(r"precision\s+0\.8000", stdout)
    assert re.search(r"recall\s+0\.5000", stdout)
    code, stdout, err = run(
        "align-score", "--gold", write(tmp_path / "gold1", GOLD_ONE_BASED), "--hyp", hyp, "--one-based", "--json"
    )
    assert code == 0, err
    scores = json.loads(stdout)
    assert scores["aer"] == pytest.approx(1 / 3) and scores["sentences"] == 2
    report = tmp_path / "scores.json"
    code, stdout, err = run("align-score", "--gold", gold, "--hyp", hyp, "--json", report)
    assert code == 0, err
    assert json.loads(report.read_text())["recall"] == pytest.approx(0.5) and "AER" in stdout


def test_cli_align_score_errors(tmp_path):
    gold, hyp = write(tmp_path / "gold", GOLD), write(tmp_path / "hyp", HYP[:1])
    code, stdout, err = run("align-score", "--gold", gold, "--hyp", hyp)
    assert code == 2 and "Traceback" not in err
    assert f"{gold} has 2 lines" in err and f"{hyp} has 1" in err
    bad = write(tmp_path / "bad", ["0-0", "0-0 1~1"])
    code, _, err = run("align-score", "--gold", bad, "--hyp", write(tmp_path / "hyp2", HYP))
    assert code == 2 and f"{bad}: line 2" in err and "'1~1'" in err
