"""A spoken corpus made on the spot with espeak-ng: numbers, dates and short sentences read by
several voices at several speeds and pitches, for `attnmt quickstart --speech` and the tests.

Transcripts are lowercase words, exactly what espeak-ng is given to say. The test set is read
half by voices, speeds and pitches seen in training and half by unseen ones (other accents and
voice variants, faster speech), so its error rate says whether the model learnt to recognise
speech rather than to recognise the training voices.

    write_spoken_corpus(folder, n_train, n_dev, n_test)  -> folder/{train,dev,test}.tsv + wav/
    join_utterances(tsv, out, copies, seed)              -> longer utterances: audio and text joined
    read_pieces(tsv)                                     -> where each joined utterance lies in the audio
"""

from __future__ import annotations

import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnmt.core.errors import AttnmtError
from attnmt.core.progress import phase_bar
from attnmt.data.corpus import stream_lines

SAMPLE_RATE = 16000  # the joined corpora are written at this rate

ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split()
)
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
MONTHS = "january february march april may june july august september october november december".split()
ORDINALS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
    "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth"
).split()
NAMES = "anna ben clara david emma frank grace henry".split()
VERBS = "sees likes finds paints opens closes".split()
ADJECTIVES = "red green small big old new".split()
NOUNS = "cat dog house car book door tree box".split()

# Voices: espeak-ng language voices with a variant (+m1 ...). Training uses the first ones; the
# test set also hears the others, and faster speech.
SEEN_LANGUAGES, UNSEEN_LANGUAGES = ["en-us", "en", "en-gb-x-rp"], ["en-gb-scotland", "en-029"]
SEEN_VARIANTS, UNSEEN_VARIANTS = ["m1", "m2", "m3", "f1", "f2"], ["m4", "f3"]
SEEN_SPEEDS, UNSEEN_SPEEDS = (140, 180), (185, 205)  # words per minute
PITCHES = (35, 65)


