"""Interactive translation with prefix-constrained decoding (translate(prefix=...)): how often the model's
next word is the reference's, given the reference's words before it as the prefix — the word
prediction accuracy of Knowles & Koehn (2016), who measured 61.6 % for their neural model against
43.3 % for a phrase-based one (English-German news).

    flock /tmp/attnmt-bench.lock python benchmarks/prefix_prediction.py --model runs/experiments/transformer-averaged

For every sentence of the test set (default: Multi30k test_2016_flickr German -> English, the first
--limit) and every position k of its reference's words (whitespace-separated), the first k words are
the prefix (with a space after them: whole words, none left to complete) and greedy search (--beam
1, or a beam) writes the rest; the word at position k of the
output is compared with the reference's. Then again with the first letter of word k typed too (a
prefix ending inside a word, which the model completes). Prints the accuracy over all positions
and by position (the first word, 2-5, 6 and beyond), the number of predictions and the time they
took; and, for
scale, the same comparison for the translation written without a prefix (its word k against the
reference's word k: once a free translation words a sentence otherwise, its later words rarely
line up).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
BUCKETS = (("first word", 0, 1), ("words 2-5", 1, 5), ("words 6+", 5, 10_000))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a translation model folder")
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--src", type=Path, default=MULTI30K / "test_2016_flickr.de.gz")
    parser.add_argument("--ref", type=Path, default=MULTI30K / "test_2016_flickr.en.gz")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--beam", type=int, default=1)
    args = parser.parse_args()
    from requirements import check, path, trained_model

    check(
        "benchmarks/prefix_prediction.py",
        trained_model(args.model, "the translation model (--model)"),
        [path(file, option) for file, option in ((args.src, "--src"), (args.ref, "--ref"))],
    )

    import attnmt
    from attnmt.data.corpus import read_lines  # plain or gzip, errors naming the file

    translator = attnmt.load(args.model, args.checkpoint)
    sources, references = read_lines(args.src)[: args.limit], read_lines(args.ref)[: args.limit]
    texts, prefixes, expected, positions = [], [], [], []
    for source, reference in zip(sources, references):
        words = reference.split()
        for k in range(len(words)):
            texts.append(source)
            prefixes.append(" ".join(words[:k]) + " ")  # whole words: the trailing space ends the last one
            expected.append(words[k])
            positions.append(k)
    start = time.perf_counter()
    outputs = [t.text.split() for t in translator.translate(texts, beam=args.beam, batch_size=64, prefix=prefixes)]
    seconds = time.perf_counter() - start
    right = [len(out) > k and out[k] == word for out, k, word in zip(outputs, positions, expected)]
    lettered = [p + word[0] for p, word in zip(prefixes, expected)]
    completed = [t.text.split() for t in translator.translate(texts, beam=args.beam, batch_size=64, prefix=lettered)]
    letter = [len(out) > k and out[k] == word for out, k, word in zip(completed, positions, expected)]
    free = {source: t.text.split() for source, t in zip(sources, translator.translate(sources, beam=args.beam))}
    unforced = [len(free[text]) > k and free[text][k] == word for text, k, word in zip(texts, positions, expected)]
    print(
        f"{translator.folder} ({args.checkpoint}), {len(sources)} sentences of {args.src.name}, beam {args.beam}: "
        f"{len(right)} predictions in {seconds:.0f} s"
    )
    print(f"{'':<14}{'the reference as prefix':>26}{'and a letter':>14}{'no prefix':>12}")
    for name, low, high in (("all words", 0, 10_000), *BUCKETS):
        chosen = [i for i, k in enumerate(positions) if low <= k < high]
        print(
            f"{name:<14}{share(right, chosen):>26}{share(letter, chosen):>14}{share(unforced, chosen):>12}  "
            f"({len(chosen)} predictions)"
        )


def share(hits: list[bool], chosen: list[int]) -> str:
    return f"{sum(hits[i] for i in chosen) / len(chosen):.1%}"


if __name__ == "__main__":
    main()
