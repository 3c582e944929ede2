"""Hostile and careless audio (issue 27, points 1-4, 9 and 10): sound files whose header lies
(a forged FLAC length, a rate of 1 Hz), samples that are not sound (3.4e38, NaN), files that are
not files (a FIFO, /dev/zero, a folder), sizes counted in base64, speech requests over the work
limit, and a list of sound files with bad lines. Every hostile file is made here. Memory bounds
are checked by what is decoded (soundfile's reads counted), not by measuring the process."""

import base64
import io
import os
import re
import threading
import time

import numpy as np
import pytest
import soundfile
import torch

import attnmt.speech.audio as audio
from attnmt.api import load
from attnmt.serve import ServerLimits, create_app
from attnmt.speech.audio import AudioError, decode_audio
from attnmt.training import train
from conftest import WAIT, local_client, random_strings, reverse, toy_config
from speech_helpers import RATE, random_texts, speech_config, tone_utterance, write_tone_corpus
from test_serve import assert_error, run_cli
from test_serve_limits import blocking_first_step, wait_for_the_lock

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
        data[STREAMINFO + 14 : STREAMINFO + 18] = (total_samples & 0xFFFFFFFF).to_bytes(4, "big")
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
    np.testing.assert_array_equal(
        decode_audio(flac(1.0, total_samples=0), RATE, "a"), decode_audio(flac(1.0), RATE, "a")
    )
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
    with pytest.raises(
        AudioError, match=f"^one.wav: a sample rate of {rate:,} Hz; sound files of 4,000 to 192,000 Hz are read"
    ):
        decode_audio(data, RATE, "one.wav", max_seconds=30)
    assert decoded == []


# --- point 3: samples that are not sound ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value, message",
    [(3.4e38, "audio samples up to 3.4e+38"), (-2e3, "up to 2e+03"), (np.nan, "not numbers"), (np.inf, "not numbers")],
)
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
    for path, message in (
        (fifo, "not a regular file (a FIFO, device or socket)"),
        ("/dev/zero", "not a regular file"),
        (tmp_path, "is a directory"),
        (tmp_path / "missing.wav", "no such file"),
    ):
        with pytest.raises(AudioError, match=f"^{re.escape(f'{path}: {message}')}"):
            audio.read_audio(path, RATE)  # (the FIFO is not opened: that would wait for a writer)


def test_error_messages_name_the_file_not_a_heap_address():
    with pytest.raises(AudioError) as error:
        decode_audio(b"RIFF junk that is no sound file", RATE, "audio[2]")
    assert str(error.value).startswith("audio[2]: cannot read audio (") and " at 0x" not in str(error.value)


def test_decoding_stops_between_blocks_when_told(decoded, monkeypatch):
    """The server's time limit reaches into decoding: ``check`` is called between blocks."""
    monkeypatch.setattr(audio, "BLOCK_SAMPLES", 4096)
    calls = []

    def check():
        calls.append(1)
        if len(calls) > 2:
            raise TimeoutError("past the deadline")

    with pytest.raises(TimeoutError):
        decode_audio(flac(5.0), RATE, "a", max_seconds=30, check=check)
    assert decoded == [4096, 4096]


# --- the HTTP API: points 1-4 and 10 over HTTP ----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_speech(tmp_path_factory):
    """A speech model trained one step (a second; its imports aside): it ends no transcript before its
    length limit, so each request does the most work it can."""
    folder = tmp_path_factory.mktemp("tiny-speech")
    config = speech_config(folder, write_tone_corpus(folder, "train", random_texts(4, seed=1)), steps=1)
    config.experiment_dir = folder / "tones"
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


@pytest.fixture
def spied(tiny_speech, monkeypatch):
    """(app, client, calls): calls records every sound file the model decodes and every transcription."""

    def serve(limits: ServerLimits):
        app = create_app([tiny_speech], limits)
        translator = app.state.models["tones"].translator
        for name in ("features", "transcribe_features", "trace_features"):
            real = getattr(translator, name)
            monkeypatch.setattr(
                translator, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k)
            )
        return local_client(app)

    calls = []
    return serve, calls


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def silence(seconds: float, format="FLAC") -> bytes:
    return sound(np.zeros(int(seconds * RATE), np.float32), format=format)


