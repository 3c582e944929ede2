"""The corpora of the speech task: espeak-ng's synthesized speech (its voices, the quick start), the
digit strings of real speech made from FSDD, and longer utterances made by joining others."""

import shutil

import pytest
import soundfile

from attnmt.cli import main
from attnmt.core.errors import AttnmtError
from attnmt.speech import corpora as speech
from attnmt.speech import digits
from attnmt.speech.audio import read_speech_tsv
from conftest import require, shared_data


def espeak():
    require(
        shutil.which("espeak-ng") is not None,
        "espeak-ng not found: the speech corpus is synthesized with it "
        "(Debian: apt-get install espeak-ng, as .ci/run does)",
    )


def columns(tsv):
    return [line.split("\t") for line in tsv.read_text(encoding="utf-8").splitlines()]


def test_number_words():
    assert [speech.number_words(n) for n in (0, 7, 13, 40, 42, 100, 305, 999)] == [
        "zero",
        "seven",
        "thirteen",
        "forty",
        "forty two",
        "one hundred",
        "three hundred five",
        "nine hundred ninety nine",
    ]


def test_spoken_corpus_has_unseen_voices_in_its_test_set_only(tmp_path):
    espeak()
    paths = speech.write_spoken_corpus(tmp_path, n_train=6, n_dev=2, n_test=6, seed=3, log=lambda m: None)
    seen_languages = set(speech.SEEN_LANGUAGES)
    train, test = columns(paths["train"]), columns(paths["test"])
    assert len(train) == 6 and len(test) == 6 and len(columns(paths["dev"])) == 2
    for wav, text, voice, wpm, pitch in train:
        language, variant = voice.split("+")
        assert language in seen_languages and variant in speech.SEEN_VARIANTS
        assert speech.SEEN_SPEEDS[0] <= int(wpm) <= speech.SEEN_SPEEDS[1]
        assert speech.PITCHES[0] <= int(pitch) <= speech.PITCHES[1]
        assert soundfile.info(tmp_path / wav).duration > 0.3 and text == text.lower()
    unseen = [row for row in test if row[2].split("+")[0] not in seen_languages]
    assert len(unseen) == 3 and all(int(row[3]) >= speech.UNSEEN_SPEEDS[0] for row in unseen)
    assert speech.write_spoken_corpus(tmp_path, 6, 2, 6, seed=3) == paths  # already there: not made again


