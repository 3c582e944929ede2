"""Audio as a source: reading WAV files, log-mel filterbank features, and the feature cache.

    waveform  = read_audio(path, sample_rate)        mono float32, resampled (soundfile + soxr)
    features  = log_mel(waveform, settings)         (frames, n_mels): log of mel-weighted power spectra

A frame is a window of ``window_ms`` every ``hop_ms`` (25 ms every 10 ms: 100 frames a second).
Normalisation (per utterance or global mean and variance) belongs to the model
(attnmt.models.speech), so the cache holds the plain log-mels and one cache serves both.

A corpus is a TSV file of ``path<TAB>transcript`` lines, paths relative to the file. Files that
cannot be used (unreadable, empty, too long) are skipped with a count and their names in the log.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save

from attnmt.config import SpeechConfig
from attnmt.data.corpus import read_tsv
from attnmt.errors import AttnmtError
from attnmt.files import atomic_write

LOG_FLOOR = 1e-6  # added to the mel energies before the log: silence gives log(1e-6), not -inf


class AudioError(AttnmtError):
    """An audio file that cannot be used, with the reason."""


# ---------------------------------------------------------------- reading


def decode_audio(data: bytes | Path, sample_rate: int, name: str) -> np.ndarray:
    """The samples of a sound file (a path, or the file's bytes) as mono float32 at ``sample_rate``."""
    import soundfile

    if isinstance(data, Path) and not data.is_file():
        raise AudioError(f"{name}: no such file")
    try:
        samples, rate = soundfile.read(io.BytesIO(data) if isinstance(data, bytes) else data, dtype="float32",
                                       always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, OSError) as e:
        raise AudioError(f"{name}: cannot read audio ({e})") from None
    samples = samples.mean(axis=1)  # channels averaged
    if samples.size == 0:
        raise AudioError(f"{name}: empty audio (no samples)")
    if not np.isfinite(samples).all():
        raise AudioError(f"{name}: audio samples that are not numbers")
    if rate != sample_rate:
        import soxr

        samples = soxr.resample(samples, rate, sample_rate).astype(np.float32)
    return samples


def read_audio(path: Path, sample_rate: int) -> np.ndarray:
    return decode_audio(Path(path), sample_rate, str(path))


# ---------------------------------------------------------------- features


def frame_sizes(settings: SpeechConfig) -> tuple[int, int, int]:
    """Window and hop in samples, and the FFT size (the next power of two of the window)."""
    window = round(settings.sample_rate * settings.window_ms / 1000)
    hop = round(settings.sample_rate * settings.hop_ms / 1000)
    return window, hop, 1 << math.ceil(math.log2(window))


def hz_to_mel(hz):
    return 2595.0 * np.log10(1.0 + np.asarray(hz) / 700.0)  # the HTK formula


def mel_to_hz(mel):
    return 700.0 * (10.0 ** (np.asarray(mel) / 2595.0) - 1.0)


def mel_filterbank(n_fft: int, sample_rate: int, n_mels: int) -> torch.Tensor:
    """(n_fft//2+1, n_mels): triangular filters, equally spaced on the mel scale from 0 Hz to
    the Nyquist frequency, each rising from the centre of the one before to its own centre and
    falling to the centre of the next."""
    edges = mel_to_hz(np.linspace(0.0, hz_to_mel(sample_rate / 2), n_mels + 2))
    bins = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)[:, None]
    low, centre, high = edges[:-2], edges[1:-1], edges[2:]
    rising = (bins - low) / (centre - low)
    falling = (high - bins) / (high - centre)
    return torch.from_numpy(np.maximum(0.0, np.minimum(rising, falling))).float()


def log_mel(samples: np.ndarray | torch.Tensor, settings: SpeechConfig) -> torch.Tensor:
    """(frames, n_mels) log mel energies: frames of ``window_ms`` every ``hop_ms``, each Hann-windowed
    and zero-padded to the FFT size (as Kaldi does), power spectrum, mel filters, log."""
    window, hop, n_fft = frame_sizes(settings)
    samples = torch.as_tensor(samples, dtype=torch.float32)
    if samples.numel() < window:
        samples = torch.nn.functional.pad(samples, (0, window - samples.numel()))  # one frame at least
    frames = samples.unfold(0, window, hop) * torch.hann_window(window)  # (frames, window)
    power = torch.fft.rfft(frames, n=n_fft).abs().square()  # (frames, n_fft//2+1)
    return torch.log(power @ mel_filterbank(n_fft, settings.sample_rate, settings.n_mels) + LOG_FLOOR)


def audio_features(data: bytes | Path, settings: SpeechConfig, name: str) -> torch.Tensor:
    """The log-mels of one sound file, or AudioError if it is unusable (also when longer than
    settings.max_seconds)."""
    samples = decode_audio(data, settings.sample_rate, name)
    seconds = samples.size / settings.sample_rate
    if seconds > settings.max_seconds:
        raise AudioError(f"{name}: {seconds:.1f} s of audio, longer than speech.max_seconds ({settings.max_seconds})")
    return log_mel(samples, settings)


