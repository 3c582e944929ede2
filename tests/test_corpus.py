"""Tests for attnmt.data.corpus: reading files, parallel/TSV corpora and their errors."""

import gzip
from pathlib import Path

import pytest

from attnmt.core.errors import AttnmtError
from attnmt.data.corpus import (
    Corpus,
    chunked,
    read_corpus,
    read_lines,
    read_parallel,
    read_tsv,
)
from conftest import shared_data


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def write_gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode("utf-8")))
    return path


# ---------------------------------------------------------------- read_lines


def test_plain_file_lines_without_newlines(tmp_path):
    path = write(tmp_path / "a.txt", "Hallo Welt\n  zwei  \n")
    assert read_lines(path) == ["Hallo Welt", "  zwei  "]


def test_last_line_without_newline_is_kept(tmp_path):
    assert read_lines(write(tmp_path / "a.txt", "a\nb")) == ["a", "b"]


def test_empty_lines_in_the_middle_are_kept(tmp_path):
    assert read_lines(write(tmp_path / "a.txt", "a\n\nb\n")) == ["a", "", "b"]


def test_str_path_is_accepted(tmp_path):
    path = write(tmp_path / "a.txt", "x\n")
    assert read_lines(str(path)) == ["x"]


def test_gzip_with_gz_suffix(tmp_path):
    path = write_gz(tmp_path / "a.txt.gz", "eins\nzwei\n")
    assert read_lines(path) == ["eins", "zwei"]


def test_gzip_detected_without_gz_suffix(tmp_path):
    path = write_gz(tmp_path / "train.de", "eins\nzwei\n")
    assert read_lines(path) == ["eins", "zwei"]


def test_crlf_and_lone_cr_line_endings_are_stripped(tmp_path):
    path = write(tmp_path / "a.txt", "one\r\ntwo\rthree\r\n")
    # A lone \r inside a line is content, not a line break; at line end it is stripped.
    assert read_lines(path) == ["one", "two\rthree"]
    assert read_lines(write(tmp_path / "b.txt", "x\r\ny\r")) == ["x", "y"]


def test_unicode_line_separators_do_not_split_lines(tmp_path):
    path = write(tmp_path / "a.txt", "a\u2028b\x85c\x0cd\n2nd\n")
    assert read_lines(path) == ["a\u2028b\x85c\x0cd", "2nd"]


def test_bom_is_removed(tmp_path):
    path = write(tmp_path / "a.txt", "\ufeffErste Zeile\nzweite\n")
    assert read_lines(path) == ["Erste Zeile", "zweite"]


def test_bom_is_removed_in_gzip(tmp_path):
    path = write_gz(tmp_path / "a.gz", "\ufeffErste\n")
    assert read_lines(path) == ["Erste"]


def test_empty_file_has_no_lines(tmp_path):
    assert read_lines(write(tmp_path / "a.txt", "")) == []


