"""The prepared store (attnmt.data.store, attnmt.translation.prepare.prepared_store): the training
corpora encoded once into memory-mapped numpy shards, the same pairs, pieces, line numbers and
counts as the in-memory encoding; reused while its files are unchanged, prepared again when they
change, an error when it is truncated or edited; nothing left of a prepare that fails."""

import gzip
import json
import os

import numpy as np
import pytest

from attnmt.core.errors import AttnmtError
from attnmt.data import splits, store
from attnmt.data.store import StoredPairs
from attnmt.translation import prepare as preparing
from attnmt.translation import training as _training  # noqa: F401 (its names bound before a test patches prepare's)
from attnmt.translation.prepare import encode_corpus, prepare, prepared_store, read_corpus
from conftest import random_strings, reverse, toy_config, write_tsv

PAIRS = [(s, reverse(s)) for s in random_strings(400, 1, 24, seed=1)]
PAIRS[10] = ("", "no source")  # blank sides are dropped and counted
PAIRS[20] = ("  ", "x")
PAIRS[30] = ("a b c d e f g h i", "ihgfedcba")  # more words than max_source_words
for k in range(40, 45):
    PAIRS[k] = ("ab", "abcdefghijabcde")  # uneven: 3 pieces against 16
# a shard file's modification time, in the manifest's parts: not the same in two preparations
WRITTEN_AT = {"shards": {"__all__": {"files": {"__all__": {"mtime_ns"}}}}}
EXTRA = [(s, reverse(s)) for s in random_strings(50, 2, 8, seed=2)]


def quiet(message):
    pass


def config_of(folder, data=None, **sections):
    data = {
        "max_length": 20,
        "max_source_words": 4,
        "max_length_ratio": 4.0,
        "dev": {"split": 30},
        "test": {"split": 20},
        **(data or {}),
    }
    return toy_config(folder, PAIRS, data=data, **sections)


def training_corpus(config, log):
    """data.train held in memory less its held-out pairs, as attnmt read it before the store."""
    return splits.without(read_corpus(config.data.train.as_spec()), splits.hold_out(config, log))


def pairs_of(part) -> tuple[list, list, list]:
    both = StoredPairs([(part, None)])
    return [both.src_ids[i] for i in range(len(both))], [both.tgt_ids[i] for i in range(len(both))], list(both.lines)


def test_the_store_holds_the_in_memory_encoding_and_reports_the_same_counts(tmp_path):
    extra = write_tsv(tmp_path / "extra.tsv", EXTRA)
    config = config_of(tmp_path, data={"extra_train": [{"tsv": str(extra), "tag": "<BT>", "repeat": 2}]})
    src_sw, tgt_sw = preparing.prepare_subwords(config, quiet)
    logged = []
    prepared = prepared_store(config, src_sw, tgt_sw, logged.append)

    limits = {"max_length": 20, "max_source_words": 4, "max_length_ratio": 4.0}
    expected_log = []
    train = encode_corpus(
        config.data.train, src_sw, tgt_sw, log=expected_log.append, corpus=training_corpus(config, quiet), **limits
    )
    extra_files = config.data.extra_train[0]
    other = encode_corpus(extra_files, src_sw, tgt_sw, log=expected_log.append, **limits)
    for part, expected in (("train", train), ("extra-1", other)):
        src_ids, tgt_ids, lines = pairs_of(prepared.parts[part])
        assert src_ids == expected.src_ids and tgt_ids == expected.tgt_ids and lines == expected.lines
    assert [m for m in logged if "dropped" in m] == expected_log
    assert {"empty", "long", "words", "uneven"} <= {
        key for key, count in prepared.parts["train"].counts.items() if count
    }  # (the corpus has pairs of each kind)
    assert len(train) + 30 + 20 + 2 + prepared.parts["train"].counts["long"] < len(PAIRS)
    assert prepared.manifest.token_dtype == "uint16"


