"""A trained speech model (tone 'utterances', seconds of training) through everything that uses
one: the test scores of training, `attnmt evaluate/translate/plot`, the Python API, the HTTP API
with its audio limits, and the explorer's audio view in Chromium."""

import base64
import dataclasses
import json
import socket
import threading
import time

import numpy as np
import pytest
import soundfile
import torch
import uvicorn

from attnmt.api import load
from attnmt.core.errors import AttnmtError
from attnmt.cli import main
from attnmt.serve import ServerLimits, create_app
from attnmt.speech.recognizer import Recognizer
from attnmt.training import train
from conftest import WAIT, launch_chromium, local_client
from speech_helpers import RATE, random_texts, speech_config, tone, write_tone_corpus


@pytest.fixture(scope="module")
def speech_model(tmp_path_factory):
    """(model folder, test TSV, test WAV paths, their transcripts): a tiny location-attention model
    trained on tone utterances, with a dev and a test set."""
    folder = tmp_path_factory.mktemp("speech")
    train_tsv = write_tone_corpus(folder, "train", random_texts(16, seed=1))
    test_texts = random_texts(4, seed=2)
    test_tsv = write_tone_corpus(folder, "test", test_texts)
    config = speech_config(folder, train_tsv, dev=test_tsv, test=test_tsv, steps=120)
    config.experiment_dir = folder / "tones"
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir, test_tsv, [folder / "test" / f"{i}.wav" for i in range(4)], test_texts


def test_training_scores_the_test_sets_with_error_rates(speech_model):
    folder = speech_model[0]
    scores = json.loads((folder / "test-scores.json").read_text())
    assert set(scores["test"]) >= {"cer", "wer", "utterances", "by_length", "beam"}
    assert scores["test"]["utterances"] == 4
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert any(r["type"] == "valid" and "cer" in r for r in records)
    assert any(r["type"] == "test" and r["name"] == "test" and "wer" in r for r in records)
    assert (folder / "features" / "test-test.safetensors").is_file()  # the test set's features, cached


