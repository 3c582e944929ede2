"""Python API of a speech model (task: speech): audio in, transcripts with their attention out.

    >>> import attnmt
    >>> model = attnmt.load("runs/quickstart-speech/model")      # a Recognizer
    >>> [t] = model.transcribe(["hello.wav"], beam=5)
    >>> t.text, t.tokens, t.attention.shape, t.features.shape    # (chars, encoder states), (frames, 80)

Each encoder state covers ``frames_per_state`` feature frames (4 or 8, 10 ms each), so row t of
the attention, repeated that many times, lies on the time axis of the spectrogram.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from attnmt.core.config import SpeechConfig
from attnmt.core.devices import to_numpy
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import inside_folder
from attnmt.core.progress import phase_bar
from attnmt.data.batching import inference_batches, target_tensors
from attnmt.data.subwords import Subwords, subword_paths
from attnmt.seq2seq.loaded import LoadedSeq2Seq
from attnmt.seq2seq.results import Candidate, Translation
from attnmt.seq2seq.search import decode
from attnmt.speech.audio import SpeechCorpus, audio_features, load_speech_corpus, read_speech_tsv
from attnmt.speech.model import build_speech_model
from attnmt.speech.training import feature_batch

Audio = str | Path | bytes  # a sound file's path, or its contents


@dataclass(repr=False)  # Translation's short repr: not the numbers of the features
class Transcription(Translation):
    """A Translation of audio: ``source`` names the audio, ``source_tokens`` label the encoder
    states by their start time, and ``features`` are the log-mels that were read (frames, n_mels)."""

    features: np.ndarray | None = None
    frames_per_state: int = 4
    hop_ms: float = 10.0


class Recognizer(LoadedSeq2Seq):
    """A trained speech model with its character vocabulary and decoding settings: audio in,
    transcripts out. It shares its loading and decoding settings with the Translator
    (attnmt.seq2seq.loaded.LoadedSeq2Seq); it reads no text, so it has no translate()."""

    inputs = "audio"
    what = "a speech model (it transcribes audio)"

    def _vocabularies(self):
        if self.config.task != "speech":
            raise AttnmtError(f"{self.folder}: not a speech model (task: {self.config.task})")
        _, path = subword_paths(self.folder, False)
        return None, Subwords(inside_folder(self.folder, path))

    def _build(self):
        return build_speech_model(self.config.model, self.config.speech, len(self.tgt_subwords))

    @property
    def frames_per_state(self) -> int:
        return self.config.speech.subsample

    def features(
        self,
        audio: Audio,
        name: str | None = None,
        settings: SpeechConfig | None = None,
        check: Callable[[], None] | None = None,
    ) -> torch.Tensor:
        """The log-mels (frames, n_mels) of a sound file; AttnmtError if it cannot be used (or is
        longer than max_seconds of ``settings``, by default the model's). ``check`` is called
        between blocks of decoding, and may raise to stop it (attnmt.speech.audio.decode_audio)."""
        return audio_features(
            audio if isinstance(audio, bytes) else Path(audio),
            settings or self.config.speech,
            name or ("audio" if isinstance(audio, bytes) else str(audio)),
            check,
        )

    def encoder_states(self, frames: list[int]) -> list[int]:
        """The encoder states of utterances of these feature frame counts."""
        return self.model.encoder_lengths(torch.tensor(frames, device="cpu")).tolist()

    def read_corpus(self, tsv: Path, log=print, cache: Path | None = None) -> SpeechCorpus:
        """The utterances of a TSV file of audio paths and transcripts (unusable files skipped and
        reported), their features read from or written to ``cache`` if given."""
        return load_speech_corpus(Path(tsv), self.config.speech, cache, log)

    def transcribe(
        self,
        audios: list[Audio],
        beam: int | None = None,
        n_best: int = 1,
        batch_size: int | None = None,
        names: list[str] | None = None,
    ) -> list[Transcription]:
        """The transcript of each sound file (paths or contents), in order."""
        if isinstance(audios, (str, bytes, Path)):
            raise TypeError("transcribe() takes a list; wrap a single file in a list")
        names = names or [("audio" if isinstance(a, bytes) else str(a)) for a in audios]
        features = [self.features(audio, name) for audio, name in zip(audios, names)]
        return self.transcribe_features(features, beam, n_best, batch_size, names)

    def transcribe_files(
        self, paths: list[str], beam: int | None = None, n_best: int = 1, batch_size: int | None = None
    ) -> tuple[list[Transcription], dict[int, str]]:
        """The transcript of each sound file of a list (`attnmt translate`), and the errors by index:
        a file that cannot be used (missing, not a sound file, too long ...) gives an empty
        transcript and its error, so that one bad line does not cost the others; an empty line
        gives an empty transcript, as an empty line of text does."""
        features, errors = {}, {}
        for i, path in enumerate(paths):
            if path.strip():
                try:
                    features[i] = self.features(path)
                except AttnmtError as e:
                    errors[i] = str(e)
        done = self.transcribe_features(list(features.values()), beam, n_best, batch_size, [paths[i] for i in features])
        results = [Transcription(path, [], [Candidate("", [], 0.0, None)]) for path in paths]
        for i, transcription in zip(features, done):
            results[i] = transcription
        return results, errors

    def transcribe_features(
        self,
        features: list[torch.Tensor],
        beam: int | None = None,
        n_best: int = 1,
        batch_size: int | None = None,
        names: list[str] | None = None,
        progress: str | None = None,
    ) -> list[Transcription]:
        """The transcriptions of log-mel features; ``progress``: the description of a progress bar
        (stderr, on a terminal only)."""
        dc = self.config.decoding
        beam = dc.beam if beam is None else beam
        if beam < 1 or n_best < 1 or n_best > beam:
            raise ValueError(f"need 1 <= n_best <= beam (got beam {beam}, n_best {n_best})")
        names = names or [f"utterance {i}" for i in range(len(features))]
        results: list[Transcription | None] = [None] * len(features)
        with phase_bar(len(features), progress or "", "utterance", enabled=progress is not None) as bar:
            for indices in inference_batches([f.size(0) for f in features], batch_size or dc.batch_size):
                src, lengths = feature_batch([features[i] for i in indices])
                with torch.inference_mode():
                    decoded = decode(
                        self.model, src.to(self.device), lengths.to(self.device), dc, beam=beam, n_best=n_best
                    )
                for i, hypotheses in zip(indices, decoded):
                    results[i] = self._transcription(names[i], features[i], [self.candidate(h) for h in hypotheses])
                bar.update(len(indices))
        return results

    def force_attention(
        self, features: list[torch.Tensor], texts: list[str], batch_size: int | None = None
    ) -> list[np.ndarray]:
        """The attention of the model forced to write each transcript: per utterance an array
        (target pieces + EOS, encoder states) whose rows sum to 1 (see
        attnmt.translation.align.force_attention)."""
        if not self.model.has_attention:
            raise AttnmtError(f"the model in {self.folder} has attention 'none': it has no attention weights")
        ids = self.tgt_subwords.encode(list(texts))
        results: list[np.ndarray | None] = [None] * len(texts)
        for indices in inference_batches([f.size(0) for f in features], batch_size or self.config.decoding.batch_size):
            src, lengths = feature_batch([features[i] for i in indices])
            tgt_in, _ = target_tensors([ids[i] for i in indices])
            with torch.inference_mode():
                _, weights = self.model.decoder_outputs(
                    src.to(self.device), lengths.to(self.device), tgt_in.to(self.device), self.attention_window
                )
            states = self.model.encoder_lengths(lengths).tolist()
            for row, i in enumerate(indices):
                results[i] = to_numpy(weights[row, : len(ids[i]) + 1, : states[row]].float())
        return results

    def _transcription(self, name: str, features: torch.Tensor, candidates) -> Transcription:
        return Transcription(
            name,
            self.state_labels(features.size(0)),
            candidates,
            features=to_numpy(features),
            frames_per_state=self.frames_per_state,
            hop_ms=self.config.speech.hop_ms,
        )

    def state_labels(self, frames: int) -> list[str]:
        """The start time of each encoder state, e.g. "0.32s": the source tokens of speech."""
        step = self.frames_per_state * self.config.speech.hop_ms / 1000
        [states] = self.encoder_states([frames])
        return [f"{i * step:.2f}s" for i in range(states)]

    def trace(self, audio: Audio, top_k: int = 5, name: str | None = None, stop: Callable[[], bool] | None = None):
        """Greedy transcription of one sound file with every quantity of every decoder step
        (see attnmt.seq2seq.trace); the trace's ``features`` are the log-mels. ``stop``: asked
        between two decoder steps; when it says True, attnmt.seq2seq.decoding.DecodingStopped."""
        return self.trace_features(
            self.features(audio, name), top_k, name or ("audio" if isinstance(audio, bytes) else str(audio)), stop
        )

    def trace_features(
        self, features: torch.Tensor, top_k: int = 5, name: str = "audio", stop: Callable[[], bool] | None = None
    ):
        from attnmt.seq2seq.trace import trace_source

        src, lengths = feature_batch([features])
        result = trace_source(self, src, lengths, name, self.state_labels(features.size(0)), top_k, stop=stop)
        return replace(
            result,
            features=to_numpy(features),
            frames_per_state=self.frames_per_state,
            hop_ms=self.config.speech.hop_ms,
        )

    @property
    def test_sets(self) -> dict:
        return dict(self.config.data.test)

    def files_of_test_set(self, files) -> list[Path]:
        """The TSV of a test set and every sound file it lists (relative to its folder)."""
        return [files.tsv, *(files.tsv.parent / audio for audio in read_speech_tsv(files.tsv)[0])]