@pytest.mark.slow  # (worker processes, each a new interpreter: the marker's rule)
def test_worker_processes_write_the_same_store(tmp_path):
    config = config_of(tmp_path / "one")
    prepare(config, quiet)
    many = config_of(tmp_path / "two", data={"workers": 2})
    prepare(many, quiet)
    one, two = (store.read_manifest(c.experiment_dir / store.FOLDER) for c in (config, many))
    # the same files, by their SHA-256 (not by the times they were written)
    assert [part.model_dump(exclude=WRITTEN_AT) for part in one.parts] == [
        part.model_dump(exclude=WRITTEN_AT) for part in two.parts
    ]


def test_a_corpus_in_several_shards_and_two_gzip_files(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "SHARD_TOKENS", 500)
    monkeypatch.setattr(preparing, "CHUNK_PAIRS", 7)
    sources, targets = tmp_path / "train.src.gz", tmp_path / "train.tgt.gz"
    sources.write_bytes(gzip.compress("".join(s + "\n" for s, _ in PAIRS).encode()))
    targets.write_bytes(gzip.compress("".join(t + "\n" for _, t in PAIRS).encode()))
    config = config_of(tmp_path, data={"train": {"src": str(sources), "tgt": str(targets)}, "test": {}})
    src_sw, tgt_sw = prepare(config, quiet)
    prepared = store.PairStore(config.experiment_dir / store.FOLDER)
    assert len(prepared.manifest.parts[0].shards) > 3
    expected = encode_corpus(config.data.train, src_sw, tgt_sw, 20, quiet, training_corpus(config, quiet), 4, 4.0)
    assert pairs_of(prepared.parts["train"]) == (expected.src_ids, expected.tgt_ids, expected.lines)


def test_pair_views_index_slice_and_prefix(tmp_path):
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    src_sw, tgt_sw = prepare(config, quiet)
    part = prepared_store(config, src_sw, tgt_sw, quiet).parts["train"]
    pairs = StoredPairs([(part, None), (part, 99)])
    n = len(part)
    assert len(pairs) == 2 * n
    assert pairs.src_ids[n] == [99] + pairs.src_ids[0] and pairs.tgt_ids[n] == pairs.tgt_ids[0]
    assert pairs.src_ids[-1] == [99] + part.src_ids(n - 1)
    assert pairs.src_ids[:3] == [part.src_ids(i) for i in range(3)]
    sizes = pairs.sizes()
    assert sizes.dtype == np.uint16
    assert sizes[n] == max(len(part.src_ids(0)) + 1, len(part.tgt_ids(0))) + 1
    assert pairs.lines is None  # (lines: of one part)
    with pytest.raises(IndexError):
        pairs.src_ids[2 * n]


def test_an_unchanged_corpus_is_reused_a_changed_one_prepared_again(tmp_path):
    config = config_of(tmp_path)
    src_sw, tgt_sw = prepare(config, quiet)
    folder = config.experiment_dir / store.FOLDER
    manifest = (folder / store.MANIFEST).read_text()

    logged = []
    prepared_store(config, src_sw, tgt_sw, logged.append)
    assert not any("preparing" in m for m in logged)
    assert (folder / store.MANIFEST).read_text() == manifest

    corpus = config.data.train.tsv
    os.utime(corpus, ns=(1, 1))  # touched (copied): the same bytes, read again once for their SHA-256
    logged.clear()
    prepared_store(config, src_sw, tgt_sw, logged.append)
    assert not any("preparing" in m for m in logged)
    assert store.read_manifest(folder).inputs[0].mtime_ns == 1

    with open(corpus, "a", encoding="utf-8") as f:
        f.write("abc\tcba\n")
    logged.clear()
    with pytest.raises(AttnmtError, match="held-out sets were drawn from another corpus"):
        prepared_store(config, src_sw, tgt_sw, logged.append)  # (its held-out sets cannot be redrawn)
    assert any(f"{corpus} changed since" in m and "preparing the store" in m for m in logged)


