"""Subword models: training (joint/separate, bpe/unigram/char), special ids, round trips, errors."""

import os
import random
from types import SimpleNamespace

import pytest
import sentencepiece as spm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnmt.core.config import SubwordConfig
from attnmt.core.errors import AttnmtError
from attnmt.data import subwords
from attnmt.data.subwords import (
    BOS,
    EOS,
    PAD,
    UNK,
    Subwords,
    load_subwords,
    subword_paths,
    train_subwords,
    valid_text,
)

SRC_WORDS = [
    "der",
    "die",
    "das",
    "Hund",
    "Katze",
    "läuft",
    "schnell",
    "über",
    "eine",
    "Straße",
    "und",
    "sieht",
    "einen",
    "Mann",
    "mit",
    "Hut",
    "im",
    "Park",
    "spielt",
    "Ball",
]
TGT_WORDS = [
    "the",
    "a",
    "dog",
    "cat",
    "runs",
    "fast",
    "across",
    "street",
    "and",
    "sees",
    "man",
    "with",
    "hat",
    "in",
    "park",
    "plays",
    "ball",
    "near",
    "river",
    "quietly",
]


def sentences(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
        out.append(text[0].upper() + text[1:] + rng.choice([".", "!", "?", ""]))
    return out


SOURCES = sentences(SRC_WORDS, 300, seed=1)
TARGETS = sentences(TGT_WORDS, 300, seed=2)
HELD_OUT_SRC = sentences(SRC_WORDS, 20, seed=3)
HELD_OUT_TGT = sentences(TGT_WORDS, 20, seed=4)


def train(folder, type="bpe", joint=True, vocab_size=60):
    return train_subwords(zip(SOURCES, TARGETS), SubwordConfig(type=type, vocab_size=vocab_size, joint=joint), folder)


@pytest.mark.parametrize("type", ["bpe", "unigram", "char"])
def test_joint_model_is_one_file_used_for_both_sides(tmp_path, type):
    src_sw, tgt_sw = train(tmp_path, type=type, joint=True)
    assert (tmp_path / "spm" / "joint.model").is_file()
    assert not (tmp_path / "spm" / "src.model").exists() and not (tmp_path / "spm" / "tgt.model").exists()
    assert src_sw.path == tgt_sw.path == tmp_path / "spm" / "joint.model"
    assert len(src_sw) == len(tgt_sw)
    # No temporary files are left behind.
    assert sorted(p.name for p in (tmp_path / "spm").iterdir()) == ["joint.model"]


@pytest.mark.parametrize("type", ["bpe", "unigram", "char"])
def test_separate_models_are_two_files(tmp_path, type):
    src_sw, tgt_sw = train(tmp_path, type=type, joint=False)
    assert sorted(p.name for p in (tmp_path / "spm").iterdir()) == ["src.model", "tgt.model"]
    assert src_sw.path == tmp_path / "spm" / "src.model" and tgt_sw.path == tmp_path / "spm" / "tgt.model"
    # Each vocabulary knows only its own language: "ß" occurs only in the German source.
    assert src_sw.sp.piece_to_id("ß") != UNK
    assert tgt_sw.sp.piece_to_id("ß") == UNK


@pytest.mark.parametrize("type", ["bpe", "unigram", "char"])
@pytest.mark.parametrize("joint", [True, False])
def test_special_ids(tmp_path, type, joint):
    for sw in train(tmp_path, type=type, joint=joint):
        sp = sw.sp
        assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
        assert sw.pieces([PAD, UNK, BOS, EOS]) == ["<pad>", "<unk>", "<s>", "</s>"]
        # Encoding never produces the special ids of pad, bos or eos for ordinary text.
        ids = [i for seq in sw.encode(SOURCES[:50] + TARGETS[:50]) for i in seq]
        assert not {PAD, BOS, EOS} & set(ids)


@pytest.mark.parametrize("type", ["bpe", "unigram"])
def test_vocabulary_size_is_close_to_the_request(tmp_path, type):
    src_sw, _ = train(tmp_path, type=type, vocab_size=60)
    assert 40 <= len(src_sw) <= 60


@pytest.mark.parametrize("type", ["bpe", "unigram", "char"])
@pytest.mark.parametrize("joint", [True, False])
def test_encode_decode_round_trip(tmp_path, type, joint):
    src_sw, tgt_sw = train(tmp_path, type=type, joint=joint)
    for sw, texts in ((src_sw, SOURCES[:30] + HELD_OUT_SRC), (tgt_sw, TARGETS[:30] + HELD_OUT_TGT)):
        encoded = sw.encode(texts)
        assert all(isinstance(i, int) for seq in encoded for i in seq)
        assert UNK not in {i for seq in encoded for i in seq}
        assert [sw.decode(ids) for ids in encoded] == texts


def test_subwords_are_shorter_than_characters_with_bpe(tmp_path):
    bpe, _ = train(tmp_path / "bpe", type="bpe", vocab_size=60)
    char, _ = train(tmp_path / "char", type="char")
    assert sum(map(len, bpe.encode(SOURCES))) < sum(map(len, char.encode(SOURCES)))


def test_training_is_reproducible(tmp_path):
    a, _ = train(tmp_path / "a")
    b, _ = train(tmp_path / "b")
    # (The files differ in the temporary model_prefix sentencepiece records, not in the vocabulary.)
    assert [a.sp.id_to_piece(i) for i in range(len(a))] == [b.sp.id_to_piece(i) for i in range(len(b))]
    assert a.encode(HELD_OUT_SRC) == b.encode(HELD_OUT_SRC)


def test_load_subwords_gives_the_trained_models(tmp_path):
    trained = train(tmp_path, joint=False)
    loaded = load_subwords(tmp_path, joint=False)
    for t, u in zip(trained, loaded):
        assert t.path == u.path and len(t) == len(u)
        assert t.encode(HELD_OUT_SRC) == u.encode(HELD_OUT_SRC)


def test_subword_paths():
    assert subword_paths("exp", True) == (subword_paths("exp", True)[0],) * 2
    assert [p.as_posix() for p in subword_paths("exp", True)] == ["exp/spm/joint.model"] * 2
    assert [p.as_posix() for p in subword_paths("exp", False)] == ["exp/spm/src.model", "exp/spm/tgt.model"]


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("joint", [True, False])
def test_loading_missing_models_says_to_run_prepare(tmp_path, joint):
    with pytest.raises(AttnmtError, match="attnmt prepare") as info:
        load_subwords(tmp_path, joint=joint)
    assert ("joint.model" if joint else "src.model") in str(info.value)


def test_missing_target_model_is_named(tmp_path):
    train(tmp_path, joint=False)
    (tmp_path / "spm" / "tgt.model").unlink()
    with pytest.raises(AttnmtError, match="tgt.model.*attnmt prepare"):
        load_subwords(tmp_path, joint=False)


@pytest.mark.parametrize("content", [os.urandom(512), b"", b"not a model\n"])
def test_corrupted_model_file_is_named(tmp_path, content):
    path = tmp_path / "spm" / "joint.model"
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(AttnmtError, match="joint.model") as info:
        load_subwords(tmp_path, joint=True)
    assert "sentencepiece" in str(info.value)
    with pytest.raises(AttnmtError, match="joint.model"):
        Subwords(path)


def test_truncated_model_file_is_named(tmp_path):
    train(tmp_path)
    path = tmp_path / "spm" / "joint.model"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(AttnmtError, match="joint.model"):
        load_subwords(tmp_path, joint=True)


# ---------------------------------------------------------------- the words' pieces kept (Subwords.encode)

# Texts whose every word is cut alone, and texts that need sentencepiece whole: runs of spaces, spaces
# around a text, tabs, no-break and other spaces, control characters, full-width and compatibility
# characters (NFKC changes them), a combining accent (NFKC composes it), case, a tag of its own.
AROUND_WORDS = [
    "Der Hund  läuft   schnell.",
    "  Ein Mann mit Hut ",
    "der\tHund",
    "Hund\u00a0läuft",
    "Hund\u2003läuft\u3000schnell",
    "Hund\u200bläuft",
    "Hund\x1fläuft Hund\x85läuft",
    "Hund¨läuft ¨",
    "Ka\x07tze",
    "Ｈｕｎｄ läuft",
    "ﬁne ㍿ ½",
    "Stra\u0301ße über",
    "HUND hund Hund",
    "<bt> Der Hund",
    "<bt>Hund",
    "",
    "   ",
    "\ud800 Hund",
]
# Characters for texts made up at random: the words' letters, and those that need care.
TEXT_CHARACTERS = st.sampled_from(list("derHundläuftßü .!?") + list("\t\u00a0\u3000\u200b\x07\x1f\x85¨Ｈﬁ\u0301Ä<>bt"))


def whole(sw: Subwords, texts: list[str]) -> list[list[int]]:
    """The texts' pieces as sentencepiece cuts each text whole."""
    return sw.sp.encode([valid_text(t) for t in texts], out_type=int)


@pytest.mark.parametrize("type", ["bpe", "unigram", "char"])
@pytest.mark.parametrize("lowercase", [False, True])
def test_kept_word_pieces_cut_texts_as_sentencepiece_does(tmp_path, type, lowercase):
    config = SubwordConfig(type=type, vocab_size=60, lowercase=lowercase)
    src_sw, _ = train_subwords(zip(SOURCES, TARGETS), config, tmp_path, tags=["<bt>"])
    assert src_sw._word_pieces is not None  # attnmt's models cut words alone
    texts = SOURCES[:100] + AROUND_WORDS + HELD_OUT_SRC
    assert src_sw.encode(texts) == whole(src_sw, texts)  # words first seen
    assert src_sw.encode(texts[::-1]) == whole(src_sw, texts[::-1])  # words kept
    if lowercase:  # a word that case folding changes is not kept: its text goes to sentencepiece whole
        assert src_sw._word_pieces["Hund"] is None and src_sw._word_pieces["hund"] is not None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(TEXT_CHARACTERS, max_size=40), min_size=1, max_size=8))