# ---------------------------------------------------------------- corpora and the cache


@dataclass
class SpeechCorpus:
    """Utterances: their log-mels (frames, n_mels) and transcripts, and the files skipped."""

    paths: list[str]  # as written in the TSV file
    texts: list[str]
    features: list[torch.Tensor]
    skipped: list[str]  # "path: reason"

    def __len__(self):
        return len(self.texts)

    def seconds(self, hop_ms: float) -> float:
        return sum(f.size(0) for f in self.features) * hop_ms / 1000


def read_speech_tsv(tsv: Path) -> tuple[list[str], list[str]]:
    """The (audio path, transcript) lines of a TSV file; bad lines are errors naming the line."""
    corpus = read_tsv(tsv)
    return corpus.sources, corpus.targets


def _fingerprint(tsv: Path, paths: list[str], settings: SpeechConfig) -> str:
    """What the cache depends on: the feature settings, the TSV's text and each audio file's size
    and modification time."""
    digest = hashlib.sha256(json.dumps(feature_settings(settings), sort_keys=True).encode())
    digest.update(Path(tsv).read_bytes())
    for path in paths:
        try:
            stat = (Path(tsv).parent / path).stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{path}\0missing\n".encode())
    return digest.hexdigest()


def feature_settings(settings: SpeechConfig) -> dict:
    return {key: getattr(settings, key) for key in ("sample_rate", "n_mels", "window_ms", "hop_ms", "max_seconds")}


def load_speech_corpus(tsv: Path, settings: SpeechConfig, cache: Path | None,
                       log: Callable[[str], None] = print) -> SpeechCorpus:
    """The utterances of ``tsv`` with their features, read from ``cache`` (a safetensors file)
    when it was computed from the same files and settings, else computed and cached there."""
    paths, texts = read_speech_tsv(tsv)
    fingerprint = _fingerprint(tsv, paths, settings)
    corpus = _read_cache(cache, fingerprint) if cache is not None else None
    if corpus is None:
        if cache is not None and cache.exists():
            log(f"{cache}: computed from other files or settings; computing the features again")
        corpus = _compute(tsv, paths, texts, settings)
        if cache is not None:
            _write_cache(cache, corpus, fingerprint)
    else:
        log(f"{tsv}: features read from the cache {cache}")
    _report_skipped(tsv, corpus, log)
    if not corpus.texts:
        raise AttnmtError(f"{tsv}: no usable audio file ({len(corpus.skipped)} skipped)")
    return corpus


def _compute(tsv: Path, paths: list[str], texts: list[str], settings: SpeechConfig) -> SpeechCorpus:
    corpus = SpeechCorpus([], [], [], [])
    for path, text in zip(paths, texts):
        try:
            features = audio_features(Path(tsv).parent / path, settings, path)
        except AudioError as e:
            corpus.skipped.append(str(e))
            continue
        corpus.paths.append(path)
        corpus.texts.append(text)
        corpus.features.append(features)
    return corpus


def _report_skipped(tsv: Path, corpus: SpeechCorpus, log: Callable[[str], None]):
    if corpus.skipped:
        shown = "; ".join(corpus.skipped[:5]) + (f"; ... ({len(corpus.skipped) - 5} more)"
                                                  if len(corpus.skipped) > 5 else "")
        log(f"{tsv}: skipped {len(corpus.skipped)} audio file(s): {shown}")


def _write_cache(path: Path, corpus: SpeechCorpus, fingerprint: str):
    """All utterances as one float16 matrix with their frame counts (half the size of float32;
    log-mels need no more precision)."""
    lengths = [f.size(0) for f in corpus.features]
    frames = torch.cat(corpus.features) if corpus.features else torch.zeros(0, 1)
    metadata = {"fingerprint": fingerprint, "lengths": json.dumps(lengths), "paths": json.dumps(corpus.paths),
                "texts": json.dumps(corpus.texts, ensure_ascii=False), "skipped": json.dumps(corpus.skipped)}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, save({"frames": frames.half().contiguous()}, metadata))


def _read_cache(path: Path, fingerprint: str) -> SpeechCorpus | None:
    try:
        with safe_open(str(path), "pt") as f:
            metadata = f.metadata() or {}
            if metadata.get("fingerprint") != fingerprint:
                return None
            frames = f.get_tensor("frames").float()
        lengths = json.loads(metadata["lengths"])
        features = list(frames.split(lengths)) if lengths else []
        return SpeechCorpus(json.loads(metadata["paths"]), json.loads(metadata["texts"]), features,
                            json.loads(metadata["skipped"]))
    except Exception:  # missing or damaged (safetensors raises its own errors): computed again
        return None
