"""What the training loop needs to train a speech recogniser (task: speech): the character
vocabulary of the transcripts, the log-mel features of the audio (cached in the experiment
folder), the model, batches of padded features, and the validation (dev loss, CER and WER).

The loss and the model's interface are translation's (attnmt.translation.training): only the
source differs, features (B,T,n_mels) with their lengths instead of token ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch.nn.utils.rnn import pad_sequence

from attnmt.core import distributed
from attnmt.core.config import Config, DecodingConfig
from attnmt.core.distributed import ONE_PROCESS, Processes
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import Batch, target_tensors
from attnmt.data.subwords import Subwords, prepared_subwords, subword_paths, train_target_subwords
from attnmt.seq2seq.training import (
    TrainingLoss,
    best_outputs,
    coverage_note,
    evaluate_loss,
    sequence_loss,
    validation_decoding,
)
from attnmt.speech.audio import SpeechCorpus, load_speech_corpus, read_speech_tsv
from attnmt.speech.error_rates import error_rates
from attnmt.speech.model import build_speech_model
from attnmt.training import fine_tuning
from attnmt.training.loop import TrainingLoop
from attnmt.training.optimization import setup_training

FEATURES = "features"  # folder of the experiment that caches the features of each corpus


@dataclass
class EncodedSpeech:
    """Utterances with their features and encoded transcripts."""

    corpus: SpeechCorpus
    tgt_ids: list[list[int]]

    def __len__(self):
        return len(self.tgt_ids)

    def sizes(self) -> list[int]:
        """Frames of each utterance: what a batch pads (data.batch_tokens counts frames)."""
        return [f.size(0) for f in self.corpus.features]


@dataclass
class SpeechParts:
    """The pieces of a speech experiment that the TrainingLoop takes."""

    setup: object  # TrainingSetup
    sizes: list[int]
    make_batch: Callable[[list[int]], Batch]
    validation: SpeechScores | None
    summary: str
    tgt_sw: Subwords


def feature_batch(features: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,T,n_mels) features padded with zeros, and their lengths: on the CPU, where the features
    are (a batch is moved to the model's device by its user)."""
    return pad_sequence(features, batch_first=True), torch.tensor([f.size(0) for f in features], device="cpu")


def speech_batch(data: EncodedSpeech, indices: list[int]) -> Batch:
    src, lengths = feature_batch([data.corpus.features[i] for i in indices])
    return Batch(src, lengths, *target_tensors([data.tgt_ids[i] for i in indices]), indices)


def prepare_vocabulary(config: Config, log: Callable[[str], None] = print, force: bool = False) -> Subwords:
    """The character vocabulary of the training transcripts (spm/tgt.model), trained unless
    present with the same settings; writes the config into the experiment folder."""
    folder = config.experiment_dir
    _, tgt_path = subword_paths(folder, False)
    if config.training.init_from is not None:  # fine-tuning: the vocabulary of the model it starts from
        fine_tuning.check_same_subwords(config)

    def train():
        if config.training.init_from is not None:
            fine_tuning.copy_subwords(config, log)
            return Subwords(tgt_path)
        _, texts = read_speech_tsv(config.data.train.tsv)
        log(f"training the {config.data.subwords.type} vocabulary of {len(texts):,} transcripts")
        return train_target_subwords(texts, config.data.subwords, folder, config.training.seed)

    return prepared_subwords(config, [tgt_path], train, lambda: Subwords(tgt_path), log, force)


def encoded_speech(
    tsv: Path, name: str, config: Config, tgt_sw: Subwords, max_length: int | None, log: Callable[[str], None] = print
) -> EncodedSpeech:
    """The utterances of ``tsv`` (features cached as features/NAME.safetensors), those whose
    transcript is longer than ``max_length`` characters dropped with a count."""
    corpus = load_speech_corpus(tsv, config.speech, config.experiment_dir / FEATURES / f"{name}.safetensors", log)
    data = EncodedSpeech(corpus, tgt_sw.encode(corpus.texts))
    if max_length is None:
        return data
    keep = [i for i, ids in enumerate(data.tgt_ids) if len(ids) <= max_length]
    if len(keep) < len(data):
        log(f"{tsv}: dropped {len(data) - len(keep)} utterance(s) with transcripts longer than {max_length}")
    if not keep:
        raise AttnmtError(f"{tsv}: no transcript is at most {max_length} characters long; raise data.max_length")
    kept = SpeechCorpus(
        *([column[i] for i in keep] for column in (corpus.paths, corpus.texts, corpus.features)), corpus.skipped
    )
    return EncodedSpeech(kept, [data.tgt_ids[i] for i in keep])


