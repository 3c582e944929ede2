"""Audio in the HTTP API: /translate and /trace of a speech model take ``audio``, a sound file in
base64, checked against the server's limits (size before decoding the file, duration after)."""

import base64
import binascii
from dataclasses import replace

from fastapi import HTTPException

from attnmt.errors import AttnmtError
from attnmt.serve.limits import ServerLimits
from attnmt.serve.models import LoadedModel


def _check_task(body, model: LoadedModel):
    """422 for audio sent to a translation model, or text to a speech model."""
    speech = model.translator.config.task == "speech"
    if speech and body.audio is None:
        raise HTTPException(422, f"'{model.name}' is a speech model: send audio (a sound file in base64), not text")
    if not speech and body.audio is not None:
        raise HTTPException(422, f"'{model.name}' is a translation model: send text; audio is for speech models")


def _sound_files(encoded: list[str], single: bool) -> list[bytes]:
    files = []
    for i, text in enumerate(encoded):
        where = "audio" if single else f"audio[{i}]"
        try:  # (its size is bounded by the request schema: 4 characters for 3 bytes of max_audio_bytes)
            files.append(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            raise HTTPException(422, f"{where} is not base64") from None
    return files


def _features(model: LoadedModel, files: list[bytes], limits: ServerLimits, single: bool) -> list:
    """The log-mels of each file; 422 for a file that cannot be read or is too long."""
    speech = model.translator.config.speech
    limited = speech.model_copy(update={"max_seconds": min(speech.max_seconds, limits.max_audio_seconds)})
    features = []
    for i, data in enumerate(files):
        try:
            features.append(model.translator.features(data, "audio" if single else f"audio[{i}]", limited))
        except AttnmtError as e:
            raise HTTPException(422, str(e)) from None
    return features


async def transcribe(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> list:
    """The transcriptions (attnmt.api.Translation) of the request's audio."""
    _check_task(body, model)
    single = isinstance(body.audio, str)
    files = _sound_files([body.audio] if single else list(body.audio), single)
    beam = body.beam if body.beam is not None else min(model.translator.config.decoding.beam, limits.max_beam)
    if body.n_best > beam:
        raise HTTPException(422, f"n_best ({body.n_best}) cannot exceed the beam size ({beam})")
    features = await model.run(_features, model, files, limits, single, deadline=deadline)
    names = ["audio"] if single else [f"audio[{i}]" for i in range(len(files))]
    results = await model.run(model.translator.transcribe_features, features, beam, body.n_best, None, names,
                              deadline=deadline)
    if not body.attention:
        results = [replace(t, candidates=[replace(c, attention=None) for c in t.candidates]) for t in results]
    return results


async def trace_audio(body, model: LoadedModel, limits: ServerLimits, deadline: float):
    """The trace (attnmt.trace.Trace) of the request's audio."""
    _check_task(body, model)
    [data] = _sound_files([body.audio], single=True)
    [features] = await model.run(_features, model, [data], limits, True, deadline=deadline)
    return await model.run(model.translator.trace_features, features, body.top_k, deadline=deadline)
