"""The pair task's training TSV streamed (issue 50): its labels gathered in one pass, its subwords
learnt from another, its pairs encoded a chunk at a time into flat arrays (attnmt.pairs.data
.TrainingPairs), never a whole read of the file (`whole_reads_refused`). The pairs, the log, the
errors and every batch of an epoch are those of the corpus held in memory, as attnmt read it
before (`read_pairs` and `encode_pairs`, which the dev and test sets still use), on a sample of
SICK with empty, long and badly spaced pairs mixed in; the peak memory of a fresh process grows
by little from 2,000 to 20,000 pairs (the slow test at the end)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from attnmt.core.config import PairFiles, config_from_dict
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import epoch_batches
from attnmt.pairs import data as pair_data
from attnmt.pairs.data import encode_pairs, encode_training_pairs, read_pairs
from attnmt.pairs.training import pair_training_batch, prepare_pair_data
from conftest import shared_data, write
from test_streamed_corpus_commands import whole_reads_refused

COLUMNS = {"premise_column": "sentence_A", "hypothesis_column": "sentence_B", "label_column": "entailment_judgment"}


def sick_sample(path: Path, pairs: int = 600) -> Path:
    """The header and ``pairs`` lines of SICK's training set, with a pair of an empty premise, a
    blank line, one of a blank hypothesis and one spaced with tabs' neighbours mixed in."""
    lines = shared_data("nli", "SICK_train.txt").read_text(encoding="utf-8").split("\n")
    odd = ["9001\t\tA man is cooking\t1\tNEUTRAL", "", "9002\tA dog runs\t \t1\tENTAILMENT"]
    odd += ["9003\t  A  cat\u00a0sleeps \tA cat is asleep\t5\tENTAILMENT"]
    return write(path, "\n".join(lines[:40] + odd + lines[40 : pairs + 1 - len(odd)]) + "\n")


def pair_experiment(tmp_path: Path, train: Path, **data) -> dict:
    return {
        "experiment_dir": str(tmp_path / "exp"),
        "task": "pairs",
        "data": {
            "train": {"tsv": str(train), **COLUMNS},
            "subwords": {"type": "word", "vocab_size": 500, "lowercase": True},
            "batch_size": 16,
            **data,
        },
        "model": {"embedding_size": 8, "hidden_size": 8},
        "training": {"max_steps": 5, "seed": 7},
    }


def in_memory(files: PairFiles, subwords, labels, max_length, log):
    """The training pairs as attnmt encoded them before it streamed them: the file read whole, then encoded."""
    return encode_pairs(read_pairs(files), subwords, labels, str(files.tsv), max_length, log)


@pytest.mark.parametrize("chunk", [7, 2_000])
def test_the_streamed_training_pairs_and_batches_are_those_of_the_corpus_held_in_memory(tmp_path, monkeypatch, chunk):
    """Labels, pieces, lines, sizes, the log and every batch of two epochs (pieces and labels)
    equal those of the corpus held in memory; encoded ``chunk`` pairs at a time, with no whole read
    of the training file in the labels' pass, the subwords' or the encoding."""
    train = sick_sample(tmp_path / "train.tsv")
    dev = write(tmp_path / "dev.tsv", "\n".join(train.read_text().split("\n")[:30]) + "\n")
    raw = pair_experiment(tmp_path, train, max_length=14, dev={"tsv": str(dev), **COLUMNS})
    monkeypatch.setattr(pair_data, "CHUNK_PAIRS", chunk)
    whole_reads_refused(monkeypatch, train)
    messages = []
    data = prepare_pair_data(config_from_dict(raw, tmp_path), log=messages.append)
    monkeypatch.undo()

    config = config_from_dict(raw, tmp_path)
    expected_log = []
    expected = in_memory(config.data.train, data.subwords, data.labels, 14, expected_log.append)
    assert data.labels == ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]
    assert messages[0] == "trained joint word subwords (500) on 597 pairs"
    assert messages[1:] == expected_log  # (the dev set: nothing dropped)
    assert any("longer than 14 subwords" in m for m in expected_log) and any(
        "empty sentence" in m for m in expected_log
    )
    got = data.train
    assert 400 < len(got) == len(expected) < 597
    assert list(got.premise_ids) == expected.premise_ids and list(got.hypothesis_ids) == expected.hypothesis_ids
    assert got.label_ids.tolist() == expected.label_ids
    assert got.sizes().tolist() == expected.sizes() and got.dropped_empty == expected.corpus.dropped_empty == 3
    assert got.premise_ids.flat.dtype == np.uint16 and got.label_ids.dtype == np.uint8
    for epoch in (0, 1):
        batches = epoch_batches(got.sizes(), 16, None, config.data.bucket_batches, 7, epoch)
        assert batches == epoch_batches(expected.sizes(), 16, None, config.data.bucket_batches, 7, epoch)
        for indices in batches:
            ours, theirs = pair_training_batch(got, indices), pair_training_batch(expected, indices)
            for name in ("premise", "hypothesis", "labels"):
                assert getattr(ours, name).dtype == getattr(theirs, name).dtype
                assert getattr(ours, name).tolist() == getattr(theirs, name).tolist()
    assert list(got.premise_ids[-2:]) == expected.premise_ids[-2:] and got.premise_ids[-1] == expected.premise_ids[-1]
    with pytest.raises(IndexError):
        got.premise_ids[len(got)]


