"""`attnmt translate` against hostile input (issue 54): a gzip stream of a huge line or of countless
lines, a plain line of megabytes, a prefix or constraints line that would ask for unbounded work.
The input is read as a stream (attnmt.data.corpus.bounded_lines, the reader of corpora too), each
line cut before it is decoded, and translations are written as they are done."""

import gzip
import io
import os
import sys
import threading
import time
import tracemalloc
from types import SimpleNamespace

import pytest

from attnmt.api import load
from attnmt.cli import main, translate
from attnmt.core.config import MAX_CONSTRAINTS
from attnmt.core.errors import AttnmtError
from attnmt.data.corpus import Line, bounded_lines, read_lines
from attnmt.training import train
from conftest import WAIT, random_strings, reverse, toy_config

HUGE = 20_000_000  # bytes of one line: a 20 MB line, or 20 MB of NUL bytes in a gzip file of 20 KB


def gzipped(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as f:
        f.write(data)
    return buffer.getvalue()


def peak_bytes(read) -> int:
    """The most memory Python held at once while ``read()`` ran (tracemalloc)."""
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "plain"])
def test_a_huge_line_is_cut_as_it_is_read_and_never_held(tmp_path, compressed):
    """A gzip file is decompressed as a stream and each line cut to max_bytes before it is decoded:
    reading a 20 MB line holds a small fraction of it (gzip.decompress held it all, 3.5 GB for the
    issue's 100 MB), and the lines after it are read as they are."""
    data = b"\0" * HUGE + b"\nabc\n"
    path = tmp_path / "in.txt"
    path.write_bytes(gzipped(data) if compressed else data)
    lines = []
    peak = peak_bytes(lambda: lines.extend(bounded_lines(path, path, 1000)))
    assert lines == [Line("\0" * 1000, cut=True), Line("abc")]
    assert peak < HUGE / 10
    assert read_lines(path) == ["\0" * HUGE, "abc"]  # (without a bound, as before)


def test_a_cut_line_keeps_whole_characters_and_the_reader_takes_a_pipe(tmp_path):
    """Cut inside a character, a line keeps the characters before it; stdin need not be seekable."""
    read, write = os.pipe()
    data = gzipped(("é" * 10 + "\n" + "plain\r\n" + "x" * 5).encode())  # 2 bytes per é: 7 bytes keep 3 of them
    threading.Thread(target=lambda: (os.write(write, data), os.close(write)), daemon=True).start()
    with os.fdopen(read, "rb") as stream:
        assert not stream.seekable()
        assert list(bounded_lines(stream, "<stdin>", 7)) == [Line("ééé", cut=True), Line("plain"), Line("xxxxx")]