def test_kept_word_pieces_cut_any_text_as_sentencepiece_does(bpe_with_tag, texts):
    assert bpe_with_tag.encode(texts) == whole(bpe_with_tag, texts)


@pytest.fixture(scope="module")
def bpe_with_tag(tmp_path_factory):
    src_sw, _ = train_subwords(
        zip(SOURCES, TARGETS), SubwordConfig(type="bpe", vocab_size=60), tmp_path_factory.mktemp("bpe"), tags=["<bt>"]
    )
    return src_sw


def test_a_text_of_kept_words_is_not_cut_again(tmp_path, monkeypatch):
    src_sw, _ = train(tmp_path)
    expected = src_sw.encode(SOURCES)

    def cut(*args, **kwargs):
        raise AssertionError("sentencepiece asked to cut a text of kept words")

    monkeypatch.setattr(src_sw, "sp", SimpleNamespace(encode=cut))
    assert src_sw.encode(SOURCES[::-1]) == expected[::-1]


def test_the_kept_words_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(subwords, "WORD_CACHE_WORDS", 12)
    src_sw, _ = train(tmp_path)
    for start in range(0, 100, 10):
        texts = SOURCES[start : start + 10]
        assert src_sw.encode(texts) == whole(src_sw, texts)
        assert len(src_sw._word_pieces) <= 12


@pytest.mark.parametrize(
    "option", [{"split_by_whitespace": False}, {"treat_whitespace_as_suffix": True}, {"add_dummy_prefix": False}]
)
def test_models_that_do_not_cut_words_alone_cut_whole_texts(tmp_path, option):
    """A model whose pieces may span words (or that marks words otherwise) keeps no words, and
    cuts as sentencepiece does."""
    prefix = tmp_path / "m"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SOURCES), model_prefix=str(prefix), vocab_size=60, minloglevel=2, **option
    )
    sw = Subwords(prefix.with_suffix(".model"))
    assert sw._word_pieces is None
    texts = SOURCES[:50] + AROUND_WORDS
    assert sw.encode(texts) == whole(sw, texts)
