"""Bad input everywhere, property-based: the corpus reader, the subword tokenizer, translate and
`attnmt translate` take arbitrary Unicode (control characters, line separators other than "\\n",
right-to-left text, emoji, lone surrogates, invalid UTF-8, very long lines, empty strings) without
crashing, and keep the number and order of lines."""

import contextlib
import gzip
import io
import re
from types import SimpleNamespace
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from attnmt.cli import main
from attnmt.core.config import SubwordConfig
from attnmt.core.errors import AttnmtError
from attnmt.data import corpus
from attnmt.data.corpus import bounded_lines, read_lines, read_parallel, read_tsv
from attnmt.data.subwords import BOS, EOS, PAD, train_subwords, valid_text
from conftest import reverse

# Characters that break naive line handling: str.splitlines() splits on all of \r, \x0b, \x0c,
# \x1c-\x1e, \x85, \u2028 and \u2029; \ufeff is a byte-order mark; then NUL, tab, right-to-left
# text and marks, combining accents, emoji (outside the BMP), a replacement character.
TRICKY = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff\x00\t \u00a0\u200f\u202e\u05e9\u0627\u0301\U0001f600\ufffd"
# Text that a UTF-8 file can hold (no lone surrogates; those come as bytes further down).
CHARACTERS = st.one_of(st.sampled_from(TRICKY), st.characters(exclude_characters="\n", exclude_categories=["Cs"]))
# Very long lines are short ones repeated: generating thousands of random characters is slow.
LONG = st.tuples(st.text(CHARACTERS, min_size=1, max_size=4), st.integers(500, 3000)).map(lambda p: p[0] * p[1])
LINE = st.text(CHARACTERS, max_size=30) | LONG
LINES = st.lists(LINE, max_size=12)
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def write(path, data: bytes, compress: bool) -> str:
    path.write_bytes(gzip.compress(data) if compress else data)
    return str(path)


def encode_lines(lines: list[str], endings: list[str], final_newline: bool) -> str:
    text = "".join(line + ending for line, ending in zip(lines, endings))
    return text if final_newline or not lines else text[: -len(endings[len(lines) - 1])]


def expected_lines(lines: list[str], endings: list[str], final_newline: bool) -> list[str]:
    """What a reader splitting on "\\n" only must return: a "\\r" before "\\n" belongs to the line
    ending (so does one at the very end), a leading byte-order mark is not text, and an
    unterminated empty last line is no line."""
    lines, endings = list(lines), list(endings[: len(lines)])
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
        if not final_newline:
            endings[-1] = ""
    out = [line + ("\r" if ending == "\r\n" else "") for line, ending in zip(lines, endings)]
    out = [line[:-1] if line.endswith("\r") else line for line in out]
    if not final_newline and lines and lines[-1] == "":
        out.pop()
    return out


@st.composite
def line_files(draw, lines=LINES):
    """Lines (without "\\n"), one ending each ("\\n" or "\\r\\n"), and whether the last is ended."""
    lines = draw(lines)
    endings = draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines)))
    return lines, endings, draw(st.booleans())


@SETTINGS
@given(file=line_files(), compress=st.booleans())
def test_read_lines_splits_on_newline_only(tmp_path, file, compress):
    lines, endings, final_newline = file
    text = encode_lines(lines, endings, final_newline)
    result = read_lines(write(tmp_path / "f", text.encode("utf-8"), compress))
    assert result == expected_lines(lines, endings, final_newline)
    if not text.startswith("\ufeff"):  # as many lines as `wc -l` counts (+1 for an unterminated last line)
        assert len(result) == text.count("\n") + (not text.endswith("\n") and text != "")


@SETTINGS
@given(data=st.binary(max_size=300) | st.binary(max_size=300).map(lambda b: b"\x1f\x8b" + b))
def test_read_lines_on_arbitrary_bytes_reads_or_names_the_line(tmp_path, data):
    path = write(tmp_path / "f", data, compress=False)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if not data.startswith(b"\x1f\x8b"):
            line = data.count(b"\n", 0, e.start) + 1
            with pytest.raises(AttnmtError, match=re.escape(f"{path}: line {line} is not valid UTF-8")):
                read_lines(path)
            return
    else:
        if not data.startswith(b"\x1f\x8b"):
            text = text.removeprefix("\ufeff")
            assert len(read_lines(path)) == text.count("\n") + (text != "" and not text.endswith("\n"))
            return
    try:  # random bytes after the gzip signature: an error naming the file, or (rarely) lines
        assert isinstance(read_lines(path), list)
    except AttnmtError as e:
        assert str(e).startswith(path)


# stream_lines reads a file BLOCK_BYTES (a megabyte) at a time; blocks of a few bytes cut lines,
# "\r\n" endings and multi-byte characters anywhere.
SMALL_BLOCKS = st.sampled_from([1, 2, 3, 5, 8, 64])