def test_the_labels_are_gathered_in_one_pass_of_the_training_file(tmp_path, monkeypatch):
    """With no data.labels, the classes are the training file's labels, sorted, read line by line."""
    from attnmt.pairs.data import labels_of

    train = sick_sample(tmp_path / "train.tsv", 300)
    whole_reads_refused(monkeypatch, train)
    assert labels_of(config_from_dict(pair_experiment(tmp_path, train), tmp_path)) == [
        "CONTRADICTION",
        "ENTAILMENT",
        "NEUTRAL",
    ]
    one = write(tmp_path / "one.tsv", "a\tb\tE\nc\td\tE\n")
    raw = pair_experiment(tmp_path, one)
    raw["data"]["train"] = {"tsv": str(one)}
    with pytest.raises(AttnmtError, match=r"one.tsv: every pair has the label 'E'; a classifier needs at least two"):
        labels_of(config_from_dict(raw, tmp_path))


@pytest.fixture
def word_subwords(tmp_path):
    from attnmt.core.config import SubwordConfig
    from attnmt.data.subwords import train_subwords

    words = [("a b c d e f", "g h i j k l")]
    return train_subwords(words, SubwordConfig(type="word", vocab_size=20), tmp_path / "sw", seed=1)[0]


@pytest.mark.parametrize(
    "text, message",
    [
        # a bad line far after an unknown label: the bad line, as when the file was read whole first
        ("a\tb\tE\n" * 5 + "c\td\tMAYBE\n" + "a\tb\tN\n" * 20 + "a b\tN\n", "line 27 has 2 tab-separated column"),
        ("a\tb\tE\n" * 20 + "c\td\tMAYBE\n" + "a\tb\tN\n" * 20, "line 21 has the label 'MAYBE', not one of"),
        ("a\tb\tE\n" * 20 + "c\td\t \n", "line 21 has an empty label (column 2)"),
        ("a\tb\tE\n" * 20 + "c\td\tx=1\n", "line 21: the label 'x=1' (column 2) cannot be a class name"),
        ("\n\t\tE\n", "bad.tsv contains no sentence pairs"),
        ("a b c d e\tb\tE\n" * 30, "no sentence pair is at most 3 subwords long; raise data.max_length"),
    ],
)
def test_bad_training_files_are_the_errors_they_were(tmp_path, monkeypatch, word_subwords, text, message):
    """Each error of the streamed encoding is the one the file held in memory gave, with its file
    and line, whichever chunk (here of 4 pairs) the line is in."""
    monkeypatch.setattr(pair_data, "CHUNK_PAIRS", 4)
    files = PairFiles(tsv=write(tmp_path / "bad.tsv", text))
    with pytest.raises(AttnmtError, match=re.escape(message)) as streamed:
        encode_training_pairs(files, word_subwords, ["E", "N"], 3, log=lambda m: None)
    with pytest.raises(AttnmtError) as held:
        in_memory(files, word_subwords, ["E", "N"], 3, lambda m: None)
    assert str(streamed.value) == str(held.value) and str(files.tsv) in str(streamed.value)


def test_a_header_is_read_as_it_was(tmp_path, word_subwords):
    files = PairFiles(tsv=write(tmp_path / "h.tsv", ""), premise_column="A", hypothesis_column="B", label_column="y")
    with pytest.raises(AttnmtError, match=r"h.tsv: empty file, expected a header line naming the columns"):
        encode_training_pairs(files, word_subwords, ["E", "N"], log=lambda m: None)
    write(files.tsv, "A\tB\tgold\na\tb\tE\n")
    with pytest.raises(AttnmtError, match=r"h.tsv: line 1 \(the header\) has no column named 'y' \(label_column\)"):
        encode_training_pairs(files, word_subwords, ["E", "N"], log=lambda m: None)
    write(files.tsv, "y\tB\tA\nE\tb c\ta\nN\t\ta\nN\te f\td\n")
    pairs = encode_training_pairs(files, word_subwords, ["E", "N"], log=lambda m: None)
    assert [word_subwords.decode(ids[:-1]) for ids in pairs.premise_ids] == ["a", "d"]
    assert pairs.label_ids.tolist() == [0, 1] and pairs.dropped_empty == 1


