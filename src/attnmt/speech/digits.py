"""Digit strings of real speech, made from the Free Spoken Digit Dataset (FSDD: 2,500 recordings
of single digits, 5 speakers, 50 of each digit by each; files ``{digit}_{speaker}_{index}.wav``).

A string is 1 to n recordings of one speaker joined with short random pauses (50-300 ms); its
transcript is the digit words ("three one four"). The TSV files' columns: WAV file, transcript,
where each digit lies in the audio (START-END:1 in seconds, attnmt.speech.corpora.read_pieces),
speaker, the recordings joined. Seeded: the same arguments give the same
corpus. The sets:

    train         1-3 digits (--short), 4 speakers, recordings 5-49 of each digit
    dev           1-3 digits, the same speakers, recordings 0-4 (never in training)
    test-speaker  1-3 digits, the fifth speaker, never heard in training
    test-long     4-8 digits (--long), the training speakers, recordings 0-4: longer than any in training
    test-long-speaker  4-8 digits, the fifth speaker

    python -m attnmt.speech.digits ../shared/data/speech/fsdd runs/digits/data
"""

from __future__ import annotations

import argparse
import random
import re
from collections import defaultdict
from pathlib import Path

from attnmt.core.errors import AttnmtError
from attnmt.speech.corpora import SAMPLE_RATE, format_pieces, join_with_pauses

WORDS = "zero one two three four five six seven eight nine".split()
HELD_OUT = range(5)  # recording indices kept out of training (the dataset's usual test split)
FILE = re.compile(r"^(\d)_([a-z]+)_(\d+)\.wav$")


def recordings(fsdd: Path) -> dict[str, dict[int, list[Path]]]:
    """speaker -> digit -> recordings (sorted by index)."""
    found: dict[str, dict[int, list[tuple[int, Path]]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(Path(fsdd).glob("*.wav")):
        match = FILE.match(path.name)
        if match:
            digit, speaker, index = int(match[1]), match[2], int(match[3])
            found[speaker][digit].append((index, path))
    if not found:
        raise AttnmtError(f"{fsdd}: no FSDD recordings (files named DIGIT_SPEAKER_INDEX.wav)")
    return {s: {d: [p for _, p in sorted(files)] for d, files in digits.items()} for s, digits in found.items()}


def _pick(files: list[Path], held_out: bool, rng: random.Random) -> Path:
    """A recording among the held-out indices (0-4) or the others."""
    indices = [i for i in range(len(files)) if (i in HELD_OUT) == held_out]
    return files[rng.choice(indices)]


def write_set(
    by_speaker: dict,
    speakers: list[str],
    lengths: tuple[int, int],
    count: int,
    held_out: bool,
    out: Path,
    name: str,
    rng: random.Random,
) -> Path:
    import soundfile

    from attnmt.speech.audio import read_audio

    (out / name).mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(count):
        speaker = rng.choice(speakers)
        digits = [rng.randrange(10) for _ in range(rng.randint(*lengths))]
        files = [_pick(by_speaker[speaker][d], held_out, rng) for d in digits]
        audio, spans = join_with_pauses([read_audio(f, SAMPLE_RATE) for f in files], rng)
        soundfile.write(out / name / f"{i:05d}.wav", audio, SAMPLE_RATE)
        words = [WORDS[d] for d in digits]
        sources = "+".join(f.name for f in files)
        lines.append(f"{name}/{i:05d}.wav\t{' '.join(words)}\t{format_pieces(spans, words)}\t{speaker}\t{sources}\n")
    path = out / f"{name}.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def write_digit_corpus(
    fsdd: Path,
    out: Path,
    test_speaker: str = "theo",
    seed: int = 1,
    n_train: int = 3000,
    n_dev: int = 200,
    n_test: int = 300,
    log=print,
    short: tuple[int, int] = (1, 3),
    long: tuple[int, int] = (4, 8),
) -> dict[str, Path]:
    """``short``: the digits of a training, dev and test-speaker string (at least, at most); ``long``:
    those of the test-long sets."""
    if not 1 <= short[0] <= short[1] < long[0] <= long[1]:
        raise AttnmtError(f"digit string lengths: need 1 <= {short[0]} <= {short[1]} < {long[0]} <= {long[1]}")
    by_speaker = recordings(fsdd)
    if test_speaker not in by_speaker:
        raise AttnmtError(f"{fsdd}: no recordings of speaker {test_speaker!r} (speakers: {', '.join(by_speaker)})")
    train_speakers = sorted(s for s in by_speaker if s != test_speaker)
    out = Path(out)
    rng = random.Random(seed)
    log(f"digit strings from {fsdd}: training speakers {', '.join(train_speakers)}; unseen: {test_speaker}")
    plan = {
        "train": (train_speakers, short, n_train, False),
        "dev": (train_speakers, short, n_dev, True),
        "test-speaker": ([test_speaker], short, n_test, False),
        "test-long": (train_speakers, long, n_test, True),
        "test-long-speaker": ([test_speaker], long, n_test, False),
    }
    return {
        name: write_set(by_speaker, speakers, lengths, count, held_out, out, name, rng)
        for name, (speakers, lengths, count, held_out) in plan.items()
    }


def lengths(text: str) -> tuple[int, int]:
    """ "1-3" -> (1, 3)."""
    low, dash, high = text.partition("-")
    if not (low.strip().isdigit() and (not dash or high.strip().isdigit())):
        raise argparse.ArgumentTypeError(f"expected MIN-MAX digits, e.g. 1-3, got {text!r}")
    return int(low), int(high if dash else low)


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description="Digit-string corpus from the Free Spoken Digit Dataset")
    parser.add_argument("fsdd", help="folder of the FSDD recordings")
    parser.add_argument("out", help="folder for the TSV files and WAV files")
    parser.add_argument("--test-speaker", default="theo")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train", type=int, default=3000, help="training strings")
    parser.add_argument(
        "--short",
        type=lengths,
        default=(1, 3),
        metavar="MIN-MAX",
        help="digits of the training, dev and test-speaker strings (default 1-3)",
    )
    parser.add_argument(
        "--long", type=lengths, default=(4, 8), metavar="MIN-MAX", help="digits of the test-long strings (default 4-8)"
    )
    args = parser.parse_args(argv)
    for name, path in write_digit_corpus(
        Path(args.fsdd), Path(args.out), args.test_speaker, args.seed, args.train, short=args.short, long=args.long
    ).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
