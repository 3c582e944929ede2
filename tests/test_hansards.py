"""E4's corpus: Multi30k English-French tokenized the way the Hansards gold text is."""

import gzip
from importlib.util import find_spec

import pytest

from attnmt.translation.hansards import tokenize, write_corpus
from conftest import require


@pytest.fixture(autouse=True)
def _sacremoses():
    require(find_spec("sacremoses") is not None, "pip install sacremoses (attnmt[experiments])")


def test_french_is_lowercased_split_and_its_articles_written_out():
    assert tokenize(["L'homme du village va aux champs, peut-être."], "fr") == [
        "le homme de le village va à les champs , peut - être ."
    ]
    assert tokenize(["Il n\u2019a pas d'eau."], "fr") == ["il ne a pas de eau ."]


def test_english_keeps_its_words():
    assert tokenize(["A dog's well-known toy."], "en") == ["a dog 's well - known toy ."]


def test_write_corpus_writes_every_split_and_the_gold_text_lowercased(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    (data / "multi30k").mkdir(parents=True)
    (data / "alignment").mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        for lang, text in (("en", "The Dog.\nA cat.\n"), ("fr", "Le chien.\nDes chats.\n")):
            with gzip.open(data / "multi30k" / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write(text)
    (data / "alignment" / "hansards-enfr.src-tgt").write_text("The House ||| La Chambre\n")
    (data / "alignment" / "hansards-enfr.gold").write_text("1-1 2p2\n")
    out.mkdir()
    written = write_corpus(out, data)
    assert sorted(written) == sorted(
        [f"{s}.{lang}" for s in ("train", "val", "test") for lang in ("en", "fr")] + ["hansards.pairs", "hansards.gold"]
    )
    assert (out / "test.fr").read_text() == "le chien .\nde les chats .\n"
    assert (out / "hansards.pairs").read_text() == "the house ||| la chambre\n"
    assert (out / "hansards.gold").read_text() == "1-1 2p2\n"  # the links as they are: never trained on