REFUSED = [  # (name, body, limits, fragments of the 422): nothing decoded for any
    (
        "forged FLAC length",
        {"audio": b64(flac(1.0, total_samples=2**36 - 1))},
        {},
        ["audio: 4294967.3 s of audio, longer than"],
    ),
    (
        "1 Hz WAV",
        {"audio": [b64(silence(0.1, "WAV")), b64(sound(np.zeros(20_000), 1, subtype="PCM_U8"))]},
        {},
        ["audio[1]: a sample rate of 1 Hz"],
    ),
    (
        "30 s of silence at beam 16",
        {"audio": b64(silence(30)), "beam": 16},
        {},
        ["asks for 12016 units of work (beam 16 x (encoder states + 1)", "30.0 s of audio", "the limit is 4112"],
    ),
    (
        "two files over the work",
        {"audio": [b64(silence(3))] * 2, "beam": 8},
        {"max_work": 1000},
        ["asks for 1216 units of work", "the limit is 1000", "smaller beam"],
    ),
    (
        "attention matrices",
        {"audio": b64(silence(3)), "beam": 3, "n_best": 3},
        {"max_answer_values": 10_000},
        [
            "could hold up to 21150 attention weights (3 matrices per sound file of up to 94 characters",
            '"attention": false',
        ],
    ),
    (
        "one byte over",
        {"audio": b64(silence(1, "WAV") + b"\0")},
        {"max_audio_bytes": len(silence(1, "WAV"))},
        ["audio is 32,045 bytes (decoded from base64); the limit is 32,044"],
    ),
]


@pytest.mark.parametrize("body, limits, fragments", [case[1:] for case in REFUSED], ids=[c[0] for c in REFUSED])
def test_speech_requests_over_the_limits_are_refused_before_decoding(spied, body, limits, fragments):
    serve, calls = spied
    with serve(ServerLimits(**limits)) as client:
        assert_error(client.post("/translate", json=body), 422, *fragments)
    assert calls == []


def test_the_byte_limit_counts_bytes_not_base64_characters():
    """(the case of REFUSED above: one byte over the limit has as many base64 characters)"""
    from attnmt.serve.limits import base64_length

    size = len(silence(1, "WAV"))
    assert base64_length(size + 1) == base64_length(size)


def test_speech_requests_within_the_limits_are_answered(spied):
    serve, calls = spied
    body = {"audio": b64(silence(3)), "beam": 3, "n_best": 3}
    with serve(ServerLimits(max_answer_values=10_000)) as client:
        answer = client.post("/translate", json={**body, "attention": False})
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["translations"][0]["candidates"]) == 3
        assert client.post("/translate", json={**body, "n_best": 1}).status_code == 200  # 7,200 weights at most
    assert calls.count("transcribe_features") == 2


@pytest.mark.parametrize("path", ["/translate", "/trace"])
@pytest.mark.parametrize(
    "value, fragment", [(3.4e38, "audio samples up to 3.4e+38"), (np.nan, "audio samples that are not numbers")]
)
def test_samples_that_are_not_sound_are_a_422_naming_the_problem(spied, path, value, fragment):
    serve, calls = spied
    samples = tone_utterance("ab")
    samples[::7] = value
    with serve(ServerLimits()) as client:
        assert_error(client.post(path, json={"audio": b64(sound(samples, subtype="FLOAT"))}), 422, f"audio: {fragment}")
    assert "transcribe_features" not in calls and "trace_features" not in calls


def test_align_on_a_speech_model_says_it_has_no_source_words(spied):
    serve, calls = spied
    with serve(ServerLimits()) as client:
        assert_error(
            client.post("/translate", json={"audio": b64(silence(1)), "align": True}),
            422,
            '"align" links the words of a text and of its translation: a speech model has no source words',
        )
    assert calls == []


def test_classify_on_a_speech_model_says_it_transcribes(spied):
    serve, _ = spied
    with serve(ServerLimits()) as client:
        assert_error(
            client.post("/classify", json={"premise": "a", "hypothesis": "b"}),
            422,
            "'tones' is a speech model (it transcribes audio): use /translate or /trace",
        )


@pytest.mark.slow  # (starts a process or a server and waits on it)
def test_a_speech_request_past_its_limit_stops_after_the_chunk_under_way(tiny_speech, monkeypatch):
    """Files of a request are decoded and transcribed in chunks; past the time limit, the 503 comes
    and the chunks after the one under way are not decoded (point 9: nothing outlives its request)."""
    app = create_app([tiny_speech], ServerLimits(max_work=4 * 2 * 26, timeout=1.0))  # 4 files of 25 states, beam 2
    model = app.state.models["tones"]
    release, transcribed = threading.Event(), []
    real = model.translator.transcribe_features

    def slow(features, *args):
        release.wait(WAIT)  # the first chunk computes until the test lets it go
        transcribed.append(len(features))
        return real(features, *args)

    monkeypatch.setattr(model.translator, "transcribe_features", slow)
    with local_client(app) as client:
        response = client.post("/translate", json={"audio": [b64(silence(1))] * 4, "beam": 2})
        assert_error(response, 503, "longer than the limit of 1 s")
        release.set()
        deadline = time.monotonic() + WAIT
        while model.lock.locked() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not model.lock.locked()
    assert transcribed == [2]  # the chunk under way only (chunks of half of max_work: 2 files)