def test_other_settings_or_force_prepare_the_store_again(tmp_path):
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    src_sw, tgt_sw = prepare(config, quiet)
    config.data.max_length = 10
    logged = []
    prepared = prepared_store(config, src_sw, tgt_sw, logged.append)
    assert any("prepared with other limits: preparing" in m for m in logged)
    assert all(len(ids) <= 10 for ids in pairs_of(prepared.parts["train"])[0])
    logged.clear()
    prepare(config, logged.append, force=True)
    assert any(m.startswith("attnmt prepare --force: preparing the store") for m in logged)
    assert not (tmp_path / "exp" / "store.partial").exists() and not (tmp_path / "exp" / "store.old").exists()


@pytest.mark.parametrize("damage", ["truncated", "edited"])
def test_a_damaged_store_is_an_error_naming_the_file(tmp_path, damage):
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    src_sw, tgt_sw = prepare(config, quiet)
    shard = config.experiment_dir / store.FOLDER / "train" / "00000.src.npy"
    data = bytearray(shard.read_bytes())
    if damage == "truncated":
        del data[-10:]
    else:
        data[-1] ^= 1  # one piece id changed, the size kept
    shard.write_bytes(bytes(data))
    message = "truncated or damaged" if damage == "truncated" else "SHA-256 is not the one in the store's manifest"
    with pytest.raises(AttnmtError, match=message) as error:
        prepared_store(config, src_sw, tgt_sw, quiet)
    assert str(shard) in str(error.value)


def test_an_unchanged_store_is_not_read_for_its_sha256_but_one_without_its_times_is(tmp_path, monkeypatch):
    """A shard whose size and time are those recorded is taken as unchanged, as an input is; a
    manifest written before the times were recorded has every shard read for its SHA-256."""
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    src_sw, tgt_sw = prepare(config, quiet)
    hashed = []
    sha256 = store.file_sha256
    monkeypatch.setattr(store, "file_sha256", lambda path: hashed.append(path) or sha256(path))
    prepared_store(config, src_sw, tgt_sw, quiet)
    assert not [path for path in hashed if store.FOLDER in path.parts]
    manifest_path = config.experiment_dir / store.FOLDER / store.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for part in manifest["parts"]:
        for shard in part["shards"]:
            for recorded in shard["files"].values():
                del recorded["mtime_ns"]
    manifest_path.write_text(json.dumps(manifest))
    prepared_store(config, src_sw, tgt_sw, quiet)
    assert len([path for path in hashed if store.FOLDER in path.parts]) == 3 * len(manifest["parts"][0]["shards"])
    shard = config.experiment_dir / store.FOLDER / "train" / "00000.tgt.npy"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(AttnmtError, match="SHA-256 is not the one"):
        prepared_store(config, src_sw, tgt_sw, quiet)


def test_an_edited_manifest_is_an_error_naming_it(tmp_path):
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    src_sw, tgt_sw = prepare(config, quiet)
    manifest = config.experiment_dir / store.FOLDER / store.MANIFEST
    manifest.write_text(manifest.read_text().replace('"pairs":', '"pairs":"many",', 1))
    with pytest.raises(AttnmtError, match="manifest") as error:
        prepared_store(config, src_sw, tgt_sw, quiet)
    assert str(manifest) in str(error.value)


def test_a_prepare_that_fails_while_writing_leaves_no_store_and_the_old_one_as_it_was(tmp_path, monkeypatch):
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    src_sw, tgt_sw = prepare(config, quiet)
    folder = config.experiment_dir / store.FOLDER
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    monkeypatch.setattr(store, "SHARD_TOKENS", 500)
    monkeypatch.setattr(preparing, "CHUNK_PAIRS", 7)
    saved = store._save
    calls = []

    def dies_on_the_fifth_file(path, array):
        calls.append(path)
        if len(calls) == 5:
            raise KeyboardInterrupt  # (Ctrl-C, or any error, half-way through the shards)
        return saved(path, array)

    monkeypatch.setattr(store, "_save", dies_on_the_fifth_file)
    with pytest.raises(KeyboardInterrupt):
        prepared_store(config, src_sw, tgt_sw, quiet, force=True)
    assert len(calls) == 5
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before
    assert not (config.experiment_dir / "store.partial").exists()