def test_recognizer_transcribes_traces_and_aligns_to_the_audio(speech_model):
    folder, _, wavs, _ = speech_model
    model = load(folder)
    [t] = model.transcribe([wavs[0]], beam=1)
    trace = model.trace(wavs[0])
    assert trace.text == t.text
    frames = t.features.shape[0]
    states = -(-frames // model.frames_per_state)
    assert t.features.shape == (frames, 40) and t.attention.shape == (len(t.tokens), states)
    assert len(t.source_tokens) == states and t.source_tokens[1] == "0.04s"
    np.testing.assert_allclose(t.attention.sum(1), 1, atol=1e-5)
    assert trace.features.shape == t.features.shape and len(trace.steps) == len(t.tokens)
    with pytest.raises(TypeError):
        model.transcribe(wavs[0])


def test_a_recognizer_loads_as_a_translator_does_and_has_no_translate(speech_model, tiny_transformer):
    """Both come from the folder through attnmt.seq2seq.loaded.LoadedSeq2Seq (config, weights,
    decoding settings, repr, /models' description); a Recognizer has no translate() to refuse."""
    from attnmt.seq2seq.inference import Translator
    from attnmt.seq2seq.loaded import LoadedSeq2Seq

    folder, _, wavs, _ = speech_model
    model = load(folder)
    assert isinstance(model, LoadedSeq2Seq) and isinstance(tiny_transformer, LoadedSeq2Seq)
    assert not isinstance(model, Translator) and not hasattr(model, "translate")
    assert repr(model).startswith(f"<Recognizer {folder}:") and model.weights.parent == folder
    assert model.describe()["type"] == "rnn" and tiny_transformer.describe()["attention"] == "multi-head"
    model.set_decoding(beam=2, length_penalty=0.5)
    assert model.config.decoding.beam == 2 and "beam 2" in repr(model)
    model.attention_window = (2, 2)
    [t] = model.transcribe([wavs[0]], beam=1)
    assert t.text == model.trace(wavs[0]).text  # both under the window of the decoding settings
    with pytest.raises(AttnmtError, match="decoding.beam"):
        model.set_decoding(beam=0)
    with pytest.raises(AttnmtError, match="not a speech model"):
        Recognizer(tiny_transformer.folder)
    with pytest.raises(AttnmtError, match="not a translation model"):
        Translator(folder)


def test_cli_evaluate_translate_and_plot(speech_model, tmp_path, capsys):
    folder, test_tsv, wavs, _ = speech_model
    assert main(["evaluate", str(folder), "--trust-config", "--beam", "1", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "CER" in out and "WER" in out and "reference words" in out
    assert json.loads((tmp_path / "r.json").read_text())["test"]["utterances"] == 4
    assert main(["evaluate", str(folder), "--tsv", str(test_tsv), "--beam", "2"]) == 0
    assert "(4 utterances)" in capsys.readouterr().out
    assert main(["evaluate", str(folder), "--src", "a", "--ref", "b"]) == 2
    assert "is a speech model: give --tsv" in capsys.readouterr().err

    paths = tmp_path / "paths.txt"
    paths.write_text("".join(f"{w}\n" for w in wavs[:2]), encoding="utf-8")
    assert main(["translate", str(folder), "-i", str(paths), "--beam", "1", "-o", str(tmp_path / "out.txt")]) == 0
    expected = [t.text for t in load(folder).transcribe(wavs[:2], beam=1)]
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == expected

    figure, step, gif = tmp_path / "a.png", tmp_path / "s.png", tmp_path / "d.gif"
    assert (
        main(["plot", str(folder), str(wavs[0]), "--out", str(figure), "--step", "1", str(step), "--gif", str(gif)])
        == 0
    )
    assert all(p.stat().st_size > 1000 for p in (figure, step, gif))
    assert main(["plot", str(folder), str(wavs[0]), "--grid", str(tmp_path / "g.png")]) == 2
    assert "not for speech models" in capsys.readouterr().err
    assert main(["plot", str(folder), str(tmp_path / "missing.wav")]) == 2
    assert "missing.wav: no such file" in capsys.readouterr().err


def b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


LIMITS = ServerLimits(max_audio_bytes=200_000, max_audio_seconds=3.0, max_sentences=4)


def test_http_translate_and_trace_take_audio(speech_model):
    folder, _, wavs, _ = speech_model
    with local_client(create_app([folder], LIMITS)) as client:
        [info] = client.get("/models").json()
        assert info["task"] == "speech"
        answer = client.post("/translate", json={"audio": b64(wavs[0]), "beam": 1}).json()
        [t] = load(folder).transcribe([wavs[0]], beam=1)
        [out] = answer["translations"]
        assert out["candidates"][0]["text"] == t.text and out["source_tokens"] == t.source_tokens
        np.testing.assert_allclose(out["candidates"][0]["attention"], t.attention, atol=1e-5)
        several = client.post("/translate", json={"audio": [b64(w) for w in wavs[:3]], "beam": 2}).json()
        assert len(several["translations"]) == 3
        trace = client.post("/trace", json={"audio": b64(wavs[0]), "top_k": 3}).json()
        assert trace["text"] == t.text and trace["frames_per_state"] == 4 and trace["hop_ms"] == 10
        assert np.array(trace["features"]).shape == t.features.shape
        assert len(trace["steps"][0]["weights"]) == len(t.source_tokens)


def test_http_audio_limits_and_errors(speech_model, tmp_path):
    folder, _, wavs, _ = speech_model
    long_wav, big_wav = tmp_path / "long.wav", tmp_path / "big.wav"
    soundfile.write(long_wav, tone(440.0, 4.0), RATE)  # 128 kB: under the size limit, over the duration
    soundfile.write(big_wav, tone(440.0, 2.0, rate=96000), 96000)  # 384 kB: over the size limit

    def error(path, body, status, *fragments):
        response = client.post(path, json=body)
        assert response.status_code == status, response.text
        detail = json.dumps(response.json()["detail"])
        for fragment in fragments:
            assert fragment in detail, detail

    with local_client(create_app([folder], LIMITS)) as client:
        for path in ("/translate", "/trace"):
            error(path, {"audio": b64(long_wav)}, 422, "4.0 s of audio, longer than", "(3.0)")
            error(path, {"audio": b64(big_wav)}, 422, "at most 266668 characters")
            error(path, {"audio": "not base64!"}, 422, "audio is not base64")
            error(path, {"audio": base64.b64encode(b"RIFF junk").decode()}, 422, "audio: cannot read audio")
            error(path, {"text": "abc"}, 422, "is a speech model: send audio")
            error(path, {"text": "abc", "audio": b64(wavs[0])}, 422, "give text (translation models) or audio")
            error(path, {}, 422, "give text (translation models) or audio")
        error("/translate", {"audio": [b64(wavs[0])] * 5}, 422, "at most 4 items")
        error("/beam", {"text": "abc"}, 422, "is a speech model")


def test_the_body_limit_makes_room_for_one_sound_file(speech_model, tmp_path):
    """A file under max_audio_bytes is read even when its base64 is larger than max_body_bytes; the
    room is for one file, not for any number of them."""
    folder, *_ = speech_model
    wav = tmp_path / "tone.wav"
    soundfile.write(wav, tone(440.0, 2.5), RATE)  # 80 kB, 107 kB in base64
    limits = dataclasses.replace(LIMITS, max_body_bytes=100_000)
    assert limits.max_body_bytes < len(b64(wav)) and wav.stat().st_size < limits.max_audio_bytes
    with local_client(create_app([folder], limits)) as client:
        response = client.post("/translate", json={"audio": b64(wav)})
        assert response.status_code == 200, response.text
        response = client.post("/translate", json={"audio": [b64(wav)] * 4})  # 428 kB > 100 kB + 267 kB
        assert response.status_code == 413, response.status_code


def test_audio_sent_to_a_translation_model_is_refused(tiny_transformer, speech_model):
    with local_client(create_app([tiny_transformer.folder], LIMITS)) as client:
        response = client.post("/translate", json={"audio": b64(speech_model[2][0])})
        assert response.status_code == 422 and "is a translation model" in response.json()["detail"]


# --- the explorer's audio view in Chromium ------------------------------------------------------------------


def test_explorer_uploads_plays_and_steps_through_audio(speech_model, tmp_path):
    from playwright.sync_api import sync_playwright

    folder, _, wavs, _ = speech_model
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app([folder], LIMITS), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    [expected] = load(folder).transcribe([wavs[0]])  # the model's beam, as the page asks
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(20_000)
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{sock.getsockname()[1]}/")
            page.wait_for_selector("body[data-state=ready]")
            assert (
                page.locator("#audio-card").is_visible()
                and page.locator("#results-card").is_hidden()
                and page.locator("#score-card").is_hidden()
            )
            assert page.text_content("#translate") == "Transcribe"
            page.set_input_files("#audio-file", str(wavs[0]))
            page.wait_for_function("document.getElementById('audio-player').src.startsWith('blob:')")
            page.click("#translate")
            page.wait_for_selector("body[data-state=done], body[data-state=error]")
            assert page.locator("#error").is_hidden(), page.text_content("#error")
            assert page.text_content("#audio-transcript") == (expected.text or "(empty transcript)")
            assert page.locator("#audio-canvas").count() == 1
            steps = len(expected.tokens)
            assert page.text_content("#audio-step-index") == f"step 1 / {steps}"
            page.click("#audio-step-next")
            assert page.text_content("#audio-step-index") == f"step 2 / {steps}"
            assert "writes" in page.text_content("#audio-step-line")
            duration = page.evaluate(
                "new Promise(r => { const a = document.getElementById('audio-player'); "
                "a.readyState >= 1 ? r(a.duration) : a.onloadedmetadata = () => r(a.duration); })"
            )
            assert duration == pytest.approx(soundfile.info(wavs[0]).duration, abs=0.05)  # the file plays
            page.screenshot(path=str(tmp_path / "explorer-speech.png"), full_page=True)
            browser.close()
            assert not errors, errors
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