def test_quickstart_speech_without_espeak_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["quickstart", "--speech", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "espeak-ng is not installed" in err and "apt-get install espeak-ng" in err


@pytest.mark.slow
def test_quickstart_speech_end_to_end(tmp_path, capsys):
    """The quick start on a small corpus and a few steps: it synthesizes, trains, scores the held-out
    speech and draws an alignment (the real one is 2,950 utterances and 800 steps)."""
    espeak()
    from attnmt.speech.quickstart import run_speech_quickstart

    messages = []
    result = run_speech_quickstart(tmp_path, steps=6, sizes=(24, 4, 6), log=messages.append, progress=False)
    out = capsys.readouterr().out
    assert result["report"]["utterances"] == 6
    assert any(m.startswith("\nheld-out speech") and "CER" in m for m in messages)
    assert "each row an output character, each column 40 ms of audio" in out
    assert (tmp_path / "attention.json").is_file() and (tmp_path / "model" / "test-scores.json").is_file()


def test_digit_strings_from_real_speech(tmp_path):
    fsdd = shared_data("speech", "fsdd")
    paths = digits.write_digit_corpus(fsdd, tmp_path, n_train=30, n_dev=5, n_test=8, log=lambda m: None)
    for name, tsv in paths.items():
        rows = columns(tsv)
        assert len(rows) == (30 if name == "train" else 5 if name == "dev" else 8)
        for wav, text, pieces, speaker, sources in rows:
            words = text.split()
            low, high = (4, 8) if "long" in name else (1, 3)
            assert low <= len(words) <= high and all(w in digits.WORDS for w in words)
            assert (speaker == "theo") == name.endswith("speaker")
            recordings = sources.split("+")
            assert [digits.WORDS[int(r.split("_")[0])] for r in recordings] == words
            assert all(r.split("_")[1] == speaker for r in recordings)
            indices = {int(r.split("_")[2].removesuffix(".wav")) for r in recordings}
            if name in ("dev", "test-long"):
                assert indices <= set(digits.HELD_OUT)
            if name == "train":
                assert not indices & set(digits.HELD_OUT)  # dev and test-long recordings never trained on
            assert soundfile.info(tmp_path / wav).duration > 0.2
            spans = speech.parse_pieces(pieces, wav)  # one recording a digit, in order, within the audio
            assert len(spans) == len(words) and all(p.words == 1 for p in spans)
            assert all(a.end < b.start for a, b in zip(spans, spans[1:]))
            assert spans[-1].end == pytest.approx(soundfile.info(tmp_path / wav).duration, abs=1e-3)
    again = digits.write_digit_corpus(fsdd, tmp_path / "again", n_train=30, n_dev=5, n_test=8, log=lambda m: None)
    assert all(columns(paths[n]) == columns(again[n]) for n in paths)  # seeded
    other = digits.write_digit_corpus(
        fsdd, tmp_path / "other", n_train=4, n_dev=2, n_test=6, log=lambda m: None, short=(2, 2), long=(5, 6)
    )
    assert {len(row[1].split()) for row in columns(other["train"])} == {2}
    assert {len(row[1].split()) for row in columns(other["test-long"])} <= {5, 6}
    with pytest.raises(AttnmtError, match="digit string lengths"):
        digits.write_digit_corpus(fsdd, tmp_path / "bad", short=(1, 4), long=(4, 8))
    assert digits.lengths("1-6") == (1, 6) and digits.lengths("7") == (7, 7)


def test_joined_utterances_are_longer_with_joined_transcripts(tmp_path):
    import numpy as np

    from speech_helpers import write_tone_corpus

    tsv = write_tone_corpus(tmp_path, "set", ["ab", "cd", "dd ab"])
    joined = speech.join_utterances(tsv, tmp_path, copies=3, count=4, seed=1)
    _, originals = read_speech_tsv(tsv)
    for (wav, text), pieces in zip(zip(*read_speech_tsv(joined)), speech.read_pieces(joined)):
        parts = text.split(" ")
        assert len(text.split()) >= 3 and all(p in " ".join(originals).split() for p in parts)
        samples, rate = soundfile.read(tmp_path / wav)
        assert rate == speech.SAMPLE_RATE and np.abs(samples).max() > 0.1
        assert len(samples) >= 3 * 2 * 0.08 * rate + 2 * 0.05 * rate  # three utterances of 2+ letters, 2 pauses
        # the pieces say where each utterance lies: sound inside, at least 50 ms of silence between two
        assert len(pieces) == 3 and sum(p.words for p in pieces) == len(parts)
        assert pieces[0].start == 0 and pieces[-1].end == pytest.approx(len(samples) / rate, abs=1e-3)  # ms
        for piece in pieces:
            assert np.abs(samples[int(piece.start * rate) : int(piece.start * rate) + 640]).max() > 0.1  # a tone
        for before, after in zip(pieces, pieces[1:]):
            assert after.start - before.end >= 0.05
            ms = rate // 1000  # the pieces are written to the millisecond
            assert np.abs(samples[int(before.end * rate) + ms : int(after.start * rate) - ms]).max() == 0


def test_a_bad_pieces_column_names_the_file_and_line(tmp_path):
    tsv = tmp_path / "joined.tsv"
    tsv.write_text("a.wav\tone two\t0.000-0.400:1 0.500-0.900:1\nb.wav\tone two\t0.000-0.400:1\n", encoding="utf-8")
    with pytest.raises(AttnmtError, match=r"joined.tsv, line 2: the pieces say 1 words, the transcript has 2"):
        speech.read_pieces(tsv)
    tsv.write_text("a.wav\tone\t0.000:1\n", encoding="utf-8")
    with pytest.raises(AttnmtError, match=r"joined.tsv, line 1: pieces column '0.000:1' is not START-END:WORDS"):
        speech.read_pieces(tsv)
    tsv.write_text("a.wav\tone\n", encoding="utf-8")
    with pytest.raises(AttnmtError, match=r"joined.tsv, line 1: no pieces column"):
        speech.read_pieces(tsv)


def test_the_pieces_are_read_line_by_line_not_whole(tmp_path, monkeypatch):
    """read_pieces iterates the lines of its file (no Path.read_text): the same pieces as before,
    line numbers counted on "\\n" alone (a U+2028 in a transcript is no line break), and a missing
    file or bad UTF-8 an error naming it."""
    from pathlib import Path

    tsv = tmp_path / "joined.tsv"
    tsv.write_text("a.wav\tone two\t0.000-0.400:1 0.500-0.900:1\r\nb.wav\tone\u2028two\t0.000-0.400:2\n", "utf-8")

    def refused(*args, **kwargs):
        raise AssertionError("read whole")

    monkeypatch.setattr(Path, "read_text", refused)
    monkeypatch.setattr(Path, "read_bytes", refused)
    pieces = speech.read_pieces(tsv)
    assert [[(p.start, p.end, p.words) for p in line] for line in pieces] == [
        [(0.0, 0.4, 1), (0.5, 0.9, 1)],
        [(0.0, 0.4, 2)],
    ]
    with pytest.raises(AttnmtError, match=r"cannot read .*missing.tsv: no such file"):
        speech.read_pieces(tmp_path / "missing.tsv")
    tsv.write_bytes(b"a.wav\tone\t0.000-0.400:1\nb.wav\tcaf\xe9\t0.000-0.400:1\n")
    with pytest.raises(AttnmtError, match=r"joined.tsv: line 2 is not valid UTF-8"):
        speech.read_pieces(tsv)