def number_words(n: int) -> str:
    """0 <= n < 1000 in English words: 342 -> "three hundred forty two"."""
    hundreds, rest = divmod(n, 100)
    words = [ONES[hundreds], "hundred"] if hundreds else []
    if rest >= 20:
        words += [TENS[rest // 10]] + ([ONES[rest % 10]] if rest % 10 else [])
    elif rest or not words:
        words.append(ONES[rest])
    return " ".join(words)


def utterance_text(rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        return number_words(rng.randrange(1000))
    if kind == 1:
        return f"{rng.choice(MONTHS)} {rng.choice(ORDINALS)}"
    return f"{rng.choice(NAMES)} {rng.choice(VERBS)} the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"


@dataclass
class Voice:
    language: str
    variant: str
    speed: int
    pitch: int

    @property
    def name(self) -> str:
        return f"{self.language}+{self.variant}"


def random_voice(rng: random.Random, unseen: bool) -> Voice:
    """A voice of training (unseen False), or, for half the test, an unseen accent or variant
    at an unseen speed."""
    languages = UNSEEN_LANGUAGES if unseen else SEEN_LANGUAGES
    variants = SEEN_VARIANTS + UNSEEN_VARIANTS if unseen else SEEN_VARIANTS
    speeds = UNSEEN_SPEEDS if unseen else SEEN_SPEEDS
    return Voice(rng.choice(languages), rng.choice(variants), rng.randint(*speeds), rng.randint(*PITCHES))


def espeak_path() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise AttnmtError(
            "espeak-ng is not installed: the spoken corpus is synthesized with it. Install it with "
            "'sudo apt-get install espeak-ng' (Debian, Ubuntu), 'brew install espeak-ng' (macOS) or "
            "'sudo dnf install espeak-ng' (Fedora), then run the command again"
        )
    return path


def synthesize(text: str, voice: Voice, out: Path, espeak: str | None = None):
    command = [
        espeak or espeak_path(),
        "-v",
        voice.name,
        "-s",
        str(voice.speed),
        "-p",
        str(voice.pitch),
        "-w",
        str(out),
        text,
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not out.is_file():
        raise AttnmtError(f"espeak-ng failed for {text!r} with voice {voice.name}: {result.stderr.strip()}")


def write_spoken_corpus(
    folder: Path, n_train: int = 2500, n_dev: int = 150, n_test: int = 300, seed: int = 1, log=print
) -> dict[str, Path]:
    """Synthesizes the corpus into ``folder`` (wav/ and train/dev/test TSV files of
    ``wav/NAME.wav<TAB>transcript``), unless it is already there; returns the TSV paths."""
    folder = Path(folder)
    sets = {"train": n_train, "dev": n_dev, "test": n_test}
    paths = {name: folder / f"{name}.tsv" for name in sets}
    if all(p.is_file() for p in paths.values()):
        return paths
    espeak = espeak_path()
    rng = random.Random(seed)
    (folder / "wav").mkdir(parents=True, exist_ok=True)
    jobs, lines = [], {name: [] for name in sets}
    for name, count in sets.items():
        for i in range(count):
            text = utterance_text(rng)
            voice = random_voice(rng, unseen=name == "test" and i % 2 == 1)
            wav = f"wav/{name}-{i:05d}.wav"
            jobs.append((text, voice, folder / wav))
            lines[name].append(f"{wav}\t{text}\t{voice.name}\t{voice.speed}\t{voice.pitch}\n")
    log(f"synthesizing {len(jobs):,} utterances with espeak-ng into {folder}")
    with ThreadPoolExecutor(max_workers=2) as pool, phase_bar(len(jobs), "synthesizing", "utterance") as bar:
        for _ in pool.map(lambda job: synthesize(*job, espeak=espeak), jobs):  # espeak-ng processes, two at a time
            bar.update(1)
    for name in sets:  # written last: a corpus interrupted half-way is made again
        paths[name].write_text("".join(lines[name]), encoding="utf-8")
    return paths


def join_with_pauses(
    waveforms: list[np.ndarray],
    rng: random.Random,
    sample_rate: int = SAMPLE_RATE,
    pause_seconds: tuple[float, float] = (0.05, 0.3),
) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The waveforms one after the other, with a random pause of silence between two, and where
    each one lies in the result: (start, end) in seconds."""
    pieces, spans, samples = [], [], 0
    for i, wave in enumerate(waveforms):
        if i:
            pieces.append(np.zeros(int(rng.uniform(*pause_seconds) * sample_rate), dtype=np.float32))
            samples += len(pieces[-1])
        pieces.append(wave.astype(np.float32))
        spans.append((samples / sample_rate, (samples + len(wave)) / sample_rate))
        samples += len(wave)
    return np.concatenate(pieces), spans


def format_pieces(spans: list[tuple[float, float]], texts: list[str]) -> str:
    """The pieces column of a joined corpus: "START-END:WORDS" for each joined recording, in seconds,
    e.g. "0.000-0.412:1 0.598-1.020:1"."""
    return " ".join(f"{start:.3f}-{end:.3f}:{len(text.split())}" for (start, end), text in zip(spans, texts))


@dataclass
class Piece:
    """One recording of a joined utterance: where it lies in the audio and how many words it says."""

    start: float
    end: float
    words: int


def parse_pieces(text: str, where: str) -> list[Piece]:
    try:
        pieces = []
        for item in text.split():
            span, words = item.split(":")
            start, end = span.split("-")
            pieces.append(Piece(float(start), float(end), int(words)))
    except ValueError:
        raise AttnmtError(f"{where}: pieces column {text!r} is not START-END:WORDS ...") from None
    if not pieces:
        raise AttnmtError(f"{where}: empty pieces column")
    return pieces


def read_pieces(tsv: Path) -> list[list[Piece]]:
    """The pieces column (the third) of each line of a joined corpus: join_utterances' and
    attnmt.speech.digits' TSV files, read line by line (attnmt.data.corpus.stream_lines: a missing
    file or bad UTF-8 is an error naming it). Each transcript has as many words as its pieces
    together."""
    pieces = []
    for number, line in enumerate(stream_lines(tsv), 1):
        columns = line.split("\t")
        where = f"{tsv}, line {number}"
        if len(columns) < 3:
            raise AttnmtError(f"{where}: no pieces column (the third: START-END:WORDS ...)")
        pieces.append(parse_pieces(columns[2], where))
        if sum(p.words for p in pieces[-1]) != len(columns[1].split()):
            raise AttnmtError(
                f"{where}: the pieces say {sum(p.words for p in pieces[-1])} words, the transcript "
                f"has {len(columns[1].split())}"
            )
    return pieces


def join_utterances(tsv: Path, out_folder: Path, copies: int, count: int, seed: int = 1) -> Path:
    """``count`` utterances each made of ``copies`` random utterances of ``tsv`` joined (audio with
    short pauses, transcripts with spaces): the test of recognising longer utterances than in
    training. Writes out_folder/joined-{copies}.tsv (audio, transcript, pieces: where each joined
    utterance lies, see read_pieces) and its WAV files at 16 kHz."""
    import soundfile

    from attnmt.speech.audio import read_audio, read_speech_tsv

    paths, texts = read_speech_tsv(tsv)
    rng = random.Random(seed * 1000 + copies)
    wav_folder = Path(out_folder) / f"joined-{copies}"
    wav_folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(count):
        chosen = [rng.randrange(len(paths)) for _ in range(copies)]
        audio, spans = join_with_pauses([read_audio(Path(tsv).parent / paths[j], SAMPLE_RATE) for j in chosen], rng)
        soundfile.write(wav_folder / f"{i:05d}.wav", audio, SAMPLE_RATE)
        parts = [texts[j] for j in chosen]
        lines.append(f"joined-{copies}/{i:05d}.wav\t{' '.join(parts)}\t{format_pieces(spans, parts)}\n")
    out = Path(out_folder) / f"joined-{copies}.tsv"
    out.write_text("".join(lines), encoding="utf-8")
    return out
