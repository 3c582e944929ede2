"""A translation model and a speech model share what a loaded sequence-to-sequence model is
(attnmt.seq2seq.loaded.LoadedSeq2Seq: its folder, vocabularies, weights and decoding settings),
and each has only what it reads: the Recognizer is not a Translator and has no translate() to
refuse. (The same on trained folders: tests/test_speech_model.py.)"""

import inspect

import pytest

from attnmt.seq2seq.inference import Translator
from attnmt.seq2seq.loaded import LoadedSeq2Seq
from attnmt.speech.recognizer import Recognizer

SHARED = ("__init__", "attention_window", "set_decoding", "mask_heads", "describe", "candidate", "__repr__")
TEXT_ONLY = ("translate", "score", "source_ids", "tags", "ensemble", "align_outputs", "shortlist_table", "beam_tree")


def test_the_recognizer_is_no_translator_and_has_no_translate():
    assert not issubclass(Recognizer, Translator)
    for name in TEXT_ONLY:
        assert hasattr(Translator, name) and not hasattr(Recognizer, name), name
    for name in ("transcribe", "transcribe_files", "transcribe_features", "force_attention", "features"):
        assert hasattr(Recognizer, name) and not hasattr(Translator, name), name


def test_both_load_and_decode_through_the_shared_base():
    assert issubclass(Translator, LoadedSeq2Seq) and issubclass(Recognizer, LoadedSeq2Seq)
    for name in SHARED:
        assert name in vars(LoadedSeq2Seq), name
        assert name not in vars(Recognizer), f"Recognizer redefines {name}"
    assert "__init__" in vars(Translator)  # (its own attributes: aligner, shortlist, ensemble)
    assert inspect.signature(Translator.__init__) == inspect.signature(LoadedSeq2Seq.__init__)
    with pytest.raises(TypeError):  # what a model reads and builds is its subclass's
        LoadedSeq2Seq("no-folder")