def test_missing_file(tmp_path):
    path = tmp_path / "nope.de"
    with pytest.raises(AttnmtError, match="no such file") as err:
        read_lines(path)
    assert str(path) in str(err.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(AttnmtError, match="directory") as err:
        read_lines(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_invalid_utf8_names_file_line_and_column(tmp_path):
    path = tmp_path / "train.de"
    path.write_bytes(b"erste\nzwei\ndrei\nabcd\xffx\n")
    with pytest.raises(AttnmtError) as err:
        read_lines(path)
    assert str(err.value) == f"{path}: line 4 is not valid UTF-8 (byte 0xff at column 5)"


def test_invalid_utf8_line_number_counts_bom_line_as_line_1(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"\xef\xbb\xbfok\n\xe4\n")  # latin-1 "a umlaut" on line 2
    with pytest.raises(AttnmtError, match=r"line 2 is not valid UTF-8 \(byte 0xe4 at column 1\)"):
        read_lines(path)


def test_invalid_utf8_inside_gzip(tmp_path):
    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(b"ok\nstill ok\nbad \x80\n"))
    with pytest.raises(AttnmtError, match="line 3 is not valid UTF-8"):
        read_lines(path)


def test_truncated_gzip_names_file(tmp_path):
    path = tmp_path / "train.en.gz"
    path.write_bytes(gzip.compress(b"some text\n" * 100)[:-20])
    with pytest.raises(AttnmtError, match="gzip") as err:
        read_lines(path)
    assert str(path) in str(err.value)


def test_corrupt_gzip_names_file(tmp_path):
    path = tmp_path / "train.en.gz"
    data = bytearray(gzip.compress(b"some text\n" * 100))
    data[12:20] = b"\x00\xff" * 4  # damage the compressed stream after the header
    path.write_bytes(bytes(data))
    with pytest.raises(AttnmtError, match="corrupt or truncated gzip") as err:
        read_lines(path)
    assert str(path) in str(err.value)


# ---------------------------------------------------------------- read_parallel


def test_read_parallel_aligns_pairs(tmp_path):
    src = write(tmp_path / "a.de", "Hallo\nWelt\n")
    tgt = write_gz(tmp_path / "a.en.gz", "Hello\nWorld\n")
    corpus = read_parallel(src, tgt)
    assert corpus == Corpus(["Hallo", "Welt"], ["Hello", "World"], 0, lines=[0, 1])


def test_read_parallel_mismatched_counts_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "train.de", "a\nb\nc\n")
    tgt = write(tmp_path / "train.en", "a\nb\n")
    with pytest.raises(AttnmtError) as err:
        read_parallel(src, tgt)
    assert str(err.value) == f"line counts differ: {src} has 3 lines, {tgt} has 2"


def test_read_parallel_drops_and_counts_blank_pairs(tmp_path):
    src = write(tmp_path / "a.de", "eins\n\ndrei\nvier\n \u00a0\n")
    tgt = write(tmp_path / "a.en", "one\ntwo\n\t\nfour\nfive\n")
    corpus = read_parallel(src, tgt)
    assert corpus.sources == ["eins", "vier"]
    assert corpus.targets == ["one", "four"]
    assert corpus.dropped_empty == 3
    assert corpus.lines == [0, 3]  # each kept pair's line, for files of one line per corpus line


def test_read_parallel_keeps_surrounding_spaces(tmp_path):
    src = write(tmp_path / "a.de", " a \n")
    tgt = write(tmp_path / "a.en", "b  \n")
    assert read_parallel(src, tgt).sources == [" a "]


def test_read_parallel_empty_files(tmp_path):
    src = write(tmp_path / "a.de", "")
    tgt = write(tmp_path / "a.en", "")
    with pytest.raises(AttnmtError) as err:
        read_parallel(src, tgt)
    assert str(err.value) == f"empty corpus: {src} and {tgt} contain no sentence pairs"


def test_read_parallel_only_blank_pairs_is_empty(tmp_path):
    src = write(tmp_path / "a.de", "x\n\n")
    tgt = write(tmp_path / "a.en", "  \ny\n")
    with pytest.raises(AttnmtError, match="empty corpus"):
        read_parallel(src, tgt)


def test_read_parallel_missing_target(tmp_path):
    src = write(tmp_path / "a.de", "x\n")
    with pytest.raises(AttnmtError, match=r"a\.en: no such file"):
        read_parallel(src, tmp_path / "a.en")


# ---------------------------------------------------------------- read_tsv


def test_read_tsv_ignores_extra_columns(tmp_path):
    path = write(tmp_path / "a.tsv", "Hallo\tHello\tCC-BY\t0.9\nWelt\tWorld\textra\n")
    corpus = read_tsv(path)
    assert corpus.sources == ["Hallo", "Welt"]
    assert corpus.targets == ["Hello", "World"]


def test_read_tsv_other_columns(tmp_path):
    path = write(tmp_path / "a.tsv", "id1\tHello\tHallo\n")
    corpus = read_tsv(path, src_column=2, tgt_column=1)
    assert (corpus.sources, corpus.targets) == (["Hallo"], ["Hello"])


