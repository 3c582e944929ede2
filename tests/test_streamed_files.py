"""`attnmt score` and `attnmt align` read their files as streams, in chunks of a bounded number of
pairs (issue 50, point 3): what they write equals scoring or aligning every pair at once, in order,
written chunk by chunk; a progress bar on a terminal only; errors name the file and line, and a file
already there is left as it was by an error before anything is written."""

import io
import json
import math
import re

import numpy as np
import pytest

from attnmt.cli import align as align_cli
from attnmt.cli import main
from attnmt.cli import score as score_cli
from attnmt.cli.streams import lines_together, renumbered
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.inference import Translator
from attnmt.seq2seq.results import ScoredTranslation
from attnmt.translation import align as align_module
from attnmt.translation.align import align, align_both_ways, format_pharaoh
from attnmt.translation.filtering import dual_scores
from conftest import reverse

CHUNK = 3


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of CHUNK pairs, and the number of pairs of every call of Translator.score."""
    monkeypatch.setattr(score_cli, "CHUNK_LINES", CHUNK)
    monkeypatch.setattr(align_cli, "CHUNK_LINES", CHUNK)
    sizes, score = [], Translator.score

    def recorded(self, sources, translations, *args, **kwargs):
        sizes.append(len(sources))
        return score(self, sources, translations, *args, **kwargs)

    monkeypatch.setattr(Translator, "score", recorded)
    return sizes


@pytest.fixture
def ten_pairs(reverse_model, tmp_path):
    translator, dev = reverse_model
    sources = dev[:10]
    targets = [reverse(s) for s in sources[:7]] + [sources[7], "", reverse(sources[9])[1:]]
    return translator, sources, targets, write(tmp_path / "src.txt", sources), write(tmp_path / "tgt.txt", targets)


def test_a_streamed_score_equals_scoring_every_pair_at_once(ten_pairs, small_chunks, tmp_path, capsys, monkeypatch):
    translator, sources, targets, src, tgt = ten_pairs
    expected = translator.score(sources, targets)
    assert small_chunks == [10]
    small_chunks.clear()
    folder = str(translator.folder)
    out = tmp_path / "scores.txt"
    assert main(["score", folder, "--src", str(src), "--tgt", str(tgt), "-o", str(out)]) == 0
    assert small_chunks == [3, 3, 3, 1]  # (10 lines over four chunks)
    log = capsys.readouterr().err
    assert [float(line) for line in out.read_text().splitlines()] == pytest.approx(
        [s.log_prob for s in expected], abs=1e-5
    )
    tokens = sum(len(s.tokens) for s in expected)
    per_token = math.fsum(s.log_prob for s in expected) / tokens
    summary = re.search(
        r"scored 10 translations, (\d+) target tokens: log-probability per token (\S+), perplexity (\S+)\n", log
    )
    assert int(summary[1]) == tokens  # (the same text as before, summed chunk by chunk)
    assert float(summary[2]) == pytest.approx(per_token, abs=2e-4) and float(summary[3]) == pytest.approx(
        math.exp(-per_token), abs=0.02
    )

    pasted = "".join(f"{s}\t{t}\n" for s, t in zip(sources, targets)).encode()
    monkeypatch.setattr("sys.stdin", type("Stdin", (), {"buffer": io.BytesIO(pasted)})())
    small_chunks.clear()
    assert main(["score", folder, "--jsonl"]) == 0
    assert small_chunks == [3, 3, 3, 1]
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["tokens"] for r in rows] == [s.tokens for s in expected]
    assert [r["per_token"] for r in rows] == pytest.approx([s.per_token for s in expected], abs=1e-5)

    small_chunks.clear()
    dual = dual_scores(translator, translator, sources, targets)
    small_chunks.clear()
    assert main(["score", folder, "--src", str(src), "--tgt", str(tgt), "--backward", folder]) == 0
    assert small_chunks == [3, 3, 3, 3, 3, 3, 1, 1]  # (each chunk forward, then backward)
    out, log = capsys.readouterr()
    assert [float(line) for line in out.splitlines()] == pytest.approx([d.score for d in dual], abs=1e-5)
    assert "scored 10 translations" in log and "scored 10 sources (backward)" in log


def test_a_streamed_alignment_equals_aligning_every_pair_at_once(reverse_model, small_chunks, tmp_path, monkeypatch):
    translator, dev = reverse_model
    sources = [" ".join(s[i : i + 2] for i in range(0, len(s), 2)) for s in dev[:10]]  # words of 2 letters
    targets = [reverse(s) for s in sources]
    src, tgt = write(tmp_path / "src.txt", sources), write(tmp_path / "tgt.txt", targets)
    sizes, real = [], align_module.align

    def recorded(model, sources, targets, *args, **kwargs):
        sizes.append(len(sources))
        return real(model, sources, targets, *args, **kwargs)

    expected = [format_pharaoh(links) for links in align(translator, sources, targets)]
    both = [format_pharaoh(links) for links in align_both_ways(translator, translator, sources, targets, "union")]
    monkeypatch.setattr(align_module, "align", recorded)
    out = tmp_path / "links.txt"
    folder = str(translator.folder)
    assert main(["align", folder, "--src", str(src), "--tgt", str(tgt), "-o", str(out)]) == 0
    assert out.read_text().splitlines() == expected and sizes == [3, 3, 3, 1]
    sizes.clear()
    argv = ["align", folder, "--src", str(src), "--tgt", str(tgt), "-o", str(out), "--backward", folder]
    assert main([*argv, "--symmetrize", "union"]) == 0
    assert out.read_text().splitlines() == both and max(sizes) == CHUNK  # (both directions of a chunk)


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("command", ["score", "align"])
def test_the_progress_bar_is_shown_on_a_terminal_only(ten_pairs, small_chunks, tmp_path, capsys, monkeypatch, command):
    translator, sources, _, src, tgt = ten_pairs
    argv = [command, str(translator.folder), "--src", str(src), "--tgt", str(tgt)]
    assert main(argv) == 0  # stdout and stderr captured: not terminals
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == len(sources) and "\r" not in out + err
    assert "scoring" not in err and "aligning" not in err
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main([*argv, "-o", str(tmp_path / "out.txt")]) == 0
    assert ("scoring" if command == "score" else "aligning") in terminal.getvalue() and "line" in terminal.getvalue()
    assert len((tmp_path / "out.txt").read_text().splitlines()) == len(sources)


@pytest.mark.parametrize("command", ["score", "align"])
def test_files_of_different_lengths_name_the_file_that_ends_first_and_its_line(
    ten_pairs, small_chunks, tmp_path, capsys, command
):
    translator, sources, targets, _, tgt = ten_pairs
    src = write(tmp_path / "short.txt", sources[:7])
    out = write(tmp_path / "out.txt", ["kept"])
    argv = [command, str(translator.folder), "--src", str(src), "--tgt", str(tgt), "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"line counts differ: {src} has 7 lines, {tgt} has 10; {src} ends first (after line 7)" in err
    assert "the scores of the 7 pairs before were written" in err or "the links of the 7 pairs before" in err
    assert len(out.read_text().splitlines()) == 7  # (the chunks before the end of the shorter file)
    write(out, ["kept"])
    assert main([*argv[:5], str(write(tmp_path / "one.txt", targets[:1])), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{src} has 7 lines, {tmp_path / 'one.txt'} has 1; {tmp_path / 'one.txt'} ends first (after line 1)" in err
    assert out.read_text() == "kept\n"  # (an error in the first chunk: before anything is written)


def test_a_bad_line_or_pair_is_named_by_its_line(ten_pairs, small_chunks, tmp_path, capsys):
    translator, sources, targets, src, _ = ten_pairs
    folder = str(translator.folder)
    lines = [f"{s}\t{t}" for s, t in zip(sources, targets)]
    tsv = write(tmp_path / "pairs.tsv", lines[:7] + [sources[7]] + lines[8:])
    assert main(["score", folder, "-i", str(tsv), "-o", str(tmp_path / "out.txt")]) == 2
    assert f"{tsv}, line 8: 1 tab-separated column(s), expected at least 2" in capsys.readouterr().err
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 7
    long = write(tmp_path / "long.txt", targets[:7] + ["abcdefghij" * 3] + targets[8:])
    assert main(["score", folder, "--src", str(src), "--tgt", str(long), "--max-tokens", "20"]) == 2
    out, err = capsys.readouterr()
    assert f"{src}, {long}: the translation of pair 8 (counting from 1) has" in err
    assert "(the scores of the 6 pairs before were written)" in err and len(out.splitlines()) == 6


def test_a_message_about_a_pair_of_a_chunk_names_its_line():
    message = "sentence pair 2: the source has 3 words; the translation of pair 1 (counting from 1) has"
    assert renumbered(message, 1025) == (
        "sentence pair 1026: the source has 3 words; the translation of pair 1025 (counting from 1) has",
        True,
    )
    assert renumbered("the model has 2 heads", 1025) == ("the model has 2 heads", False)


def test_lines_read_together_stop_where_a_file_ends():
    assert list(lines_together([("a", ["x", "y"]), ("b", ["1", "2"])])) == [(1, ["x", "1"]), (2, ["y", "2"])]
    together = lines_together([("a", ["x", "y", "z"]), ("b", ["1"]), ("c", ["p", "q", "r", "s"])], " (note)")
    assert next(together) == (1, ["x", "1", "p"])
    with pytest.raises(
        AttnmtError,
        match=r"^line counts differ: a has 3 lines, b has 1, c has 4; b ends first \(after line 1\) \(note\)$",
    ):
        next(together)
    with pytest.raises(AttnmtError, match=r"b ends first \(it is empty\)"):
        list(lines_together([("a", ["x"]), ("b", [])]))


@pytest.mark.parametrize("command", ["score", "align"])
def test_many_lines_are_held_a_chunk_at_a_time(reverse_model, tmp_path, monkeypatch, capsys, command):
    """20,000 pairs, chunks of 64: the model is never given more than a chunk, every pair once, in
    order, and each chunk's lines are in the output before the next chunk is scored or aligned.
    (The model's work is replaced by a stand-in: what is tested is what the command holds.)"""
    translator, _ = reverse_model
    count, chunk = 20_000, 64
    numbers = [str(i) for i in range(count)]
    src, tgt = write(tmp_path / "src.txt", numbers), write(tmp_path / "tgt.txt", numbers)
    out = tmp_path / "out.txt"
    sizes = []

    def held(sources):
        written = len(out.read_text().splitlines()) if out.exists() else 0
        assert written == chunk * len(sizes)  # (every chunk before this one written and flushed)
        sizes.append(len(sources))

    def scored(self, sources, translations, *args, **kwargs):
        held(sources)
        return [ScoredTranslation(s, t, ["</s>"], np.array([-int(s) / count])) for s, t in zip(sources, translations)]

    def aligned(model, sources, targets, *args, **kwargs):
        held(sources)
        return [[(int(s), int(t))] for s, t in zip(sources, targets)]

    monkeypatch.setattr(score_cli if command == "score" else align_cli, "CHUNK_LINES", chunk)
    monkeypatch.setattr(Translator, "score", scored)
    monkeypatch.setattr(align_module, "align", aligned)
    argv = [command, str(translator.folder), "--src", str(src), "--tgt", str(tgt), "-o", str(out)]
    assert main(argv) == 0
    assert max(sizes) == chunk and sum(sizes) == count and len(sizes) == math.ceil(count / chunk)
    written = out.read_text().splitlines()
    if command == "score":
        assert [float(line) for line in written] == [-int(n) / count for n in numbers]
        assert f"scored {count} translations, {count} target tokens" in capsys.readouterr().err
    else:
        assert written == [f"{n}-{n}" for n in numbers]
