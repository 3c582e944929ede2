"""Audio as a source: reading WAV files, log-mel filterbank features, and the feature cache.

    waveform  = read_audio(path, sample_rate)        mono float32, resampled (soundfile + soxr)
    features  = log_mel(waveform, settings)         (frames, n_mels): log of mel-weighted power spectra

A sound file is judged by its header (rate, declared duration) before any sample is decoded, then
decoded in blocks that stop at the duration limit: neither a header that lies nor a long file can
make reading it cost more than that (docs/security.md, "Audio").

A frame is a window of ``window_ms`` every ``hop_ms`` (25 ms every 10 ms: 100 frames a second).
Normalisation (per utterance or global mean and variance) belongs to the model
(attnmt.speech.model), so the cache holds the plain log-mels and one cache serves both.

A corpus is a TSV file of ``path<TAB>transcript`` lines, paths relative to the file. Files that
cannot be used (unreadable, empty, too long) are skipped with a count and their names in the log.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save

from attnmt.core.config import SpeechConfig
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write
from attnmt.core.progress import phase_bar
from attnmt.data.corpus import read_tsv

LOG_FLOOR = 1e-6  # added to the mel energies before the log: silence gives log(1e-6), not -inf


class AudioError(AttnmtError):
    """An audio file that cannot be used, with the reason."""


# ---------------------------------------------------------------- reading

# Sample rates a sound file may have: telephone audio (8 kHz) to studio audio (192 kHz), and
# the 4 kHz the config allows. A rate outside is refused before decoding: resampling a file
# that declares 1 Hz to 16 kHz would multiply its samples by 16,000.
SAMPLE_RATES = (4_000, 192_000)
# Float sound files hold samples around -1 to 1 (a little over when clipped); far beyond (up to
# float32's 3.4e38) the power spectrum overflows to infinity. Such files are refused, as NaN and
# infinite samples are, rather than rescaled: their loudness says they are not sound.
MAX_AMPLITUDE = 1000.0
BLOCK_SAMPLES = 1 << 20  # samples (frames x channels) decoded at a time: 4 MB of float32
UNKNOWN_FRAMES = 2**63 - 1  # what libsndfile says of a file whose header gives no length (a streamed FLAC)


@dataclass(frozen=True)
class AudioHeader:
    """What a sound file's header declares: read before any sample is decoded."""

    frames: int  # samples per channel; UNKNOWN_FRAMES if the header does not say
    rate: int
    channels: int

    @property
    def seconds(self) -> float | None:
        return None if self.frames == UNKNOWN_FRAMES else self.frames / self.rate


def _source(data: bytes | Path, name: str):
    """What soundfile opens: the bytes as a file, or the path once it is known to be a regular
    file (opening a FIFO would wait for a writer, and /dev/zero never ends)."""
    if isinstance(data, bytes):
        return io.BytesIO(data)
    try:
        mode = data.stat().st_mode
    except FileNotFoundError:
        raise AudioError(f"{name}: no such file") from None
    except OSError as e:
        raise AudioError(f"{name}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise AudioError(f"{name}: is a directory, not a sound file")
    if not stat.S_ISREG(mode):
        raise AudioError(f"{name}: not a regular file (a FIFO, device or socket), not a sound file")
    return data


def _reason(error: Exception, name: str) -> str:
    """soundfile's message without the file object it names (``<_io.BytesIO object at 0x...>``:
    a heap address, which tells the user nothing and an attacker something)."""
    text = getattr(error, "error_string", None) or str(error)
    return re.sub(r"<[^<>]* at 0x[0-9a-fA-F]+>", name, text)


def open_audio(data: bytes | Path, name: str):
    """The open soundfile.SoundFile of a sound file (a path, or the file's bytes)."""
    import soundfile

    source = _source(data, name)
    try:
        return soundfile.SoundFile(source)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, OSError) as e:
        raise AudioError(f"{name}: cannot read audio ({_reason(e, name)})") from None


def audio_header(data: bytes | Path, name: str, max_seconds: float | None = None) -> AudioHeader:
    """The frames, rate and channels a sound file declares, without decoding it; AudioError for
    a rate outside SAMPLE_RATES or a declared duration over ``max_seconds``."""
    with open_audio(data, name) as f:
        return _checked_header(AudioHeader(f.frames, f.samplerate, f.channels), name, max_seconds)


def _checked_header(header: AudioHeader, name: str, max_seconds: float | None) -> AudioHeader:
    low, high = SAMPLE_RATES
    if not low <= header.rate <= high:
        raise AudioError(f"{name}: a sample rate of {header.rate:,} Hz; sound files of {low:,} to {high:,} Hz are read")
    if header.frames == 0:
        raise AudioError(f"{name}: empty audio (no samples)")
    if max_seconds is not None and header.seconds is not None and header.seconds > max_seconds:
        raise AudioError(too_long(name, header.seconds, max_seconds))
    return header


def too_long(name: str, seconds: float, max_seconds: float) -> str:
    return f"{name}: {seconds:.1f} s of audio, longer than speech.max_seconds ({max_seconds})"


