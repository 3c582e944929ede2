"""Progress bars of the long silent phases (issue 28): on stderr when it is a terminal, never in a
log or a pipe, and wiped when done."""

import io

from attnmt.core.progress import phase_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_phase_bar_shows_on_a_terminal_only(monkeypatch):
    for stderr, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stderr)
        with phase_bar(10, "validation") as bar:
            bar.update(10)
        assert ("validation" in stderr.getvalue()) == shown
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with phase_bar(10, "validation", enabled=False) as bar:  # --no-progress
        bar.update(10)
    assert terminal.getvalue() == ""


def test_translate_shows_a_bar_on_a_terminal_and_translates_the_same(tiny_transformer, monkeypatch):
    texts = ["abc", "hello", "", "abcdefg"] * 5
    quiet = [t.text for t in tiny_transformer.translate(texts, beam=1)]
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert [t.text for t in tiny_transformer.translate(texts, beam=1, progress="test set x")] == quiet
    assert "test set x" in terminal.getvalue() and "/15" in terminal.getvalue()  # the 15 non-empty texts
    piped = io.StringIO()
    monkeypatch.setattr("sys.stderr", piped)
    tiny_transformer.translate(texts, beam=1, progress="test set x")
    assert piped.getvalue() == ""


def test_validation_translates_the_dev_set_under_a_bar(tiny_transformer, monkeypatch):
    from attnmt.seq2seq.training import translate_ids

    model = tiny_transformer
    src_ids = model.src_subwords.encode(["abc", "hello", "abcdefg"] * 4)
    quiet = translate_ids(model.model, src_ids, model.tgt_subwords, model.config.decoding, beam=1)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert (
        translate_ids(model.model, src_ids, model.tgt_subwords, model.config.decoding, beam=1, progress="validation")
        == quiet
    )
    assert "validation" in terminal.getvalue() and "/12" in terminal.getvalue()


def test_speech_features_are_computed_under_a_bar(tmp_path, monkeypatch):
    from attnmt.core.config import SpeechConfig
    from attnmt.speech.audio import load_speech_corpus
    from speech_helpers import random_texts, write_tone_corpus

    tsv = write_tone_corpus(tmp_path, "train", random_texts(12, seed=1))
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    corpus = load_speech_corpus(tsv, SpeechConfig(), None, log=lambda message: None)
    assert len(corpus.texts) == 12
    assert "features of train.tsv" in terminal.getvalue() and "/12" in terminal.getvalue()


def test_speech_test_sets_are_transcribed_under_a_bar(tmp_path, monkeypatch):
    from attnmt.api import load
    from attnmt.speech.error_rates import speech_test_set_reports
    from attnmt.training import train
    from speech_helpers import random_texts, speech_config, write_tone_corpus

    train_tsv = write_tone_corpus(tmp_path, "train", random_texts(8, seed=1))
    test_tsv = write_tone_corpus(tmp_path, "test", random_texts(5, seed=2))
    train(speech_config(tmp_path, train_tsv, test=test_tsv, steps=2), log=lambda m: None, progress=False)
    recognizer = load(tmp_path / "exp")
    quiet = speech_test_set_reports(recognizer, recognizer.test_sets, beam=1, log=lambda m: None)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    shown = speech_test_set_reports(recognizer, recognizer.test_sets, beam=1, log=lambda m: None, progress=True)
    assert shown["test"]["hypotheses"] == quiet["test"]["hypotheses"]
    assert "test set test" in terminal.getvalue() and "/5" in terminal.getvalue()