def test_read_tsv_drops_and_counts_empty_lines_and_cells(tmp_path):
    path = write(tmp_path / "a.tsv", "a\tb\n\n\tb\nc\t \n  \nd\te\n")
    corpus = read_tsv(path)
    assert corpus.sources == ["a", "d"]
    assert corpus.dropped_empty == 4
    assert corpus.lines == [0, 5]


def test_read_tsv_too_few_columns_names_line(tmp_path):
    path = write(tmp_path / "a.tsv", "a\tb\nc\td\nonly one column\n")
    with pytest.raises(AttnmtError) as err:
        read_tsv(path)
    message = str(err.value)
    assert message.startswith(f"{path}: line 3 has 1 ")
    assert "expected at least 2" in message


def test_read_tsv_too_few_columns_for_high_index(tmp_path):
    path = write(tmp_path / "a.tsv", "a\tb\tc\n")
    with pytest.raises(AttnmtError, match="line 1 has 3 .*expected at least 4"):
        read_tsv(path, src_column=0, tgt_column=3)


def test_read_tsv_empty(tmp_path):
    path = write(tmp_path / "a.tsv", "\n\n")
    with pytest.raises(AttnmtError) as err:
        read_tsv(path)
    assert str(err.value) == f"empty corpus: {path} contains no sentence pairs"


@pytest.mark.parametrize("columns", [(0, 0), (-1, 1), (0, "1"), (True, 1)])
def test_read_tsv_bad_column_indices(tmp_path, columns):
    path = write(tmp_path / "a.tsv", "a\tb\n")
    with pytest.raises(AttnmtError, match="column"):
        read_tsv(path, *columns)


# ---------------------------------------------------------------- read_corpus


def test_read_corpus_parallel_form(tmp_path):
    src = write(tmp_path / "a.de", "x\n")
    tgt = write(tmp_path / "a.en", "y\n")
    assert read_corpus({"src": str(src), "tgt": tgt}) == Corpus(["x"], ["y"], lines=[0])


def test_read_corpus_tsv_form_with_columns(tmp_path):
    path = write(tmp_path / "a.tsv", "y\tx\n")
    corpus = read_corpus({"tsv": str(path), "src_column": 1, "tgt_column": 0})
    assert (corpus.sources, corpus.targets) == (["x"], ["y"])


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"src": "a.de"},
        {"src": "a.de", "tgt": "a.en", "tsv": "a.tsv"},
        {"src": "a.de", "tgt": "a.en", "src_column": 0},
        {"tsv": "a.tsv", "colums": 1},
        "a.tsv",
        None,
    ],
)
def test_read_corpus_rejects_other_specs(spec):
    with pytest.raises(AttnmtError) as err:
        read_corpus(spec)
    assert '{"src": <path>, "tgt": <path>}' in str(err.value)
    assert '{"tsv": <path>}' in str(err.value)


def test_read_corpus_rejects_non_path_value():
    with pytest.raises(AttnmtError, match="'src' must be a file path"):
        read_corpus({"src": None, "tgt": "a.en"})


# ---------------------------------------------------------------- real data


def test_real_multi30k_validation_set():
    multi30k = shared_data("multi30k")
    corpus = read_parallel(multi30k / "val.de.gz", multi30k / "val.en.gz")
    assert len(corpus.sources) == len(corpus.targets) == 1014
    assert corpus.dropped_empty == 0
    assert corpus.sources[0] == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
    assert corpus.targets[0] == "A group of men are loading cotton onto a truck"
    assert corpus.targets[1] == "A man sleeping in a green room on a couch."


def test_chunked_reads_a_stream_a_chunk_at_a_time():
    """Lists of the size asked, the last one shorter, each yielded before the stream is read further."""
    read = []

    def stream():
        for i in range(7):
            read.append(i)
            yield i

    chunks = chunked(stream(), 3)
    assert next(chunks) == [0, 1, 2] and read == [0, 1, 2]
    assert list(chunks) == [[3, 4, 5], [6]]
    assert list(chunked([], 3)) == []