def dies(pairs, limits, dtype, subwords=None):
    """encode_chunk in a worker process that dies (killed, out of memory)."""
    os._exit(1)


@pytest.mark.slow  # (worker processes, each a new interpreter: the marker's rule)
def test_a_worker_that_dies_is_an_error_and_leaves_no_store(tmp_path, monkeypatch):
    config = config_of(tmp_path, data={"dev": None, "test": {}, "workers": 2})
    src_sw, tgt_sw = preparing.prepare_subwords(config, quiet)
    monkeypatch.setattr(preparing, "encode_chunk", dies)  # (the workers import it from this module)
    with pytest.raises(AttnmtError, match="worker process .* died"):
        prepared_store(config, src_sw, tgt_sw, quiet)
    assert not (config.experiment_dir / store.FOLDER).exists()
    assert not (config.experiment_dir / "store.partial").exists()


def test_an_empty_corpus_is_an_error_and_leaves_no_store(tmp_path):
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    src_sw, tgt_sw = preparing.prepare_subwords(config, quiet)
    write_tsv(tmp_path / "train.tsv", [(" ", "x")])
    with pytest.raises(AttnmtError, match="empty corpus"):
        prepared_store(config, src_sw, tgt_sw, quiet)
    assert not (config.experiment_dir / store.FOLDER).exists()


def test_vocabularies_over_65536_pieces_are_stored_in_32_bits():
    assert store.token_dtype(65536) == np.uint16 and store.token_dtype(65537) == np.uint32


class ShardedPart:
    """A store part as StoredPairs reads it for the sizes: its shards' rows (store.PAIR_ROW)."""

    def __init__(self, *shards: tuple[list[int], list[int]]):
        self.rows = []
        for src, tgt in shards:
            rows = np.zeros(len(src), store.PAIR_ROW)
            rows["src_length"], rows["tgt_length"] = src, tgt
            self.rows.append(rows)

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.rows)


def test_sizes_take_two_bytes_a_pair_unless_a_pair_is_longer_than_they_hold():
    """Each pair's longer side + 1 (its source + 1 more after a tag), in uint16; a shard with a pair of
    65,535 pieces or more makes the whole array wide enough for it, every size still right."""
    short = ShardedPart(([3, 10], [5, 2]), ([], []))
    sizes = StoredPairs([(short, None)]).sizes()
    assert sizes.dtype == np.uint16 and sizes.tolist() == [6, 11]
    assert StoredPairs([(short, 7)]).sizes().tolist() == [6, 12]
    long = ShardedPart(([3], [5]), ([70_000, 4], [1, 65_535]))
    sizes = StoredPairs([(short, None), (long, None)]).sizes()
    assert sizes.dtype.itemsize >= 4 and sizes.tolist() == [6, 11, 6, 70_001, 65_536]


def test_read_corpus_reads_what_the_store_is_made_of(tmp_path):
    # (the in-memory reader and the store's reader are one: CorpusPairs)
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    assert read_corpus(config.data.train.as_spec()).lines == [
        k for k in range(len(PAIRS)) if k not in (10, 20)
    ]  # (blank)


def test_attnmt_prepare_workers_option(tmp_path, monkeypatch, capsys):
    from attnmt.cli import main
    from attnmt.core.config import config_to_yaml

    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(config_of(tmp_path, data={"dev": None, "test": {}})))
    used = []
    monkeypatch.setattr(preparing, "prepared_store", lambda config, *args: used.append(config.data.workers))
    with pytest.raises(SystemExit):
        main(["prepare", str(path), "--workers", "0"])
    assert "--workers: must be at least 1" in capsys.readouterr().err
    assert main(["prepare", str(path), "--workers", "3"]) in (0, None)
    assert used == [3]