def decode_audio(
    data: bytes | Path,
    sample_rate: int,
    name: str,
    max_seconds: float | None = None,
    check: Callable[[], None] | None = None,
) -> np.ndarray:
    """The samples of a sound file (a path, or the file's bytes) as mono float32 at ``sample_rate``.

    The header is checked first (rate, declared duration), then the file is decoded in blocks,
    so that neither a forged length nor a file longer than it says (a FLAC header may say anything)
    can make it read more than ``max_seconds`` (and one block): decoding stops there. ``check`` is
    called between blocks (it may raise to stop: the server's time limit)."""
    with open_audio(data, name) as f:
        header = _checked_header(AudioHeader(f.frames, f.samplerate, f.channels), name, max_seconds)
        samples = _decode_blocks(f, header, name, max_seconds, check or (lambda: None))
    if samples.size == 0:
        raise AudioError(f"{name}: empty audio (no samples)")
    if not np.isfinite(samples).all():
        raise AudioError(f"{name}: audio samples that are not numbers (NaN or infinite)")
    peak = float(np.abs(samples).max())
    if peak > MAX_AMPLITUDE:
        raise AudioError(
            f"{name}: audio samples up to {peak:.3g}; sound is within -1 to 1 (float files may go a "
            f"little over), and samples beyond {MAX_AMPLITUDE:g} are refused"
        )
    if header.rate != sample_rate:
        import soxr

        samples = soxr.resample(samples, header.rate, sample_rate).astype(np.float32)
    return samples


def _decode_blocks(f, header: AudioHeader, name: str, max_seconds: float | None, check) -> np.ndarray:
    """The samples of open file ``f``, channels averaged, read a block at a time."""
    limit = None if max_seconds is None else math.floor(max_seconds * header.rate)
    block = np.empty((max(1, BLOCK_SAMPLES // header.channels), header.channels), np.float32)
    blocks, total, more = [], 0, True
    while more:
        check()
        read, more = _read_block(f, block, name, first=not blocks)
        blocks.append(block[:read].mean(axis=1))  # channels averaged
        total += read
        if limit is not None and total > limit:
            raise AudioError(
                f"{name}: more than {max_seconds} s of audio, the limit of speech.max_seconds, though "
                "its header does not say so: decoding stopped there"
            )
    return np.concatenate(blocks)


def _read_block(f, block: np.ndarray, name: str, first: bool) -> tuple[int, bool]:
    """Reads the next frames of ``f`` into ``block``: (frames read, whether more may follow)."""
    import soundfile

    block.fill(np.nan)  # what a failed read left unwritten (see below)
    try:
        read = len(f.read(len(block), dtype="float32", always_2d=True, out=block))
        return read, read == len(block)
    except (soundfile.LibsndfileError, RuntimeError) as e:
        # A header promising more than the file holds (or no length at all) makes soundfile fail
        # after the last samples were read, when it moves past them: keep those, and stop.
        read = _written(block)
        if first and read == 0:
            raise AudioError(f"{name}: cannot read audio ({_reason(e, name)})") from None
        return read, False


def _written(block: np.ndarray) -> int:
    """The frames at the start of ``block`` that a read wrote (the rest is still NaN)."""
    unwritten = np.isnan(block).all(axis=1)
    return len(block) - int(np.argmin(unwritten[::-1])) if not unwritten.all() else 0


def read_audio(path: Path, sample_rate: int, max_seconds: float | None = None) -> np.ndarray:
    return decode_audio(Path(path), sample_rate, str(path), max_seconds)


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


def feature_frames(header: AudioHeader, settings: SpeechConfig, max_seconds: float) -> int:
    """The log-mel frames of a sound file at most, from its header (a file that gives no length
    counts as ``max_seconds`` long: decoding stops there): what its work is reckoned from."""
    seconds = max_seconds if header.seconds is None else min(header.seconds, max_seconds)
    window, hop, _ = frame_sizes(settings)
    samples = math.ceil(seconds * settings.sample_rate)
    return 1 + max(0, samples - window) // hop


def audio_features(
    data: bytes | Path, settings: SpeechConfig, name: str, check: Callable[[], None] | None = None
) -> torch.Tensor:
    """The log-mels of one sound file, or AudioError if it is unusable (also when longer than
    settings.max_seconds, which is known before decoding but for a header that lies); ``check``:
    see decode_audio."""
    return log_mel(decode_audio(data, settings.sample_rate, name, settings.max_seconds, check), settings)


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
            info = (Path(tsv).parent / path).stat()
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{path}\0missing\n".encode())
    return digest.hexdigest()


def feature_settings(settings: SpeechConfig) -> dict:
    return {key: getattr(settings, key) for key in ("sample_rate", "n_mels", "window_ms", "hop_ms", "max_seconds")}


def load_speech_corpus(
    tsv: Path, settings: SpeechConfig, cache: Path | None, log: Callable[[str], None] = print
) -> SpeechCorpus:
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
    for path, text in zip(paths, phase_bar(texts, f"features of {Path(tsv).name}", "file")):
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
        shown = "; ".join(corpus.skipped[:5]) + (
            f"; ... ({len(corpus.skipped) - 5} more)" if len(corpus.skipped) > 5 else ""
        )
        log(f"{tsv}: skipped {len(corpus.skipped)} audio file(s): {shown}")


def _write_cache(path: Path, corpus: SpeechCorpus, fingerprint: str):
    """All utterances as one float16 matrix with their frame counts (half the size of float32;
    log-mels need no more precision)."""
    lengths = [f.size(0) for f in corpus.features]
    frames = torch.cat(corpus.features) if corpus.features else torch.zeros(0, 1)
    metadata = {
        "fingerprint": fingerprint,
        "lengths": json.dumps(lengths),
        "paths": json.dumps(corpus.paths),
        "texts": json.dumps(corpus.texts, ensure_ascii=False),
        "skipped": json.dumps(corpus.skipped),
    }
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
        return SpeechCorpus(
            json.loads(metadata["paths"]), json.loads(metadata["texts"]), features, json.loads(metadata["skipped"])
        )
    except Exception:  # missing or damaged (safetensors raises its own errors): computed again
        return None
