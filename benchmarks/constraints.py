"""Lexically constrained decoding with phrases of the reference: do they get in, how does BLEU move, and
what do they cost?

    flock /tmp/attnmt-bench.lock python benchmarks/constraints.py runs/experiments/transformer-averaged

Post & Vilar (2018) give each test sentence phrases drawn from its reference as constraints (as a
translator's terms would be) and decode with dynamic beam allocation; BLEU rises with the number of
constraints, and the time per sentence does not grow with it (grid beam search's grows linearly).
Here, for each sentence of the test set (default Multi30k test_2016, German -> English), --counts
constraints are drawn from its reference (seeded): spans of 1-3 words, not overlapping, their
punctuation stripped. Each line: the beam, the constraints per sentence, sacreBLEU, the share of
outputs that hold every constraint (as text), the share whose constraint comes after the end of the
sentence (a final ". " before it: the known failure of the method), and seconds per sentence,
relative to the unconstrained search of the same beam in the same run (2 threads: one at a time).
"""

from __future__ import annotations

import argparse
import random
import re
import time
from pathlib import Path

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def reference_phrases(reference: str, count: int, rng: random.Random) -> list[str]:
    """Up to ``count`` spans of 1-3 words of ``reference``, not overlapping, without their punctuation."""
    words = [w.strip(".,;:!?\"'()") for w in reference.split()]
    free, phrases = set(range(len(words))), []
    for _ in range(count):
        starts = [i for i in sorted(free) if words[i]]
        if not starts:
            break
        start = rng.choice(starts)
        length = rng.randint(1, 3)
        span = [i for i in range(start, min(start + length, len(words))) if i in free and words[i]]
        span = span[: next((n for n, i in enumerate(span) if i != start + n), len(span))]  # contiguous
        phrases.append(" ".join(words[i] for i in span))
        free -= set(span)
    return phrases


def run(model, sources, references, beam: int, constraints) -> dict:
    import sacrebleu

    started = time.perf_counter()
    outputs = [t.text for t in model.translate(sources, beam=beam, batch_size=32, constraints=constraints)]
    seconds = time.perf_counter() - started
    held = late = 0
    for output, phrases in zip(outputs, constraints or [[]] * len(outputs)):
        held += all(p in output for p in phrases)
        late += any(re.search(r"[.!?] .*" + re.escape(p), output) for p in phrases)
    return {
        "bleu": sacrebleu.corpus_bleu(outputs, [references]).score,
        "held": held / len(outputs),
        "late": late / len(outputs),
        "seconds": seconds / len(outputs),
    }


def main():
    import attnmt
    from attnmt.data.corpus import read_lines

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument(
        "--test", nargs=2, type=Path, default=[MULTI30K / "test_2016_flickr.de.gz", MULTI30K / "test_2016_flickr.en.gz"]
    )
    parser.add_argument("--beams", type=lambda s: [int(x) for x in s.split(",")], default=[5, 10])
    parser.add_argument("--counts", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--length-penalty", type=float, default=None, help="alpha (default: the model's config)")
    parser.add_argument("--limit", type=int, default=None, help="the first N sentences (a quick check)")
    args = parser.parse_args()
    from requirements import check, path, trained_model

    check(
        "benchmarks/constraints.py",
        trained_model(args.model, "the model to decode with"),
        [path(file, "the test set (--test)") for file in args.test],
    )
    sources, references = (read_lines(path)[: args.limit] for path in args.test)
    model = attnmt.load(args.model, args.checkpoint)
    if args.length_penalty is not None:
        model.set_decoding(length_penalty=args.length_penalty)
    print(
        f"constrained decoding of {len(sources)} sentences, {args.model}, length penalty "
        f"{model.config.decoding.length_penalty:g}; {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(
        f"{'beam':>5} {'constraints':>12} {'BLEU':>7} {'all held':>9} {'after the end':>14} {'s/sentence':>11} "
        f"{'x plain':>8}"
    )
    for beam in args.beams:
        plain = run(model, sources, references, beam, None)
        print(f"{beam:>5} {0:>12} {plain['bleu']:7.2f} {'':>9} {'':>14} {plain['seconds']:11.4f} {1:8.2f}")
        for count in args.counts:
            rng = random.Random(args.seed)
            constraints = [reference_phrases(r, count, rng) for r in references]
            r = run(model, sources, references, beam, constraints)
            print(
                f"{beam:>5} {count:>12} {r['bleu']:7.2f} {100 * r['held']:8.1f}% {100 * r['late']:13.1f}% "
                f"{r['seconds']:11.4f} {r['seconds'] / plain['seconds']:8.2f}"
            )


if __name__ == "__main__":
    main()