# ---------------------------------------------------------------- training reads the store


def trained_batches(config, monkeypatch, resume=False) -> list[list[int]]:
    """The pairs of each batch that training steps on (their positions in the training pairs)."""
    from attnmt.training import Trainer
    from attnmt.translation import training

    seen = []

    def recorded(data, indices):
        seen.append(list(indices))
        return translation_batch(data, indices)

    translation_batch = training.translation_batch
    monkeypatch.setattr(training, "translation_batch", recorded)
    Trainer(config, log=quiet, progress=False).train(resume=resume)
    monkeypatch.setattr(training, "translation_batch", translation_batch)
    return seen[1:]  # (the first: the memory check's, before the first step; see tests/test_training_loop.py)


def short_training(folder, steps, **data):
    return config_of(
        folder,
        data={"dev": None, "test": {}, "batch_size": 16, "bucket_batches": 3, **data},
        training={"max_steps": steps, "validate_every": 100, "log_every": 100},
    )


@pytest.mark.slow  # trains (the marker's rule)
def test_training_reads_the_store_never_the_corpus_and_resumes_at_the_exact_batch(tmp_path, monkeypatch):
    from attnmt.data.batching import epoch_batches

    straight = short_training(tmp_path / "straight", 30)  # 21 batches an epoch: 9 of the second
    prepare(straight, quiet)

    def unread(self):
        raise AssertionError(f"{self.files} read")

    monkeypatch.setattr(preparing.CorpusPairs, "__iter__", unread)
    expected = trained_batches(straight, monkeypatch)
    sizes = [
        max(len(s), len(t)) + 1
        for s, t in zip(*pairs_of(store.PairStore(straight.experiment_dir / "store").parts["train"])[:2])
    ]
    epochs = [b for epoch in (0, 1) for b in epoch_batches(sizes, 16, None, 3, straight.training.seed, epoch)]
    assert expected == epochs[:30]  # (every batch has at least one example a process: none skipped)
    monkeypatch.undo()

    interrupted = short_training(tmp_path / "resumed", 17)
    assert trained_batches(interrupted, monkeypatch) == expected[:17]
    resumed = short_training(tmp_path / "resumed", 30)
    assert trained_batches(resumed, monkeypatch, resume=True) == expected[17:]


def test_every_process_maps_the_store_the_main_one_checked(tmp_path):
    config = config_of(tmp_path, data={"dev": None, "test": {}})
    src_sw, tgt_sw = prepare(config, quiet)
    shard = config.experiment_dir / store.FOLDER / "train" / "00000.tgt.npy"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    prepared_store(config, src_sw, tgt_sw, quiet, check=False)  # (another process than the main one: sizes only)
    with pytest.raises(AttnmtError, match="SHA-256"):
        prepared_store(config, src_sw, tgt_sw, quiet)