def speech_parts(
    config: Config,
    device: torch.device,
    processes: Processes = ONE_PROCESS,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> SpeechParts:
    """Vocabulary, features, model, loss, optimizer, batches and validation of a speech experiment."""
    with distributed.main_first(processes):  # the main process trains the vocabulary and fills the cache
        tgt_sw = prepare_vocabulary(config, log)
        train = encoded_speech(config.data.train.tsv, "train", config, tgt_sw, config.data.max_length, log)
        dev = (
            encoded_speech(config.data.dev.tsv, "dev", config, tgt_sw, None, log)
            if config.data.dev is not None
            else None
        )
    model = build_speech_model(config.model, config.speech, len(tgt_sw))
    if config.speech.ctc_weight:
        check_ctc_lengths(train, model, config.data.train.tsv, log)
    if config.speech.normalize == "global":
        model.encoder.set_global_statistics(train.corpus.features)
    if config.training.init_from is not None:  # fine-tuning: its weights, global statistics included
        fine_tuning.initialize(model, config)
    model.to(device)
    window, coverage = config.training.attention_window, config.training.coverage_loss
    loss = (
        SpeechLoss(model, config.training.label_smoothing, config.speech.ctc_weight, window, coverage)
        if config.speech.ctc_weight
        else TrainingLoss(model, config.training.label_smoothing, window=window, coverage_weight=coverage)
    )
    setup = setup_training(model, loss, config.training, processes)
    seconds = train.corpus.seconds(config.speech.hop_ms)
    summary = (
        f"model: speech encoder, {config.model.attention_name} attention, "
        f"{sum(p.numel() for p in model.parameters()):,} parameters{coverage_note(coverage)}; "
        f"{len(train):,} training utterances "
        f"({seconds / 3600:.2f} h of audio)"
    )
    validation = SpeechScores(dev, tgt_sw, config, progress) if dev is not None else None
    return SpeechParts(setup, train.sizes(), lambda indices: speech_batch(train, indices), validation, summary, tgt_sw)


def ctc_states_needed(ids: list[int]) -> int:
    """The fewest encoder states CTC can spell ``ids`` in: one per character, and a blank between two
    equal ones."""
    return len(ids) + sum(a == b for a, b in zip(ids, ids[1:]))


def check_ctc_lengths(data: EncodedSpeech, model, tsv: Path, log: Callable[[str], None]) -> int:
    """Warns when some utterances have fewer encoder states than CTC needs (their CTC loss counts
    as 0: only the decoder learns from them); returns how many."""
    states = model.encoder_lengths(torch.tensor(data.sizes(), device="cpu")).tolist()
    short = sum(n < ctc_states_needed(ids) for n, ids in zip(states, data.tgt_ids))
    if short:
        hint = "; speech.subsample: 4 gives twice as many states" if model.speech_config.subsample == 8 else ""
        log(
            f"warning: {tsv}: {short} of {len(data)} utterance(s) have fewer encoder states than their transcript "
            f"needs for CTC (speech.ctc_weight), which ignores them{hint}"
        )
    return short


class SpeechLoss(TrainingLoss):
    """(1 - w) cross-entropy of the decoder + w CTC of the encoder states (Kim et al. 2017), both
    summed over the batch, with the number of target tokens; the attention within ``window``; the
    coverage loss times ``coverage_weight`` (training.coverage_loss) in the decoder's term."""

    def __init__(
        self,
        model,
        label_smoothing: float,
        ctc_weight: float,
        window: tuple[int, int] | None = None,
        coverage_weight: float = 0.0,
    ):
        super().__init__(model, label_smoothing, window=window, coverage_weight=coverage_weight)
        self.ctc_weight = ctc_weight

    def forward(self, batch: Batch) -> tuple[torch.Tensor, int]:
        memory = self.model.encode(batch.src, batch.src_lengths, self.window)
        cross_entropy = sequence_loss(
            self.model, batch, self.label_smoothing, memory, coverage_weight=self.coverage_weight
        )
        ctc = self.model.ctc_loss(memory, batch.tgt_out)
        return (1 - self.ctc_weight) * cross_entropy + self.ctc_weight * ctc, batch.target_tokens


def transcribe_features(
    model,
    features: list[torch.Tensor],
    tgt_sw: Subwords,
    settings: DecodingConfig,
    beam: int | None = None,
    progress: str | None = None,
) -> list[str]:
    """The best transcript of each utterance, in the input order, decoded as ``settings`` say
    (``progress``: a bar's description)."""
    return best_outputs(
        model,
        [f.size(0) for f in features],
        lambda indices: Batch(*feature_batch([features[i] for i in indices])),
        tgt_sw,
        settings,
        beam,
        progress,
    )


@dataclass
class SpeechScores:
    """The validation of a speech model: dev loss and perplexity (teacher forcing), and the CER
    and WER of its transcripts (beam training.dev_beam)."""

    dev: EncodedSpeech
    tgt_sw: Subwords
    config: Config

    progress: bool = True  # a bar while the dev set is transcribed (on a terminal)

    def __call__(self, model) -> dict:
        record = evaluate_loss(
            model, self.dev, self.config.data.batch_size, speech_batch, self.config.training.attention_window
        )
        hypotheses = transcribe_features(
            model,
            self.dev.corpus.features,
            self.tgt_sw,
            validation_decoding(self.config),
            progress="validation" if self.progress else None,
        )
        return {**record, **error_rates(hypotheses, self.dev.corpus.texts)}

    @staticmethod
    def describe(record: dict) -> str:
        return (
            f"dev loss {record['loss']:.3f}, ppl {record['perplexity']:.2f}, CER {record['cer']:.2f}%, "
            f"WER {record['wer']:.2f}%"
        )


def speech_training_loop(
    config: Config, device: torch.device, processes: Processes, log: Callable[[str], None], progress: bool
) -> TrainingLoop:
    """Data, model, loss and validation of a speech experiment in the shared training loop."""
    parts = speech_parts(config, device, processes, log, progress)
    return TrainingLoop(
        config,
        parts.setup,
        parts.sizes,
        parts.make_batch,
        parts.validation,
        parts.summary,
        processes=processes,
        log=log,
        progress=progress,
    )
