"""Extra training corpora (data.extra_train): back-translations and other corpora beside data.train,
each with an optional tag (a source piece of its own) and a repeat count."""

import pytest

from attnmt.api import load
from attnmt.core.config import config_from_dict
from attnmt.core.errors import AttnmtError
from attnmt.info import format_info, model_info
from attnmt.training import Trainer
from conftest import reverse, toy_config, write_tsv

QUIET = {"log": lambda message: None, "progress": False}
MAIN = [(s, reverse(s)) for s in ("abc", "bcd", "cde", "abcde")]
SYNTHETIC = [("xab", "bax"), ("xcd", "dcx"), ("xde", "edx")]
OTHER = [("ab", "ba"), ("cd", "dc")]


def extra_config(folder, extra=None, training=None, model=None):
    """A toy config whose data.extra_train is the synthetic pairs tagged <BT> twice, and two untagged pairs."""
    if extra is None:
        extra = [
            {"tsv": str(write_tsv(folder / "synthetic.tsv", SYNTHETIC)), "tag": "<BT>", "repeat": 2},
            {"tsv": str(write_tsv(folder / "other.tsv", OTHER))},
        ]
    return toy_config(
        folder,
        MAIN,
        MAIN[:2],
        data={"extra_train": extra},
        model=model,
        training={"max_steps": 2, "validate_every": 10, **(training or {})},
    )


def test_the_extra_pairs_follow_data_train_repeated_their_sources_after_the_tag_piece(tmp_path):
    lines = []
    config = extra_config(tmp_path)
    trainer = Trainer(config, log=lines.append, progress=False)
    data, src_sw = trainer.data.train, trainer.data.src_sw
    tag = src_sw.sp.piece_to_id("<BT>")
    assert tag > 3 and src_sw.pieces([tag]) == ["<BT>"]  # a piece of its own, in the vocabulary
    sources = [s for s, _ in MAIN] + [s for s, _ in SYNTHETIC] * 2 + [s for s, _ in OTHER]
    targets = [t for _, t in MAIN] + [t for _, t in SYNTHETIC] * 2 + [t for _, t in OTHER]
    assert [trainer.data.tgt_sw.decode(ids) for ids in data.tgt_ids] == targets
    encoded = src_sw.encode(sources)
    assert len(data) == len(sources)
    for i, ids in enumerate(data.src_ids):
        tagged = len(MAIN) <= i < len(MAIN) + 2 * len(SYNTHETIC)
        assert ids == ([tag] if tagged else []) + encoded[i], i
    assert data.lines is None  # (the lines of data.train only are known: no guided alignment)
    assert any("3 extra training pairs, tagged <BT>, 2 times" in line for line in lines)
    assert trainer.train().step == 2
    assert len(load(config.experiment_dir).translate(["abc"])) == 1
    info = format_info(model_info(config.experiment_dir))
    assert "data extra train 1  " in info and "synthetic.tsv (tagged <BT>, 2 times)" in info
    assert info.split("data extra train 2")[1].split("\n")[0].strip().endswith("other.tsv")


def test_the_tags_are_subword_settings(tmp_path):
    config = extra_config(tmp_path)
    Trainer(config, **QUIET)
    config.data.extra_train[0].tag = "<SYN>"  # subwords learnt without this tag are not reused
    with pytest.raises(AttnmtError, match="other settings"):
        Trainer(config, **QUIET)
    config.data.extra_train = []
    with pytest.raises(AttnmtError, match="other settings"):
        Trainer(config, **QUIET)


def test_a_model_fine_tuned_from_subwords_without_the_tag_is_refused(tmp_path):
    base = toy_config(tmp_path / "base", MAIN, training={"max_steps": 1})
    Trainer(base, **QUIET).train()
    config = extra_config(tmp_path, training={"init_from": str(base.experiment_dir)})
    with pytest.raises(AttnmtError, match="the tag '<BT>' is no piece of the subwords"):
        Trainer(config, **QUIET)


@pytest.mark.parametrize(
    "extra, field, message",
    [
        ({"tag": "<B T>"}, "data.extra_train.0.tag", "pattern"),
        ({"tag": "BT"}, "data.extra_train.0.tag", "pattern"),
        ({"tag": "<unk>"}, "data.extra_train.0", "special piece"),
        ({"repeat": 0}, "data.extra_train.0.repeat", "greater than or equal to 1"),
        ({"split": 5, "src": None, "tgt": None}, "data.extra_train.0", "files"),
    ],
)
def test_bad_extra_corpora_are_errors_naming_the_field(tmp_path, extra, field, message):
    files = {"src": str(tmp_path / "a.de"), "tgt": str(tmp_path / "a.en")}
    with pytest.raises(AttnmtError) as info:
        extra_config(tmp_path, extra=[{k: v for k, v in {**files, **extra}.items() if v is not None}])
    assert field in str(info.value) and message in str(info.value)


def test_a_missing_extra_file_is_an_error_naming_it(tmp_path):
    config = extra_config(tmp_path, extra=[{"src": str(tmp_path / "nowhere.de"), "tgt": str(tmp_path / "a.en")}])
    with pytest.raises(AttnmtError, match="nowhere.de"):
        Trainer(config, **QUIET)


def test_tasks_and_settings_that_cannot_train_on_extra_corpora_refuse(tmp_path):
    extra = [{"tsv": str(tmp_path / "x.tsv")}]
    raw = {
        "experiment_dir": str(tmp_path / "exp"),
        "task": "speech",
        "data": {"train": {"tsv": str(tmp_path / "t.tsv")}, "extra_train": extra},
        "training": {"max_steps": 1},
    }
    with pytest.raises(AttnmtError, match="data.extra_train is for task: translation"):
        config_from_dict(raw, tmp_path)
    guided = {"links": "eflomal"}
    with pytest.raises(AttnmtError, match="cannot train with data.extra_train"):
        toy_config(tmp_path, MAIN, data={"extra_train": extra}, training={"guided_alignment": guided})
    raw = {
        "experiment_dir": str(tmp_path / "exp"),
        "task": "pairs",
        "data": {"train": {"tsv": str(tmp_path / "t.tsv")}, "extra_train": extra},
        "training": {"max_steps": 1},
    }
    with pytest.raises(AttnmtError, match="data.extra_train: unknown field"):
        config_from_dict(raw, tmp_path)


def test_pairs_too_uneven_are_dropped_from_every_corpus_with_a_count(tmp_path):
    lines = []
    uneven = [("abcdef", "a"), ("ab", "abcdefabcdef")]  # 7 / 2 and 13 / 3 pieces (each side: "▁" and characters)
    extra = [{"tsv": str(write_tsv(tmp_path / "extra.tsv", SYNTHETIC + uneven))}]
    config = toy_config(
        tmp_path, MAIN + uneven, data={"extra_train": extra, "max_length_ratio": 3}, training={"max_steps": 1}
    )
    trainer = Trainer(config, log=lines.append, progress=False)
    data = trainer.data.train
    assert [trainer.data.src_sw.decode(ids) for ids in data.src_ids] == [s for s, _ in MAIN + SYNTHETIC]
    assert sum("dropped 2 pair(s) whose longer side has more than 3 times" in line for line in lines) == 2
    config.data.max_length_ratio = 4.5  # (3.5 and 4.33 times: kept)
    assert len(Trainer(config, **QUIET).data.train) == len(MAIN + SYNTHETIC + uneven * 2)
    with pytest.raises(AttnmtError, match="data.max_length_ratio"):
        toy_config(tmp_path, MAIN, data={"max_length_ratio": 0.5})