# A child process prepares a corpus (subwords, store) and trains a few steps on it, then prints its
# peak resident memory (getrusage: in kB on Linux).
PREPARE_AND_TRAIN = """
import resource, sys
from attnmt.core.config import load_config
from attnmt.training import train
config = load_config(sys.argv[1])
train(config, log=lambda message: None, progress=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_kb_of_training_on(folder, pairs: int) -> tuple[int, int]:
    import subprocess
    import sys

    from attnmt.core.config import config_to_yaml

    rng = __import__("random").Random(pairs)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 7))) for _ in range(300)]
    with open(folder / "corpus.tsv", "w", encoding="utf-8") as f:
        for _ in range(pairs):
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
            f.write(f"{sentence}\t{reverse(sentence)}\n")
    subwords = {"type": "bpe", "vocab_size": 200, "max_sentences": 10_000}  # (a sample: the memory of 10,000)
    config = toy_config(
        folder,
        [],
        data={"train": {"tsv": str(folder / "corpus.tsv")}, "subwords": subwords},
        training={"max_steps": 5, "validate_every": 5, "log_every": 5},
    )
    (folder / "config.yaml").write_text(config_to_yaml(config))
    done = subprocess.run(
        [sys.executable, "-c", PREPARE_AND_TRAIN, str(folder / "config.yaml")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (config.experiment_dir / "store" / "manifest.json").is_file()
    store_kb = sum(path.stat().st_size for path in (config.experiment_dir / "store").rglob("*.npy")) // 1024
    return int(done.stdout.split()[-1]), store_kb


@pytest.mark.slow  # prepares a million pairs and trains (the marker's rule)
def test_memory_does_not_grow_with_the_corpus(tmp_path):
    """Prepared and trained on, 1,000,000 pairs (90 MB of text) take no more memory than 2,000 beyond a
    margin. Held in memory as before the store, 200,000 pairs took 171 MB more than 2,000 (363 MB
    against 534 MB, 2026-12-02; 855 bytes a pair: 855 MB at a million). From the store, 111 MB more
    (2026-12-05): its 112 MB of pages read through its maps, which the system may drop; what the
    process holds itself grows by the arrays of sizes and of the epoch's order (6 bytes a pair)."""
    from concurrent.futures import ThreadPoolExecutor

    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    # The two children at once (each measures its own peak): the small one's run hides in the large one's
    with ThreadPoolExecutor(2) as pool:
        (small, small_store), (large, large_store) = pool.map(
            peak_kb_of_training_on, [tmp_path / "small", tmp_path / "large"], [2_000, 1_000_000]
        )
    # (kB.) getrusage's peak counts the pages of the store's maps that were read (checked, its sizes
    # computed), which the system may drop at any time: at most the store's size on disk.
    assert large - small < 80_000 + (large_store - small_store), (small, large, small_store, large_store)


# ---------------------------------------------------------------- subwords and held-out sets, read line by line


def test_a_sample_keeps_every_text_in_order_up_to_its_size_then_a_seeded_sample():
    from attnmt.data.subwords import Sample

    def sample(n, size, seed):
        drawn = Sample(size, seed)
        for i in range(n):
            drawn.add(i, f"line {i}")
        return drawn.texts()

    assert sample(5, 10, seed=1) == [f"line {i}" for i in range(5)]
    kept = sample(1000, 100, seed=1)
    assert len(set(kept)) == 100 and set(kept) <= {f"line {i}" for i in range(1000)}
    assert kept == sorted(kept, key=lambda text: int(text.split()[1]))  # in the order of the stream
    assert any(int(text.split()[1]) >= 500 for text in kept)  # not the first ones (a chance of 2^-100 with any seed)
    assert sample(1000, 100, seed=1) == kept and sample(1000, 100, seed=2) != kept


def test_prepare_reads_every_corpus_line_by_line(tmp_path, monkeypatch):
    """Subwords (from a sample of data.subwords.max_sentences), held-out sets and the store: no corpus is read whole."""
    from attnmt.data import corpus, splits

    def whole(*args, **kwargs):
        raise AssertionError("a corpus read whole")

    for module in (corpus, preparing, splits):
        for name in ("read_corpus", "read_lines", "read_tsv", "read_parallel"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, whole)
    config = config_of(tmp_path, data={"subwords": {"type": "char", "vocab_size": 40, "max_sentences": 300}})
    logged = []
    prepare(config, logged.append)
    sampled = "trained joint char subwords (40) on 348 pairs (a sample of 300 sentences)"
    assert sampled in logged  # (400 less 2 blank and 50 held out, 696 sentences)
    record = splits.checked_record(config.experiment_dir)
    nonblank = [pair for pair in PAIRS if pair[0].strip() and pair[1].strip()]
    for name in ("dev", "test"):
        rows = splits.set_path(config.experiment_dir, name).read_text(encoding="utf-8").splitlines()
        assert rows == [f"{nonblank[k][0]}\t{nonblank[k][1]}" for k in record.sets[name]]