def line_at_a_time(path: str) -> list[str]:
    """The lines as the line-at-a-time reader gives them (what stdin is read with)."""
    return [line.text for line in bounded_lines(path, path, None)]


@SETTINGS
@given(file=line_files(), compress=st.booleans(), block=SMALL_BLOCKS)
def test_lines_read_a_block_at_a_time_are_those_read_a_line_at_a_time(tmp_path, file, compress, block):
    lines, endings, final_newline = file
    path = write(tmp_path / "f", encode_lines(lines, endings, final_newline).encode("utf-8"), compress)
    with mock.patch.object(corpus, "BLOCK_BYTES", block):
        assert read_lines(path) == line_at_a_time(path) == expected_lines(lines, endings, final_newline)


@SETTINGS
@given(data=st.binary(max_size=200), block=SMALL_BLOCKS)
def test_invalid_utf8_read_a_block_at_a_time_names_the_line_of_the_line_at_a_time_reader(tmp_path, data, block):
    path = write(tmp_path / "f", data, compress=False)
    try:
        expected = line_at_a_time(path)
    except AttnmtError as error:
        with mock.patch.object(corpus, "BLOCK_BYTES", block), pytest.raises(AttnmtError) as raised:
            read_lines(path)
        assert str(raised.value) == str(error)
    else:
        with mock.patch.object(corpus, "BLOCK_BYTES", block):
            assert read_lines(path) == expected


SURROGATE_LINE = st.tuples(LINE, st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), LINE)


@SETTINGS
@given(
    before=LINES,
    bad=SURROGATE_LINE,
    after=LINES,
    errors=st.sampled_from(["surrogateescape", "surrogatepass"]),
    compress=st.booleans(),
)
def test_lone_surrogates_and_invalid_utf8_name_the_line(tmp_path, before, bad, after, errors, compress):
    # A lone surrogate written as bytes: undecodable bytes (surrogateescape) or UTF-8-encoded
    # surrogates (surrogatepass, as some Java and JavaScript programs write), both invalid UTF-8.
    text = "\n".join(before + ["".join(bad)] + after) + "\n"
    path = write(tmp_path / "f", text.encode("utf-8", errors), compress)
    with pytest.raises(AttnmtError, match=re.escape(f"{path}: line {len(before) + 1} is not valid UTF-8")):
        read_lines(path)


def blank(text: str) -> bool:
    return not text.strip()


@SETTINGS
@given(pairs=st.lists(st.tuples(LINE, LINE), max_size=12), extra=st.lists(LINE, max_size=2), compress=st.booleans())
def test_read_parallel_keeps_pairs_aligned_and_in_order(tmp_path, pairs, extra, compress):
    src = [s for s, _ in pairs]
    tgt = [t for _, t in pairs] + extra
    src_path = write(tmp_path / "src", "".join(s + "\n" for s in src).encode("utf-8"), compress)
    tgt_path = write(tmp_path / "tgt", "".join(t + "\n" for t in tgt).encode("utf-8"), False)
    src, tgt = expected_lines(src, ["\n"] * len(src), True), expected_lines(tgt, ["\n"] * len(tgt), True)
    if len(src) != len(tgt):
        with pytest.raises(AttnmtError, match=f"line counts differ: .* has {len(src)} lines, .* has {len(tgt)}"):
            read_parallel(src_path, tgt_path)
        return
    kept = [(s, t) for s, t in zip(src, tgt) if not blank(s) and not blank(t)]
    if not kept:
        with pytest.raises(AttnmtError, match="empty corpus"):
            read_parallel(src_path, tgt_path)
        return
    corpus = read_parallel(src_path, tgt_path)
    assert list(zip(corpus.sources, corpus.targets)) == kept
    assert corpus.dropped_empty == len(src) - len(kept)


FIELD = st.text(
    st.one_of(
        st.sampled_from(TRICKY.replace("\t", "")), st.characters(exclude_characters="\n\t", exclude_categories=["Cs"])
    ),
    max_size=20,
)


@SETTINGS
@given(rows=st.lists(st.lists(FIELD, min_size=1, max_size=4), max_size=10), compress=st.booleans())
def test_read_tsv_keeps_rows_in_order_or_names_the_bad_line(tmp_path, rows, compress):
    lines = ["\t".join(row) for row in rows]
    path = write(tmp_path / "f.tsv", "".join(line + "\n" for line in lines).encode("utf-8"), compress)
    lines = expected_lines(lines, ["\n"] * len(lines), True)
    fields = [line.split("\t") for line in lines]
    short = [i for i, f in enumerate(fields) if not blank(lines[i]) and len(f) < 2]
    if short:
        with pytest.raises(AttnmtError, match=re.escape(f"{path}: line {short[0] + 1} has 1 tab-separated column")):
            read_tsv(path)
        return
    kept = [(f[0], f[1]) for line, f in zip(lines, fields) if not blank(line) and not blank(f[0]) and not blank(f[1])]
    if not kept:
        with pytest.raises(AttnmtError, match="empty corpus"):
            read_tsv(path)
        return
    corpus = read_tsv(path)
    assert list(zip(corpus.sources, corpus.targets)) == kept
    assert corpus.dropped_empty == len(lines) - len(kept)