@pytest.mark.slow  # (starts a process or a server and waits on it)
def test_a_speech_trace_past_its_limit_frees_the_model_within_one_decoder_step(tiny_speech, monkeypatch):
    """/trace of audio is one file, not chunks: past the time limit its trace stops between two
    decoder steps (point 9), instead of running to its length limit for nobody."""
    app = create_app([tiny_speech], ServerLimits(timeout=1.0))
    model = app.state.models["tones"]
    release, steps = blocking_first_step(model, monkeypatch)
    with local_client(app) as client:
        body = {"audio": b64(silence(1))}
        assert_error(client.post("/trace", json=body), 503, "longer than the limit of 1 s")
        release.set()  # the step under way finishes, past the deadline: the trace takes no other
        wait_for_the_lock(model)
        assert steps == [0]
        monkeypatch.undo()
        answered = client.post("/trace", json=body)
        assert answered.status_code == 200 and len(answered.json()["steps"]) > 1  # the steps it did not run


# --- point 10: `attnmt translate` of a list of sound files with bad lines ---------------------------------


def test_bad_lines_of_a_sound_file_list_cost_only_themselves(tiny_speech, tmp_path):
    good = tmp_path / "good.wav"
    soundfile.write(good, tone_utterance("abc"), RATE)
    fifo = tmp_path / "fifo.wav"
    os.mkfifo(fifo)
    forged = tmp_path / "forged.flac"
    forged.write_bytes(flac(1.0, total_samples=2**36 - 1))  # a traceback asking for 256 GiB before
    lines = [good, tmp_path / "missing.wav", tmp_path, fifo, "/dev/zero", "", forged, good]
    paths = tmp_path / "paths.txt"
    paths.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    out = tmp_path / "out.txt"
    code, _, err = run_cli("translate", tiny_speech, "-i", paths, "-o", out, "--beam", "1")
    assert code == 2
    [expected] = load(tiny_speech).transcribe([good], beam=1)
    assert out.read_text(encoding="utf-8").split("\n") == [expected.text] + [""] * 6 + [expected.text, ""]
    assert f"{paths}, line 2: {tmp_path / 'missing.wav'}: no such file" in err
    assert f"line 3: {tmp_path}: is a directory" in err and f"line 4: {fifo}: not a regular file" in err
    assert "line 5: /dev/zero: not a regular file" in err and "line 6" not in err
    assert f"line 7: {forged}: 4294967.3 s of audio, longer than speech.max_seconds" in err
    assert "5 of 8 sound file(s) not transcribed (empty lines in the output); first: line 2" in err


# --- point 9: /attention of a Transformer bounds its answer before the work ------------------------------


@pytest.fixture(scope="module")
def one_step_transformer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("transformer")
    pairs = [(s, reverse(s)) for s in random_strings(50, 3, 8, seed=1)]
    config = toy_config(
        folder,
        pairs,
        model={
            "type": "transformer",
            "d_model": 16,
            "heads": 2,
            "feed_forward": 32,
            "encoder_layers": 2,
            "decoder_layers": 1,
        },
        training={"max_steps": 1, "validate_every": 1, "threads": 1},
    )
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


def test_attention_weights_that_could_be_too_many_are_refused_before_the_work(one_step_transformer, monkeypatch):
    """layers x heads x (S x S + T x T + T x S): known before the work from the source, and the forced
    translation or else the output length limit."""
    app = create_app([one_step_transformer], ServerLimits(max_answer_values=1000))
    translator = app.state.models[one_step_transformer.name].translator
    calls = []
    real = translator.attention
    monkeypatch.setattr(translator, "attention", lambda *a: calls.append(a) or real(*a))
    with local_client(app) as client:
        assert_error(
            client.post("/attention", json={"text": "abcdefghij"}),
            422,
            "could hold up to",
            "2 encoder and 1 decoder layers x 2 heads",
            "the limit is 1000",
        )
        assert calls == []
        answer = client.post("/attention", json={"text": "abcdefghij", "translation": "ab"})  # a shorter output
        assert answer.status_code == 200, answer.text
        maps = answer.json()
        held = sum(np.size(maps[k]) for k in ("encoder", "decoder", "cross"))
        source, forced = len(maps["source_tokens"]), len(maps["tokens"])
        assert held == 2 * (2 * source**2 + forced**2 + forced * source) <= 1000  # the bound, exactly
        assert len(calls) == 1
