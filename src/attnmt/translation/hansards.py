"""English-French word alignment on the Hansards gold set: the training text of experiment E4.

The gold set (447 pairs of the 2003 HLT-NAACL shared task, ../shared/data/alignment) is
tokenized, with French articles de-contracted ("de les" for "des", "le avis" for "l'avis").
Aligners learn from unlabelled text, so Multi30k's English-French pairs are made to look the
same (sacremoses' Moses tokenizer, lowercased, French elisions and contractions written out,
hyphens split), so that the words of the training text and the gold text match; the gold text
is lowercased too. The gold links are never trained on: only the text of the 447 pairs, which
`attnmt compare --align-pairs` appends to the training text of every model and of the
statistical aligner.

    python -m attnmt.translation.hansards OUT_DIR [--data ../shared/data]

writes OUT_DIR/{train,val,test}.{en,fr} (Multi30k's train, val and test_2016_flickr) and
hansards.pairs (the gold text, "english ||| french" lines) beside a copy of the gold links,
hansards.gold (1-based).
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text
from attnmt.data.corpus import read_lines

ELISIONS = {
    "l'": "le",
    "d'": "de",
    "n'": "ne",
    "j'": "je",
    "qu'": "que",
    "c'": "ce",
    "s'": "se",
    "m'": "me",
    "t'": "te",
    "jusqu'": "jusque",
    "lorsqu'": "lorsque",
    "puisqu'": "puisque",
}
CONTRACTIONS = {"du": "de le", "des": "de les", "au": "à le", "aux": "à les"}
WORD_HYPHEN = re.compile(r"(?<=\w)-(?=\w)")


def tokenize(lines: list[str], lang: str) -> list[str]:
    """Lines as the gold text writes them: Moses tokens, lowercased, hyphens apart ("peut - être");
    in French, elided and contracted articles written out."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise AttnmtError(
            "tokenizing needs the sacremoses package: pip install sacremoses (or pip install 'attnmt[experiments]')"
        ) from None
    tokenizer = MosesTokenizer(lang)
    out = []
    for line in lines:
        text = WORD_HYPHEN.sub(" - ", line.replace("\u2019", "'").lower())
        words = tokenizer.tokenize(text, escape=False)
        if lang == "fr":
            words = [ELISIONS.get(w, CONTRACTIONS.get(w, w)) for w in words]
        out.append(" ".join(words))
    return out


def write_corpus(out: Path, data: Path) -> dict[str, Path]:
    """The tokenized Multi30k English-French train, val and test sets and the gold text and links in ``out``."""
    multi30k, gold = data / "multi30k", data / "alignment"
    written = {}
    for split, name in (("train", "train"), ("val", "val"), ("test_2016_flickr", "test")):
        for lang in ("en", "fr"):
            path = out / f"{name}.{lang}"
            lines = tokenize(read_lines(multi30k / f"{split}.{lang}.gz"), lang)
            atomic_write_text(path, "".join(line + "\n" for line in lines))
            written[path.name] = path
    pairs = []
    for number, line in enumerate(read_lines(gold / "hansards-enfr.src-tgt"), start=1):
        if line.count("|||") != 1:
            raise AttnmtError(f"{gold / 'hansards-enfr.src-tgt'}: line {number} is not 'english ||| french'")
        english, french = line.split("|||")
        pairs.append(f"{' '.join(english.lower().split())} ||| {' '.join(french.lower().split())}\n")
    atomic_write_text(out / "hansards.pairs", "".join(pairs))
    shutil.copyfile(gold / "hansards-enfr.gold", out / "hansards.gold")
    written.update({"hansards.pairs": out / "hansards.pairs", "hansards.gold": out / "hansards.gold"})
    return written


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m attnmt.translation.hansards", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write the corpus to")
    parser.add_argument("--data", default="../shared/data", help="the shared data folder (default ../shared/data)")
    args = parser.parse_args(argv)
    for name, path in write_corpus(Path(args.out), Path(args.data)).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