# ------------------------------------------------------------------------------ subwords

ANY_TEXT = st.text(st.one_of(st.sampled_from(TRICKY + "\n\ud800\udfff"), st.characters()), max_size=200)


@pytest.fixture(scope="module")
def subwords(tmp_path_factory):
    sentences = [
        "the cat sat on the mat",
        "der Hund schläft",
        "שלום עולם",
        "مرحبا بالعالم",
        "emoji 😀 ok",
        "le 14 juillet 1989",
        "tabs\tand  spaces",
    ] * 20
    config = SubwordConfig(type="bpe", vocab_size=60, joint=True)
    src, _ = train_subwords(zip(sentences, sentences), config, tmp_path_factory.mktemp("spm"))
    return src


@SETTINGS
@given(texts=st.lists(ANY_TEXT, max_size=6))
def test_tokenizer_encodes_and_decodes_any_text(subwords, texts):
    ids = subwords.encode(texts)
    assert len(ids) == len(texts)
    for text, sentence in zip(texts, ids):
        assert sentence == subwords.encode([text])[0]  # one per input, in order
        assert all(0 <= i < len(subwords) and i not in (PAD, BOS, EOS) for i in sentence)
        assert isinstance(subwords.decode(sentence), str)
        assert len(subwords.pieces(sentence)) == len(sentence)


@SETTINGS
@given(words=st.lists(st.text("thecasonmdrHu", min_size=1, max_size=8), min_size=1, max_size=6))
def test_tokenizer_round_trips_text_of_its_alphabet(subwords, words):
    text = " ".join(words)
    assert subwords.decode(subwords.encode([text])[0]) == text


def test_lone_surrogates_become_replacement_characters(subwords):
    assert valid_text("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert subwords.encode(["a\ud800b"]) == subwords.encode(["a\ufffdb"])


# ------------------------------------------------------------------------------ translate


@pytest.fixture(scope="module")
def sentinels(reverse_model):
    """Inputs the model translates correctly, to check that every output lands in its place."""
    model, dev = reverse_model
    sources = [s for s in dev[:40] if model.translate([s], beam=1)[0].text == reverse(s)][:8]
    assert len(sources) >= 4
    return sources


MIXED = st.lists(
    st.one_of(ANY_TEXT.map(lambda t: ("any", t[:60])), st.integers(0, 3).map(lambda i: ("known", i))), max_size=8
)


@SETTINGS
@given(items=MIXED)
@example(items=[("any", "\x85"), ("known", 0)])  # U+0085 is whitespace to str.strip, not to sentencepiece
def test_translate_returns_one_translation_per_input_in_order(reverse_model, sentinels, items):
    model, _ = reverse_model
    texts = [sentinels[value] if kind == "known" else value for kind, value in items]
    results = model.translate(texts, beam=1)
    assert [r.source for r in results] == [valid_text(t) for t in texts]
    for text, result in zip(texts, results):
        if text in sentinels:
            assert result.text == reverse(text)
        if not text.strip():
            assert result.text == "" and result.candidates[0].tokens == []
        elif result.attention is not None:
            assert result.attention.shape == (len(result.tokens), len(result.source_tokens))


STDIN = st.lists(st.one_of(st.text(CHARACTERS, max_size=20), st.integers(0, 3)), max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    items=STDIN, endings=st.lists(st.sampled_from(["\n", "\r\n"]), min_size=8, max_size=8), final_newline=st.booleans()
)
def test_cli_translate_writes_one_line_per_input_line(reverse_model, sentinels, items, endings, final_newline):
    # Input lines are split on "\n" only: "\x0b", "\x1c", "\x85", "\u2028" ... stay inside a line.
    model, _ = reverse_model
    lines = [sentinels[item] if isinstance(item, int) else item for item in items]
    data = encode_lines(lines, endings, final_newline).encode("utf-8")
    stdin, stdout = SimpleNamespace(buffer=io.BytesIO(data)), io.StringIO()
    with mock.patch("sys.stdin", stdin), contextlib.redirect_stdout(stdout):
        assert main(["translate", str(model.folder), "--beam", "1"]) == 0
    output = stdout.getvalue()
    assert output.endswith("\n") or output == ""
    expected = expected_lines(lines, endings[: len(lines)], final_newline)
    outputs = output.split("\n")[:-1]
    assert len(outputs) == len(expected)
    for line, out in zip(expected, outputs):
        if line in sentinels:
            assert out == reverse(line)
        if not line.strip():
            assert out == ""