def test_bad_input_is_an_error_naming_the_line_after_the_lines_before_it(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"ok\n\xff\n")
    lines = bounded_lines(path, path, 100)
    assert next(lines) == Line("ok")
    with pytest.raises(AttnmtError, match="line 2 is not valid UTF-8"):
        next(lines)
    path.write_bytes(gzipped(b"ok\n" * 10_000)[:-20])  # a truncated download
    with pytest.raises(AttnmtError, match="corrupt or truncated gzip file"):
        list(bounded_lines(path, path, 100))


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small model trained to reverse strings (seconds): what it writes does not matter here."""
    folder = tmp_path_factory.mktemp("security-cli")
    config = toy_config(
        folder,
        [(s, reverse(s)) for s in random_strings(300, 3, 8, seed=1)],
        training={"max_steps": 30, "validate_every": 1000, "threads": 1},
        decoding={"beam": 2, "max_length_ratio": 1.5, "max_length_offset": 3},
    )
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


def test_a_huge_line_in_a_gzip_file_is_cut_with_a_warning_and_every_line_written(trained, tmp_path, capsys):
    source, out = tmp_path / "in.txt.gz", tmp_path / "out.txt"
    source.write_bytes(gzipped(b"abc\n" + b"\0" * HUGE + b"\n" + b"abcdefghij" * 100 + b"\ncba\n"))
    assert main(["translate", str(trained), "-i", str(source), "-o", str(out), "--max-tokens", "20"]) == 0
    assert len(out.read_text().splitlines()) == 4
    err = capsys.readouterr().err
    assert f"{source}, line 2: more than 2,000 bytes; its first 2,000 were read (--max-tokens 20 x 100)" in err
    assert f"{source}, line 3: more than 20 subword tokens; its first 20 were translated" in err
    assert "line 1:" not in err and "line 4:" not in err


def test_translations_are_written_as_they_are_done(trained, tmp_path, monkeypatch):
    """The first lines' translations are in the output while the input is still open (they came only
    at the end: 953,000 lines of a 19 KB gzip on stdin held 1.1 GB after 40 s, nothing written)."""
    monkeypatch.setattr(translate, "CHUNK_LINES", 2)
    read, write = os.pipe()
    out = tmp_path / "out.txt"
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=os.fdopen(read, "rb")))
    seen = []

    def client():  # writes 2 lines, waits for their translations, and only then ends the input
        os.write(write, b"abc\nbcd\n")
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not (out.exists() and len(out.read_text().splitlines()) == 2):
            time.sleep(0.05)
        seen.append(out.read_text() if out.exists() else "")
        os.write(write, b"cde\n")
        os.close(write)

    writer = threading.Thread(target=client, daemon=True)
    writer.start()
    assert main(["translate", str(trained), "-o", str(out)]) == 0
    writer.join(WAIT)
    assert len(seen[0].splitlines()) == 2  # written before the input ended
    assert len(out.read_text().splitlines()) == 3


def test_a_bad_line_of_a_side_file_stops_after_the_lines_before_it_are_written(trained, tmp_path, capsys):
    source, prefixes, out = tmp_path / "in.txt", tmp_path / "prefix.txt", tmp_path / "out.txt"
    source.write_text("abc\nbcd\ncde\n")
    prefixes.write_text("c\nzz\n\n")  # "z" is no piece of the model's
    assert main(["translate", str(trained), "-i", str(source), "--prefix", str(prefixes), "-o", str(out)]) == 2
    assert f"{prefixes}, line 2: 'zz' has a character" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 1


def test_a_long_prefix_and_many_constraints_are_cut_with_a_warning(trained, tmp_path, capsys):
    """A 5,000-character prefix took 27.7 s and 2,000 phrases 218 s: now a line's prefix is cut to
    --max-tokens pieces and its constraints to the first phrases within MAX_CONSTRAINTS and
    --max-tokens, as the server bounds its requests (where they are a 422)."""
    model = load(trained)
    [t] = model.translate(["abc"], prefix=["ab" * 2500], max_tokens=30)
    forced = model.tgt_subwords.encode(["ab" * 2500])[0][:30]
    assert t.cut == ("prefix",) and t.tokens[:30] == model.tgt_subwords.pieces(forced)
    [u] = model.translate(["abc"], constraints=[["a", "b"] * 1000], max_tokens=30, beam=2)
    assert u.cut == ("constraints",)
    [v] = model.translate(["abc"], prefix=["ab"], constraints=[["a"] * MAX_CONSTRAINTS], max_tokens=40, beam=2)
    assert v.cut == ()  # within both bounds (16 phrases of 2 pieces, "▁" and "a"): nothing cut
    source, prefixes, phrases = tmp_path / "in.txt", tmp_path / "prefix.txt", tmp_path / "phrases.txt"
    source.write_text("abc\nbcd\n")
    prefixes.write_text("ab" * 2500 + "\n\n")
    phrases.write_text("\n" + "\t".join(["a", "b"] * 1000) + "\n")
    options = ["--prefix", str(prefixes), "--constraints", str(phrases), "--max-tokens", "30"]
    assert main(["translate", str(trained), "-i", str(source), "--beam", "2", *options]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and out.startswith(("ab" * 15)[:29])  # "▁" and 29 letters: 30 pieces
    assert f"{prefixes}, line 1: more than 30 subword tokens; its first 30 were forced (--max-tokens)" in err
    assert f"{phrases}, line 2: more than {MAX_CONSTRAINTS} phrases or 30 subword tokens in all" in err
    assert f"{prefixes}, line 2" not in err and f"{phrases}, line 1" not in err
