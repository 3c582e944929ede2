"""Speech (task: speech): features against a reference computed another way, the feature cache, bad
audio files, the speech encoder's lengths and masks, error rates, the config, and a tiny model that
learns a few synthetic utterances."""

import math

import numpy as np
import pytest
import soundfile
import torch

from attnmt.core.config import RNNConfig, SpeechConfig, config_from_dict
from attnmt.core.errors import AttnmtError
from attnmt.speech.audio import AudioError, audio_features, load_speech_corpus, log_mel, read_audio, read_speech_tsv
from attnmt.speech.error_rates import (
    error_rates,
    error_rates_by_length,
    format_speech_report,
    nearest_piece,
    place_kept,
    speech_report,
)
from attnmt.speech.model import build_speech_model
from speech_helpers import RATE, random_texts, speech_config, tone, write_tone_corpus


def reference_log_mel(samples: np.ndarray, rate: int, n_mels: int) -> np.ndarray:
    """Log-mels the slow, plain way: numpy frames cut one by one, a periodic Hann window, the DFT
    of each, and triangular filters on the mel scale evaluated bin by bin."""
    window, hop = int(0.025 * rate), int(0.010 * rate)
    n_fft = 1 << math.ceil(math.log2(window))
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(window) / window)
    mel = lambda f: 2595 * math.log10(1 + f / 700)  # noqa: E731
    inverse = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    edges = [inverse(mel(rate / 2) * i / (n_mels + 1)) for i in range(n_mels + 2)]
    filters = np.zeros((n_fft // 2 + 1, n_mels))
    for k in range(n_fft // 2 + 1):
        f = k * rate / n_fft
        for m in range(n_mels):
            low, centre, high = edges[m], edges[m + 1], edges[m + 2]
            if low <= f <= centre:
                filters[k, m] = (f - low) / (centre - low)
            elif centre < f <= high:
                filters[k, m] = (high - f) / (high - centre)
    rows = []
    for start in range(0, len(samples) - window + 1, hop):
        frame = np.zeros(n_fft)
        frame[:window] = samples[start : start + window] * hann
        rows.append(np.abs(np.fft.rfft(frame)) ** 2 @ filters)
    return np.log(np.array(rows) + 1e-6)


def test_log_mel_of_a_tone_matches_a_plain_numpy_reference():
    samples = tone(1000.0, 0.5)
    settings = SpeechConfig(n_mels=80)
    features = log_mel(samples, settings).numpy()
    expected = reference_log_mel(samples, RATE, 80)
    assert features.shape == (1 + (8000 - 400) // 160, 80) == expected.shape
    np.testing.assert_allclose(features, expected, atol=2e-3, rtol=1e-4)
    # the loudest mel bin is the one whose centre frequency is nearest 1000 Hz
    centres = [700 * (10 ** (2595 * math.log10(1 + 8000 / 700) * (i + 1) / 81 / 2595) - 1) for i in range(80)]
    assert int(np.argmax(features.mean(0))) == int(np.argmin([abs(c - 1000) for c in centres]))


def test_audio_at_another_rate_and_in_stereo_is_resampled_to_the_same_features(tmp_path):
    at_8k, stereo = tmp_path / "8k.wav", tmp_path / "stereo.wav"
    soundfile.write(at_8k, tone(440.0, 0.5, rate=8000), 8000)
    soundfile.write(stereo, np.stack([tone(440.0, 0.5)] * 2, axis=1), RATE)
    assert read_audio(at_8k, RATE).shape == (8000,) == read_audio(stereo, RATE).shape
    a, b = audio_features(at_8k, SpeechConfig(), "a"), audio_features(stereo, SpeechConfig(), "b")
    assert a.shape == b.shape
    assert int(a.mean(0).argmax()) == int(b.mean(0).argmax())  # the same pitch, in the same mel bin


def test_feature_cache_is_reused_and_rebuilt_when_files_or_settings_change(tmp_path):
    tsv = write_tone_corpus(tmp_path, "set", ["ab", "cd ab", "dc"])
    cache = tmp_path / "exp" / "features" / "set.safetensors"
    messages = []
    first = load_speech_corpus(tsv, SpeechConfig(), cache, messages.append)
    assert cache.is_file() and not messages
    again = load_speech_corpus(tsv, SpeechConfig(), cache, messages.append)
    assert messages == [f"{tsv}: features read from the cache {cache}"]
    assert again.texts == first.texts and all(
        torch.allclose(a, b, atol=1e-2) for a, b in zip(again.features, first.features)
    )
    messages.clear()
    other = load_speech_corpus(tsv, SpeechConfig(n_mels=40), cache, messages.append)
    assert "computing the features again" in messages[0] and other.features[0].shape[1] == 40
    soundfile.write(tmp_path / "set" / "0.wav", tone(300.0, 1.0), RATE)  # a file changes: its features too
    messages.clear()
    changed = load_speech_corpus(tsv, SpeechConfig(n_mels=40), cache, messages.append)
    assert "computing the features again" in messages[0] and changed.features[0].shape[0] > first.features[0].shape[0]


def test_bad_audio_files_are_reported_and_skipped(tmp_path):
    soundfile.write(tmp_path / "good.wav", tone(440.0, 0.3), RATE)
    (tmp_path / "text.wav").write_text("not audio at all", encoding="utf-8")
    soundfile.write(tmp_path / "empty.wav", np.zeros(0, np.float32), RATE)
    soundfile.write(tmp_path / "long.wav", tone(440.0, 3.0), RATE)
    tsv = tmp_path / "set.tsv"
    tsv.write_text("good.wav\tab\ntext.wav\tcd\nmissing.wav\tab\nempty.wav\tba\nlong.wav\tdd\n", encoding="utf-8")
    messages = []
    corpus = load_speech_corpus(tsv, SpeechConfig(max_seconds=2.0), None, messages.append)
    assert corpus.texts == ["ab"]
    [report] = messages
    assert report.startswith(f"{tsv}: skipped 4 audio file(s)")
    for name, reason in (
        ("text.wav", "cannot read audio"),
        ("missing.wav", "no such file"),
        ("empty.wav", "empty audio"),
        ("long.wav", "3.0 s of audio, longer than speech.max_seconds"),
    ):
        assert f"{name}: {reason}" in report
    tsv.write_text("text.wav\tcd\n", encoding="utf-8")
    with pytest.raises(AttnmtError, match=r"no usable audio file \(1 skipped\)"):
        load_speech_corpus(tsv, SpeechConfig(), None, messages.append)
    tsv.write_text("good.wav ab\n", encoding="utf-8")
    with pytest.raises(AttnmtError, match=r"line 1 has 1 tab-separated column"):
        load_speech_corpus(tsv, SpeechConfig(), None, messages.append)
    with pytest.raises(AudioError, match="bytes: cannot read audio"):
        audio_features(b"RIFF....junk", SpeechConfig(), "bytes")


@pytest.mark.parametrize("subsample", [4, 8])
def test_speech_encoder_lengths_and_masks_of_a_padded_batch(subsample):
    model = build_speech_model(
        RNNConfig(
            embedding_size=16,
            encoder_hidden=16,
            decoder_hidden=32,
            attention="location",
            attention_size=16,
            location_kernel=5,
        ),
        SpeechConfig(n_mels=20, conv_channels=4, subsample=subsample),
        12,
    ).eval()
    lengths = torch.tensor([97, 40, 9, 1])
    features = torch.randn(4, 97, 20)
    memory = model.encode(features, lengths)
    expected = [-(-n // subsample) for n in lengths.tolist()]  # ceil(n / 4) or ceil(n / 8)
    assert memory.states.shape[1] == expected[0]
    assert memory.mask.sum(1).tolist() == expected
    for b, n in enumerate(lengths.tolist()):  # alone, without padding: the same states at the real positions
        alone = model.encode(features[b : b + 1, :n], lengths[b : b + 1])
        torch.testing.assert_close(alone.states[0], memory.states[b, : expected[b]], atol=1e-5, rtol=1e-4)
    step = model.decode_step(torch.full((4,), 2), model.init_state(memory), memory)
    assert (step.weights[~memory.mask] == 0).all()
    torch.testing.assert_close(step.weights.sum(1), torch.ones(4))


def test_ctc_loss_is_over_the_characters_of_each_utterance_and_joins_the_decoder_loss():
    from attnmt.data.batching import target_tensors
    from attnmt.seq2seq.training import sequence_loss
    from attnmt.speech.training import SpeechLoss

    speech = SpeechConfig(n_mels=20, conv_channels=4, subsample=4, ctc_weight=0.3)
    model = build_speech_model(
        RNNConfig(
            embedding_size=16,
            encoder_hidden=16,
            decoder_hidden=32,
            attention="location",
            attention_size=16,
            location_kernel=5,
            dropout=0.0,
        ),
        speech,
        12,
    ).eval()
    assert build_speech_model(RNNConfig(), SpeechConfig(), 12).ctc is None  # no CTC layer unless asked
    lengths, targets = torch.tensor([80, 37]), [[4, 5, 5, 6], [7]]
    features = torch.randn(2, 80, 20)
    tgt_in, tgt_out = target_tensors(targets)  # tgt_out: the characters, EOS, padding
    memory = model.encode(features, lengths)
    expected = 0.0
    for b, chars in enumerate(targets):  # each utterance alone: its states, its characters only
        states = memory.mask[b].sum()
        log_probs = torch.log_softmax(model.ctc(memory.states[b : b + 1, :states]), -1).transpose(0, 1)
        expected += torch.nn.functional.ctc_loss(
            log_probs, torch.tensor([chars]), states.view(1), torch.tensor([len(chars)]), blank=0, reduction="sum"
        )
    torch.testing.assert_close(model.ctc_loss(memory, tgt_out), expected)

    from attnmt.data.batching import Batch

    batch = Batch(features, lengths, tgt_in, tgt_out)
    loss, tokens = SpeechLoss(model, 0.0, 0.3)(batch)
    torch.testing.assert_close(loss, 0.7 * sequence_loss(model, batch) + 0.3 * expected)
    assert tokens == 4 + 1 + 1 + 1  # characters and EOS
    covered, _ = SpeechLoss(model, 0.0, 0.3, coverage_weight=2.0)(batch)  # (training.coverage_loss: the decoder's)
    torch.testing.assert_close(covered, 0.7 * sequence_loss(model, batch, coverage_weight=2.0) + 0.3 * expected)
    assert covered > loss
    with pytest.raises(ValueError, match="ctc_weight"):
        SpeechConfig(ctc_weight=1.0)


def test_utterances_too_short_for_ctc_are_counted_with_a_warning(tmp_path):
    from attnmt.speech.audio import SpeechCorpus
    from attnmt.speech.training import EncodedSpeech, check_ctc_lengths, ctc_states_needed

    assert ctc_states_needed([4, 5, 6]) == 3 and ctc_states_needed([4, 4, 5, 5, 5]) == 8  # blanks between repeats
    model = build_speech_model(
        RNNConfig(embedding_size=16, encoder_hidden=16, decoder_hidden=32),
        SpeechConfig(n_mels=20, conv_channels=4, subsample=8, ctc_weight=0.3),
        12,
    )
    frames = [80, 16, 24]  # 10, 2 and 3 encoder states at 8 frames a state
    data = EncodedSpeech(
        SpeechCorpus(["a", "b", "c"], ["", "", ""], [torch.zeros(n, 20) for n in frames], []),
        [[4, 5, 6], [4, 5, 6], [4, 4, 5]],
    )  # needs 3, 3 and 4 states
    messages = []
    assert check_ctc_lengths(data, model, tmp_path / "train.tsv", messages.append) == 2
    assert messages == [
        f"warning: {tmp_path / 'train.tsv'}: 2 of 3 utterance(s) have fewer encoder states than "
        "their transcript needs for CTC (speech.ctc_weight), which ignores them; speech.subsample: 4 "
        "gives twice as many states"
    ]


def test_spec_augment_masks_bands_of_real_frames_and_only_in_training():
    from attnmt.core.config import SpecAugment
    from attnmt.speech.model import spec_augment

    torch.manual_seed(0)
    x, lengths = torch.ones(3, 50, 20), torch.tensor([50, 30, 10])
    masked = spec_augment(x, lengths, SpecAugment(freq_masks=1, freq_width=6, time_masks=1, time_width=8))
    assert (x == 1).all()  # the input is left alone
    for b, n in enumerate(lengths.tolist()):
        zero = masked[b] == 0
        bins, frames = zero.all(0).sum().item(), zero[:n].all(1).sum().item()
        assert bins <= 6 and frames <= min(8, n // 5)
        assert zero[:n].sum() == bins * n + frames * 20 - bins * frames  # whole bands of bins and of frames
        assert not zero[n:].all(1).any()  # no frame of the padding is masked
    assert (masked == 0).any()
    model = build_speech_model(
        RNNConfig(
            embedding_size=8,
            encoder_hidden=8,
            decoder_hidden=16,
            attention="location",
            attention_size=8,
            location_kernel=3,
            dropout=0.0,
        ),
        SpeechConfig(n_mels=20, conv_channels=2, spec_augment=SpecAugment(freq_width=19)),
        6,
    ).eval()
    features, two = torch.randn(2, 40, 20), torch.tensor([40, 40])
    torch.testing.assert_close(model.encode(features, two).states, model.encode(features, two).states)
    model.train()
    assert not torch.allclose(model.encode(features, two).states, model.encode(features, two).states)


def test_error_rates_of_hand_made_cases():
    assert error_rates(["a b c"], ["a b c"]) == {"cer": 0.0, "wer": 0.0}
    rates = error_rates(["a x c"], ["a b c"])
    assert rates["wer"] == pytest.approx(100 / 3) and rates["cer"] == pytest.approx(100 / 5)
    assert error_rates([""], ["one two"]) == {"cer": 100.0, "wer": 100.0}  # everything deleted
    assert error_rates(["one two three"], ["one"])["wer"] == 200.0  # insertions count
    # corpus rates: total edits over total reference length, not a mean of sentence rates
    assert error_rates(["a", "b c d e"], ["x", "b c d e"])["wer"] == pytest.approx(100 / 5)
    buckets = error_rates_by_length(["one", "one two", "one x"], ["one", "one two", "one two"])
    assert [(b["low"], b["utterances"], b["wer"]) for b in buckets] == [(1, 1, 0.0), (2, 2, 25.0)]
    report = speech_report(["one", "one x"], ["one", "one two"])
    assert report["utterances"] == 2 and "reference words" in format_speech_report(report)


def test_place_kept_on_hand_made_attention():
    from attnmt.speech.corpora import Piece

    # two recordings: "ab" at 0-0.4 s and "cd ab" at 0.6-1.2 s; states of 0.1 s (centres 0.05, 0.15, ...)
    pieces = [Piece(0.0, 0.4, 1), Piece(0.6, 1.2, 2)]
    tokens = ["▁", "a", "b", "▁", "c", "d", "▁", "a", "b"]  # rows 0-8, then EOS
    peaks = [9, 1, 2, 9, 6, 4, 0, 11, 11, 0]  # "d" peaks at 0.45 s (nearer to the first piece), EOS anywhere
    matrix = np.full((10, 12), 0.01)
    matrix[np.arange(10), peaks] = 1.0
    report = place_kept([matrix / matrix.sum(1, keepdims=True)], [tokens], [pieces], seconds_per_state=0.1)
    assert report["characters"] == 6  # spaces and EOS not counted
    assert report["in_place"] == pytest.approx(100 * 5 / 6)
    assert [(b["piece"], b["characters"], b["in_place"]) for b in report["by_piece"]] == [(1, 2, 100.0)]
    assert report["last"] == {"characters": 4, "in_place": 75.0}  # the second piece is the last
    # the gap between two pieces goes to the nearer one; inside a piece, to that piece
    assert nearest_piece(np.array([0.1, 0.45, 0.55, 0.9, 5.0]), [(0.0, 0.4), (0.6, 1.2)]).tolist() == [0, 0, 1, 1, 1]


def test_speech_config_defaults_and_errors(tmp_path):
    base = {
        "task": "speech",
        "experiment_dir": "exp",
        "data": {"train": {"tsv": "t.tsv"}},
        "training": {"max_steps": 1},
    }
    config = config_from_dict(base, tmp_path)
    assert config.speech.n_mels == 80 and config.speech.window_ms == 25 and config.speech.hop_ms == 10
    assert config.data.subwords.type == "char" and not config.data.subwords.joint
    assert config.training.early_stopping_metric == "cer"
    bad = [
        ({"training": {"max_steps": 1, "early_stopping_metric": "bleu"}}, "scored by cer"),
        ({"data": {"train": {"tsv": "t.tsv"}, "dev": {"split": 10}}}, "data.dev as {tsv: FILE}"),
        ({"speech": {"subsample": 3}}, "speech.subsample"),
        ({"speech": {"spec_augment": {"freq_masks": -1}}}, "speech.spec_augment.freq_masks"),
        ({"speech": {"n_mel": 40}}, "speech.n_mel: unknown field"),
        ({"model": {"type": "transformer"}}, "model.type: rnn"),
    ]
    for change, message in bad:
        with pytest.raises(AttnmtError, match=message.replace("{", r"\{").replace("}", r"\}")):
            config_from_dict({**base, **change}, tmp_path)
    with pytest.raises(AttnmtError, match="the speech section is for task: speech"):
        config_from_dict({**base, "task": "translation", "speech": {}}, tmp_path)


@pytest.mark.slow  # trains a model (the marker's rule; keeps pytest -m 'not slow' under a minute)
def test_a_tiny_model_learns_a_few_synthetic_utterances(tmp_path):
    """Eight tone 'utterances' learnt by a tiny model in 150 steps (seconds): CER on them below 10%."""
    from attnmt.api import load
    from attnmt.training import train

    texts = random_texts(8, seed=3)
    tsv = write_tone_corpus(tmp_path, "train", texts)
    config = speech_config(tmp_path, tsv, dev=tsv, steps=150)
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    model = load(config.experiment_dir)
    hypotheses = [t.text for t in model.transcribe([tmp_path / "train" / f"{i}.wav" for i in range(8)], beam=1)]
    assert error_rates(hypotheses, texts)["cer"] < 10
    # forced to write the transcripts: one row per character and EOS, one column per encoder state
    features = [model.features(tmp_path / "train" / f"{i}.wav") for i in range(8)]
    matrices = model.force_attention(features, texts, batch_size=3)
    for matrix, text, f in zip(matrices, texts, features):
        assert matrix.shape == (
            len(model.tgt_subwords.encode([text])[0]) + 1,
            int(model.model.encoder_lengths(torch.tensor([f.size(0)]))),
        )
        np.testing.assert_allclose(matrix.sum(1), 1.0, atol=1e-5)
    # on utterances joined three at a time, every character (not the spaces) is scored, by position
    from attnmt.speech.corpora import join_utterances
    from attnmt.speech.error_rates import place_report

    joined = join_utterances(tsv, tmp_path, copies=3, count=4, seed=1)
    report = place_report(model, joined, log=lambda m: None)
    _, joined_texts = read_speech_tsv(joined)
    assert report["characters"] == sum(len(t.replace(" ", "")) for t in joined_texts)
    assert [b["piece"] for b in report["by_piece"]] == [1, 2] and 0 <= report["in_place"] <= 100
    assert report["characters"] == sum(b["characters"] for b in report["by_piece"]) + report["last"]["characters"]
