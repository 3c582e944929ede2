"""Hostile and careless audio (issue 27, points 1-4, 9 and 10): sound files whose header lies
(a forged FLAC length, a rate of 1 Hz), samples that are not sound (3.4e38, NaN), files that are
not files (a FIFO, /dev/zero, a folder), sizes counted in base64, speech requests over the work
limit, and a list of sound files with bad lines. Every hostile file is made here. Memory bounds
are checked by what is decoded (soundfile's reads counted), not by measuring the process."""

import io
import os
import re

import numpy as np
import pytest
import soundfile

import attnmt.data.audio as audio
from attnmt.data.audio import AudioError, decode_audio

from speech_helpers import RATE, tone_utterance

STREAMINFO = 8  # bytes before FLAC's STREAMINFO block: "fLaC" and the block's header


def sound(samples: np.ndarray, rate: int = RATE, format: str = "WAV", subtype: str | None = None) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=format, subtype=subtype)
    return out.getvalue()


def flac(seconds: float, total_samples: int | None = None) -> bytes:
    """A FLAC file of ``seconds`` of a quiet tone whose header says ``total_samples`` (None: the truth;
    0: "unknown", as a streamed FLAC says): STREAMINFO's 36-bit field at bytes 13.5-18."""
    data = bytearray(sound(tone_utterance("a" * max(1, round(seconds / 0.08))), format="FLAC"))
    if total_samples is not None:
        data[STREAMINFO + 13] = (data[STREAMINFO + 13] & 0xF0) | (total_samples >> 32)
        data[STREAMINFO + 14:STREAMINFO + 18] = (total_samples & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(data)


@pytest.fixture
def decoded(monkeypatch):
    """The frames soundfile decodes from now on, counted at each read."""
    counts, real_read = [], soundfile.SoundFile.read

    def counted(self, frames=-1, *args, **kwargs):
        result = real_read(self, frames, *args, **kwargs)
        counts.append(len(result))
        return result

    monkeypatch.setattr(soundfile.SoundFile, "read", counted)
    return counts


# --- point 1: the header is checked before decoding, and decoding is bounded ------------------------------


def test_a_forged_flac_length_is_refused_before_decoding(decoded):
    forged = flac(1.0, total_samples=2**36 - 1)  # 2 KB saying 49.7 days
    assert len(forged) < 10_000
    with pytest.raises(AudioError, match=r"^upload: 4294967\.3 s of audio, longer than speech\.max_seconds"):
        decode_audio(forged, RATE, "upload", max_seconds=30)
    assert decoded == []  # not one sample decoded


def test_a_flac_without_its_length_is_read_whole_and_stops_at_the_limit(decoded, monkeypatch):
    """A streamed FLAC (length 0, "unknown") is read in blocks: whole when short, and only up to
    the limit (and one block) when long, whatever it holds."""
    np.testing.assert_array_equal(decode_audio(flac(1.0, total_samples=0), RATE, "a"),
                                  decode_audio(flac(1.0), RATE, "a"))
    monkeypatch.setattr(audio, "BLOCK_SAMPLES", 4096)
    decoded.clear()
    with pytest.raises(AudioError, match=r"^long\.flac: more than 3 s of audio, .* its header does not say so"):
        decode_audio(flac(20.0, total_samples=0), RATE, "long.flac", max_seconds=3)
    assert 3 * RATE < sum(decoded) <= 3 * RATE + 4096  # not the 20 s


def test_audio_in_many_blocks_is_the_audio_read_at_once(monkeypatch):
    stereo = np.stack([tone_utterance("abcd"), tone_utterance("dcba")], axis=1) * 0.5
    data = sound(stereo, 22050)
    whole = decode_audio(data, RATE, "a")
    monkeypatch.setattr(audio, "BLOCK_SAMPLES", 1000)
    np.testing.assert_array_equal(decode_audio(data, RATE, "a"), whole)


@pytest.mark.parametrize("rate", [1, 3999, 192_001])
def test_absurd_sample_rates_are_refused_before_decoding_or_resampling(rate, decoded, monkeypatch):
    import soxr

    monkeypatch.setattr(soxr, "resample", lambda *a: pytest.fail("resampled"))
    data = sound(np.zeros(2000, np.float32), rate, subtype="PCM_U8")  # 8-bit, as in the issue
    with pytest.raises(AudioError, match=f"^one.wav: a sample rate of {rate:,} Hz; sound files of 4,000 to "
                                         "192,000 Hz are read"):
        decode_audio(data, RATE, "one.wav", max_seconds=30)
    assert decoded == []


# --- point 3: samples that are not sound ----------------------------------------------------------------


@pytest.mark.parametrize("value, message", [(3.4e38, "audio samples up to 3.4e+38"), (-2e3, "up to 2e+03"),
                                            (np.nan, "not numbers"), (np.inf, "not numbers")])
def test_huge_and_non_finite_samples_are_refused(value, message):
    samples = tone_utterance("ab")
    samples[100] = value
    with pytest.raises(AudioError, match=f"^x.wav: .*{re.escape(message)}"):
        decode_audio(sound(samples, subtype="FLOAT"), RATE, "x.wav")
    samples[100] = 1.5  # a little over full scale: read
    assert decode_audio(sound(samples, subtype="FLOAT"), RATE, "x.wav").max() == pytest.approx(1.5)


# --- point 10: what is not a sound file is named as such --------------------------------------------------


def test_fifos_devices_and_folders_are_named_as_such(tmp_path):
    fifo = tmp_path / "fifo.wav"
    os.mkfifo(fifo)
    for path, message in ((fifo, "not a regular file (a FIFO, device or socket)"),
                          ("/dev/zero", "not a regular file"), (tmp_path, "is a directory"),
                          (tmp_path / "missing.wav", "no such file")):
        with pytest.raises(AudioError, match=f"^{re.escape(f'{path}: {message}')}"):
            audio.read_audio(path, RATE)  # (the FIFO is not opened: that would wait for a writer)


def test_error_messages_name_the_file_not_a_heap_address():
    with pytest.raises(AudioError) as error:
        decode_audio(b"RIFF junk that is no sound file", RATE, "audio[2]")
    assert str(error.value).startswith("audio[2]: cannot read audio (") and " at 0x" not in str(error.value)