# ----------------------------------------------------------------------------- bounded memory

MEMORY_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import attnmt
    from attnmt.core.config import config_from_dict
    from attnmt.data.batching import epoch_batches
    from attnmt.pairs.data import prepare_pairs
    from attnmt.pairs.training import pair_training_batch, prepare_pair_data

    folder, pairs, step = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[4]
    corpus = folder / "train.tsv"
    if step == "subwords":  # (SICK's lines again and again, written as a stream)
        sick = [l for l in open(sys.argv[3], encoding="utf-8").read().split("\\n")[1:] if l]
        with open(corpus, "w", encoding="utf-8") as out:
            out.write("pair_ID\\tsentence_A\\tsentence_B\\trelatedness_score\\tentailment_judgment\\n")
            for k in range(pairs):
                out.write(sick[k % len(sick)] + "\\n")
    columns = {{
        "premise_column": "sentence_A", "hypothesis_column": "sentence_B", "label_column": "entailment_judgment"
    }}
    raw = {{
        "experiment_dir": str(folder / "exp"), "task": "pairs",
        "data": {{"train": {{"tsv": str(corpus), **columns}}, "max_length": 30, "batch_size": 32,
                 "subwords": {{"type": "word", "vocab_size": 2500, "lowercase": True}}}},
        "model": {{"embedding_size": 8, "hidden_size": 8}}, "training": {{"seed": 1, "max_steps": 5}},
    }}
    if step == "subwords":  # (in a process of their own: what sentencepiece frees stays resident)
        prepare_pairs(config_from_dict(raw, folder), log=lambda m: None)
        sys.exit()

    def status(field):  # (KB)
        return int(next(l for l in open("/proc/self/status") if l.startswith(field + ":")).split()[1])

    open("/proc/self/clear_refs", "w").write("5")  # (the peak, VmHWM, set to what is resident now)
    before = status("VmRSS")
    data = prepare_pair_data(config_from_dict(raw, folder), log=lambda m: None)  # (the labels' pass, then the pairs)
    batches = epoch_batches(data.train.sizes(), 32, None, 100, 1, 0)
    for k in range(5):
        pair_training_batch(data.train, batches[k])
    print("PAIRS", len(data.train))
    print("GROWTH", status("VmHWM") - before)
    """
)


def memory_growth(tmp_path: Path, sizes=(2_000, 20_000), python_path: str | None = None) -> dict[int, int]:
    """The peak memory's growth (KB) of a fresh process that reads and encodes a training file of each size."""
    import os

    script = tmp_path / "script.py"
    script.write_text(MEMORY_SCRIPT.format())
    environment = dict(os.environ, **({"PYTHONPATH": python_path} if python_path else {}))
    growth = {}
    for pairs in sizes:
        folder = tmp_path / str(pairs)
        folder.mkdir()
        for step in ("subwords", "measure"):
            done = subprocess.run(
                [sys.executable, str(script), str(folder), str(pairs), str(shared_data("nli", "SICK_train.txt")), step],
                capture_output=True,
                text=True,
                timeout=600,
                env=environment,
            )
            assert done.returncode == 0, done.stderr[-3000:]
        growth[pairs] = int(done.stdout.split("GROWTH")[-1])
    return growth


@pytest.mark.slow  # (four fresh processes: subwords, then 2,000 and 20,000 pairs: about 15 s)
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's /proc/self/clear_refs resets the peak")
def test_the_training_pairs_take_little_more_memory_for_a_larger_corpus(tmp_path):
    """The peak resident memory (VmHWM, reset once the subwords are trained, in a process of their
    own) of a fresh process that gathers the labels, encodes the training pairs and makes an
    epoch's batches grows by less than 8 MB from 2,000 to 20,000 pairs of SICK's lines.
    Measured (docs/decomposable.md): 2.8 and 3.2 MB; with the file read whole and encoded into
    lists, as before, 18.1 MB (and from 2,000 to 200,000 pairs: 15 MB, before 201 MB)."""
    growth = memory_growth(tmp_path)
    assert growth[20_000] - growth[2_000] < 8_000, growth
