"""Audio in the HTTP API: /translate and /trace of a speech model take ``audio``, a sound file in
base64, checked against the server's limits before any decoding: its size (decoded bytes), then
what its header declares (sample rate, duration), the work of the request (beam x encoder states,
as for text) and the size of its attention matrices. Only then are the files decoded, in blocks
that stop at the duration limit and at the request's time limit, and transcribed in chunks."""

import base64
import binascii
import time
from dataclasses import replace

import torch
from fastapi import HTTPException

from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.decoding import max_output_lengths
from attnmt.serve.batching import chunked
from attnmt.serve.limits import ServerLimits, work
from attnmt.serve.models import LoadedModel, ModelTimeout, stop_at
from attnmt.speech.audio import AudioHeader, audio_header, feature_frames


def _check_inputs(body, model: LoadedModel):
    """422 for audio sent to a translation model, or text to a speech model."""
    speech = model.inputs == "audio"
    if speech and body.audio is None:
        raise HTTPException(422, f"'{model.name}' is a speech model: send audio (a sound file in base64), not text")
    if not speech and body.audio is not None:
        raise HTTPException(422, f"'{model.name}' is a translation model: send text; audio is for speech models")


class SoundFile:
    """One sound file of a request: its bytes, its name in errors (``audio``, ``audio[2]``), the
    header it declares and the log-mel frames that gives at most."""

    def __init__(self, data: bytes, name: str, header: AudioHeader, frames: int):
        self.data, self.name, self.header, self.frames = data, name, header, frames


def _sound_files(model: LoadedModel, encoded: list[str], single: bool, limits: ServerLimits) -> list[SoundFile]:
    """Each file decoded from base64 and its header read; 422 for a file that is not base64, is
    over max_audio_bytes (counted after decoding: base64 rounds up to 3 bytes), has a rate out
    of range or declares a duration over the limit."""
    files = []
    settings = _settings(model, limits)
    for i, text in enumerate(encoded):
        name = "audio" if single else f"audio[{i}]"
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise HTTPException(422, f"{name} is not base64") from None
        if len(data) > limits.max_audio_bytes:
            raise HTTPException(
                422, f"{name} is {len(data):,} bytes (decoded from base64); the limit is {limits.max_audio_bytes:,}"
            )
        try:
            header = audio_header(data, name, settings.max_seconds)
        except AttnmtError as e:
            raise HTTPException(422, str(e)) from None
        files.append(SoundFile(data, name, header, feature_frames(header, settings, settings.max_seconds)))
    return files


def _settings(model: LoadedModel, limits: ServerLimits):
    """The model's feature settings, with the duration limit of the server if lower."""
    speech = model.translator.config.speech
    return speech.model_copy(update={"max_seconds": min(speech.max_seconds, limits.max_audio_seconds)})


def _states(model: LoadedModel, files: list[SoundFile]) -> list[int]:
    """The encoder states of each file at most: the source positions of speech."""
    return model.translator.encoder_states([f.frames for f in files])


def check_speech_work(model: LoadedModel, files: list[SoundFile], beam: int, limits: ServerLimits):
    """422 for a request over ``max_work``, counted as for text with the encoder states as the
    source positions: beam x (states + 1), summed over the files (a state is 40 or 80 ms)."""
    asked = work(_states(model, files), beam)
    if asked > limits.max_work:
        seconds = sum(f.frames for f in files) * model.translator.config.speech.hop_ms / 1000
        raise HTTPException(
            422,
            f"the request asks for {asked} units of work (beam {beam} x (encoder states + 1), "
            f"summed over its {seconds:.1f} s of audio); the limit is {limits.max_work}: send "
            "fewer or shorter sound files, or ask for a smaller beam",
        )


def check_speech_matrices(model: LoadedModel, files: list[SoundFile], n_best: int, limits: ServerLimits):
    """422 before decoding for attention matrices that could exceed ``max_answer_values``: n_best
    per file, each of up to its output length limit (from its frames) x its encoder states."""
    dc = model.translator.config.decoding
    outputs = max_output_lengths(torch.tensor([f.frames for f in files]), dc.max_length_ratio, dc.max_length_offset)
    bound = n_best * sum(s * t for s, t in zip(_states(model, files), outputs))
    if bound > limits.max_answer_values:
        raise HTTPException(
            422,
            f"the answer could hold up to {bound} attention weights ({n_best} matrices per "
            f"sound file of up to {max(outputs)} characters x encoder states); the limit is "
            f'{limits.max_answer_values}: ask for "attention": false, a smaller n_best, or '
            "fewer or shorter sound files",
        )


def _features(model: LoadedModel, files: list[SoundFile], limits: ServerLimits, deadline: float) -> list:
    """The log-mels of each file; 422 for a file that cannot be decoded; ModelTimeout between two
    blocks of decoding once the deadline has passed."""
    settings = _settings(model, limits)

    def in_time():
        if time.monotonic() > deadline:
            raise ModelTimeout(limits.timeout)

    features = []
    for f in files:
        try:
            features.append(model.translator.features(f.data, f.name, settings, check=in_time))
        except AttnmtError as e:
            raise HTTPException(422, str(e)) from None
    return features


async def transcribe(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> list:
    """The transcriptions (attnmt.api.Translation) of the request's audio, decoded in chunks of
    about ``chunk_work`` (files of similar length together), between which it stops at the deadline."""
    _check_inputs(body, model)
    single = isinstance(body.audio, str)
    beam = body.beam if body.beam is not None else min(model.translator.config.decoding.beam, limits.max_beam)
    if body.n_best > beam:
        raise HTTPException(422, f"n_best ({body.n_best}) cannot exceed the beam size ({beam})")
    files = _sound_files(model, [body.audio] if single else list(body.audio), single, limits)
    check_speech_work(model, files, beam, limits)
    if body.attention:
        check_speech_matrices(model, files, body.n_best, limits)
    chunks = chunked([work([n], beam) for n in _states(model, files)], limits.chunk_work)

    def transcribe_chunk(chunk: list[int]) -> list:
        chosen = [files[i] for i in chunk]
        features = _features(model, chosen, limits, deadline)
        return model.translator.transcribe_features(features, beam, body.n_best, None, [f.name for f in chosen])

    results = await model.run_chunks([lambda chunk=chunk: transcribe_chunk(chunk) for chunk in chunks], deadline)
    transcriptions = [None] * len(files)
    for chunk, chunk_results in zip(chunks, results):
        for i, transcription in zip(chunk, chunk_results):
            # The features are not in the answer: dropped, so that its size counts what is sent.
            transcriptions[i] = replace(transcription, features=None)
    if not body.attention:
        transcriptions = [
            replace(t, candidates=[replace(c, attention=None) for c in t.candidates]) for t in transcriptions
        ]
    return transcriptions


async def trace_audio(body, model: LoadedModel, limits: ServerLimits, deadline: float):
    """The trace (attnmt.seq2seq.trace.Trace) of the request's audio: greedy (beam 1), so its work is
    that of its encoder states; its answer is bounded after the work, like that of text. Past the
    time limit it stops between two blocks of decoding or two decoder steps."""
    _check_inputs(body, model)
    files = _sound_files(model, [body.audio], True, limits)
    check_speech_work(model, files, 1, limits)

    def trace():
        [features] = _features(model, files, limits, deadline)
        return model.translator.trace_features(features, body.top_k, stop=stop_at(deadline))

    return await model.run(trace, deadline=deadline)
