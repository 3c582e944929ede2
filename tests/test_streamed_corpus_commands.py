"""The commands beside training that read the training corpus stream it (issue 50, point 3):
``attnmt shortlist``, ``attnmt train-aligner``, ``attnmt compare``'s training text and statistical
aligner, and guided alignment's eflomal links. Each gives what the corpus held in memory gave (the
reference computed here as attnmt computed it before), without a whole-file read of the corpus
(`whole_reads_refused`), and in memory that does not grow with the corpus (the slow test at the
end).

eflomal is replaced by `FakeEflomal`, deterministic (eflomal's Gibbs sampler is seeded afresh in
each process, so two runs of the real one differ in a few links): it reads its input a line at a
time, lists as the code before gave it and files as the code now gives it, and links each target
word to a source word chosen by a checksum of the word."""

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
import types
import zlib
from pathlib import Path

import pytest
import torch

from attnmt.core.errors import AttnmtError
from attnmt.translation.align import format_pharaoh, grow_diag_final, parse_pharaoh
from conftest import random_strings, toy_config
from test_guided_alignment import first_rounds  # noqa: F401 (the fixture: two first rounds, each way)

# ------------------------------------------------------------------------------------- helpers


def fake_links(source: str, target: str, salt: str) -> str:
    src, tgt = source.split(), target.split()
    if not src or not tgt:
        return ""
    return " ".join(f"{zlib.crc32((w + salt).encode()) % len(src)}-{j}" for j, w in enumerate(tgt))


class FakeEflomal:
    """eflomal.Aligner as attnmt calls it: align(sources, targets, links_filename_fwd=...,
    links_filename_rev=..., quiet=...), its inputs any iterables of lines, read as they pass."""

    calls: list = []

    def __init__(self, model: int = 3, **_):
        self.model = model

    def align(self, src, trg, links_filename_fwd=None, links_filename_rev=None, quiet=True, **_):
        FakeEflomal.calls.append((self.model, type(src).__name__))
        with open(links_filename_fwd, "w") as forward, open(links_filename_rev, "w") as backward:
            for source, target in zip(src, trg):
                forward.write(fake_links(source, target, f"f{self.model}") + "\n")
                backward.write(fake_links(source, target, f"b{self.model}") + "\n")


@pytest.fixture
def fake_eflomal(monkeypatch):
    FakeEflomal.calls = []
    monkeypatch.setitem(sys.modules, "eflomal", types.SimpleNamespace(Aligner=FakeEflomal))
    return FakeEflomal.calls


def eflomal_in_memory(sources: list[str], targets: list[str], model: int = 3, folder: Path = None):
    """The links of every pair as attnmt.translation.statistical_align.eflomal_links gave them
    before it streamed: eflomal given the lists of texts, its files read whole."""
    forward_file, backward_file = folder / f"ref-forward.{model}", folder / f"ref-backward.{model}"
    FakeEflomal(model).align(sources, targets, str(forward_file), str(backward_file))

    def read(path):
        lines = path.read_text(encoding="utf-8").split("\n")[: len(sources)]
        return [sorted(parse_pharaoh(line, allow_possible=False)[0]) for line in lines]

    return read(forward_file), read(backward_file)


WHOLE_READS = ("read_corpus", "read_lines", "read_tsv", "read_link_file", "encode_corpus", "split_lines", "read_pairs")


def whole_reads_refused(monkeypatch, *corpora: Path):
    """Every function of attnmt that reads a file whole (and Path.read_text / read_bytes) made to
    fail the test when it is given one of ``corpora`` (other files, small ones, are read as before)."""
    names = [str(Path(c)) for c in corpora]

    def refusing(original):
        def refused(*args, **kwargs):
            if any(name in repr(a) or name in str(a) for a in (*args, *kwargs.values()) for name in names):
                raise AssertionError(f"{original.__name__} read a training corpus whole: {args}")
            return original(*args, **kwargs)

        return refused

    for module in [m for name, m in sys.modules.items() if name.startswith("attnmt") and m is not None]:
        for name in WHOLE_READS:
            original = getattr(module, name, None)
            if callable(original) and not isinstance(original, type):
                monkeypatch.setattr(module, name, refusing(original))
    for name in ("read_text", "read_bytes"):
        monkeypatch.setattr(Path, name, refusing(getattr(Path, name)))


def old_digest(sources, targets) -> str:
    """The stamp of an eflomal links file, as it was taken of the texts held in memory."""
    return hashlib.sha256("\n".join(s + "\t" + t for s, t in zip(sources, targets)).encode()).hexdigest()


def words(text: str) -> str:
    return " ".join(text.split())


def awkward_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Pairs of a few words, some spaced oddly (two spaces, a no-break space), some with an empty
    side, some too long for data.max_length (40 pieces)."""
    pairs = []
    for k, s in enumerate(random_strings(n, 2, 24, seed=seed)):
        chunks = [s[i : i + 3] for i in range(0, len(s), 3)]
        source = " ".join(chunks * (4 if k % 37 == 0 else 1))
        if k % 7 == 0:
            source = source.replace(" ", "  ", 1)
        if k % 11 == 0:
            source = source.replace(" ", "\u00a0", 1)
        target = " ".join(c[::-1] for c in reversed(chunks)) if k % 53 else " "
        pairs.append((source, target))
    return pairs


PAIRS = awkward_pairs(500, seed=21)


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """Two small models on PAIRS, one each way (1 training step: their weights do not matter
    here), a test set held out of data.train."""
    from attnmt.training import train

    folder = tmp_path_factory.mktemp("streamed")
    models = []
    for name, pairs in (("forward", PAIRS), ("backward", [(t, s) for s, t in PAIRS])):
        config = toy_config(
            folder / name,
            pairs,
            data={"max_length": 40, "test": {"held-out": {"split": 25}}},
            training={"max_steps": 1, "validate_every": 1000},
        )
        torch.manual_seed(0)
        train(config, log=lambda m: None, progress=False)
        models.append(config.experiment_dir)
    return models


def training_corpus(config):
    """data.train held in memory less its held-out pairs, as attnmt read it before it streamed."""
    from attnmt.data import splits
    from attnmt.data.corpus import read_corpus

    return splits.without(read_corpus(config.data.train.as_spec()), splits.hold_out(config, lambda m: None))


# ------------------------------------------------------------------------------- shortlist


@pytest.mark.slow  # (trains two models a step: seconds)
@pytest.mark.parametrize("store", ["kept", "deleted"])
def test_the_shortlist_is_the_one_of_the_corpus_held_in_memory(two_models, tmp_path, monkeypatch, fake_eflomal, store):
    """shortlist.json, the eflomal links file and its SHA-256 stamp are those of the training pairs
    encoded in memory; the command reads the store (made again when it is missing) and streams the
    texts."""
    from attnmt.core.folders import model_config
    from attnmt.data.subwords import load_subwords
    from attnmt.translation.guided_alignment import piece_links
    from attnmt.translation.prepare import encode_corpus
    from attnmt.translation.shortlist import build_shortlist, lexical_table

    folder = tmp_path / "model"
    shutil.copytree(two_models[0], folder)
    if store == "deleted":
        shutil.rmtree(folder / "store")
    config = model_config(folder)
    src_sw, tgt_sw = load_subwords(folder, config.data.subwords.joint)
    train = encode_corpus(
        config.data.train,
        src_sw,
        tgt_sw,
        config.data.max_length,
        lambda m: None,
        corpus=training_corpus(config),
        max_source_words=config.data.max_source_words,
        max_length_ratio=config.data.max_length_ratio,
    )
    assert 0 < len(train) < len(PAIRS) - 25  # (some pairs filtered out)
    sources, targets = [words(s) for s in train.sources], [words(t) for t in train.targets]
    forward, backward = eflomal_in_memory(sources, targets, folder=tmp_path)
    links = [grow_diag_final(f, b) for f, b in zip(forward, backward)]
    candidates, frequent = lexical_table(
        (
            (s, t, piece_links(pair, src_sw.pieces(s), tgt_sw.pieces(t)) or [])
            for s, t, pair in zip(train.src_ids, train.tgt_ids, links)
        ),
        5,
        7,
    )

    FakeEflomal.calls.clear()
    whole_reads_refused(monkeypatch, config.data.train.tsv)
    build_shortlist(folder, top=5, frequent=7, log=lambda m: None)
    monkeypatch.undo()
    table = json.loads((folder / "shortlist.json").read_text())
    assert table["candidates"] == [candidates.get(s, []) for s in range(len(src_sw))]
    assert table["frequent"] == frequent
    alignment = folder / "alignment"
    assert (alignment / "train.eflomal.links").read_text() == "".join(format_pharaoh(p) + "\n" for p in links)
    assert (alignment / "train.eflomal.sha256").read_text() == old_digest(sources, targets) + "\n"
    assert fake_eflomal == [(3, "TextIOWrapper")]  # (eflomal given files, not lists)
    assert sorted(p.name for p in alignment.iterdir()) == ["train.eflomal.links", "train.eflomal.sha256"]


# ------------------------------------------------------------------------------------ aligner


def aligner_config(two_models, tmp_path, links, **fields):
    from attnmt.translation.aligner import AlignerConfig

    return AlignerConfig(
        model=two_models[0],
        out=tmp_path / "aligners" / "f",
        backward_model=two_models[1],
        backward_out=tmp_path / "aligners" / "b",
        links=links,
        steps=2,
        lexicon_steps=1,
        size=8,
        threads=1,
        **fields,
    )


def diagonal_links_file(path: Path, corpus: Path) -> Path:
    """One line per line of ``corpus``, target-source (reversed): word i of the target linked to
    word i of the source, and on every third line word 9 to word 3 (beyond the words of most
    pairs: those train without their links)."""
    lines = corpus.read_text(encoding="utf-8").split("\n")[:-1]
    path.write_text(
        "".join(
            " ".join([f"{i}-{i}" for i in range(1 + k % 2)] + ["9-3"] * (k % 3 == 0)) + "\n" for k in range(len(lines))
        )
    )
    return path


@pytest.mark.slow  # (trains two models a step: seconds)
@pytest.mark.parametrize("links", ["file", "eflomal"])
def test_the_aligners_pairs_and_links_are_those_of_the_corpus_held_in_memory(
    two_models, tmp_path, monkeypatch, fake_eflomal, links
):
    """Each direction's stored pieces and reference links are what the pairs held in memory gave:
    the pairs longer than either model's data.max_length left out, a links file read by each pair's
    line (here reversed), eflomal's links of the kept pairs' texts, the backward layer's turned
    around, and those naming words a pair does not have left empty. Prepared a few pairs at a time
    (PASS_PAIRS, LINK_PAIRS made small), without a whole read of the corpus or the links file."""
    from attnmt.core.folders import model_config
    from attnmt.translation import aligner
    from attnmt.translation.agreement import piece_words
    from attnmt.translation.reference_links import read_link_file

    corpus_file = model_config(two_models[0]).data.train.tsv
    links_file = diagonal_links_file(tmp_path / "train.links", corpus_file) if links == "file" else None
    config = aligner_config(
        two_models, tmp_path, "eflomal" if links == "eflomal" else str(links_file), links_reversed=links == "file"
    )
    directions = aligner._directions(config)
    forward, backward = (d.translator for d in directions)
    corpus = training_corpus(forward.config)
    encoded = [
        list(zip(forward.src_subwords.encode(corpus.sources), forward.tgt_subwords.encode(corpus.targets))),
        list(zip(backward.src_subwords.encode(corpus.targets), backward.tgt_subwords.encode(corpus.sources))),
    ]
    kept = [
        i
        for i, fits in enumerate(
            zip(
                *(
                    [max(map(len, pair)) <= d.translator.config.data.max_length for pair in e]
                    for e, d in zip(encoded, directions)
                )
            )
        )
        if all(fits)
    ]
    assert 0 < len(kept) < len(corpus.sources)
    if links == "file":
        by_line = read_link_file(links_file, len(corpus_file.read_text().split("\n")) - 1, False)
        reference = [[(j, i) for i, j in by_line[corpus.lines[k]]] for k in kept]
        references = (reference, reference)
    else:
        references = eflomal_in_memory(
            [corpus.sources[k] for k in kept], [corpus.targets[k] for k in kept], folder=tmp_path
        )

    FakeEflomal.calls.clear()
    monkeypatch.setattr(aligner, "PASS_PAIRS", 7)
    monkeypatch.setattr(aligner, "LINK_PAIRS", 5)
    whole_reads_refused(monkeypatch, corpus_file, *([links_file] if links_file else []))
    messages = []
    (tmp_path / "pairs").mkdir()  # (train_aligner's temporary folder)
    aligner._prepare_pairs(config, directions, messages.append, tmp_path / "pairs")
    monkeypatch.undo()

    for direction, pairs, pair_links, turned in zip(directions, encoded, references, (False, True)):
        stored = direction.pairs
        assert list(zip(stored.src_ids, stored.tgt_ids)) == [pairs[k] for k in kept]
        assert stored.lines.tolist() == [corpus.lines[k] for k in kept]
        wanted = []
        for k, links_of in zip(kept, pair_links):
            links_of = [(j, i) for i, j in links_of] if turned else links_of
            src_words = max(piece_words(direction.translator.src_subwords.pieces(pairs[k][0]))) + 1
            tgt_words = max(piece_words(direction.translator.tgt_subwords.pieces(pairs[k][1]))) + 1
            wanted.append(links_of if all(i < src_words and j < tgt_words for i, j in links_of) else [])
        assert list(direction.guide.links) == wanted
        assert any(wanted) and (links == "eflomal" or not all(wanted))  # (the file's: some beyond their words)
    assert any("longer than data.max_length" in m for m in messages)
    assert fake_eflomal == ([(3, "TextIOWrapper")] if links == "eflomal" else [])


@pytest.mark.slow  # (trains two models a step: seconds)
def test_train_aligner_streams_its_pairs_through_a_temporary_store_it_removes(two_models, tmp_path, monkeypatch):
    """train-aligner on the streamed pairs writes both aligners and leaves no store of its pairs
    beside them; a links file of another length is an error naming it, and leaves nothing either."""
    from attnmt.core.folders import model_config
    from attnmt.translation.aligner import train_aligner

    corpus_file = model_config(two_models[0]).data.train.tsv
    links_file = diagonal_links_file(tmp_path / "train.links", corpus_file)
    whole_reads_refused(monkeypatch, corpus_file, links_file)
    config = aligner_config(two_models, tmp_path, str(links_file))
    assert train_aligner(config, lambda m: None) == config.out
    assert sorted(p.name for p in (tmp_path / "aligners").iterdir()) == ["b", "f"]
    monkeypatch.undo()
    short = tmp_path / "short.links"
    short.write_text("".join(links_file.read_text().splitlines(keepends=True)[:-3]))
    with pytest.raises(AttnmtError, match="short.links: .* lines of alignment links, but .* has .* lines"):
        train_aligner(aligner_config(two_models, tmp_path / "again", str(short)), lambda m: None)
    assert not (tmp_path / "again" / "aligners").exists() or not any((tmp_path / "again" / "aligners").iterdir())


# ------------------------------------------------------------------------------------ compare


def test_compares_training_text_is_the_corpus_held_in_memory_written_pair_by_pair(tmp_path, monkeypatch):
    """OUT/shared/train.tsv: data.train less its held-out pairs, then the gold pairs, as the lists
    in memory wrote it; data.train streamed into it."""
    from attnmt.compare.runs import ComparisonSettings, RunFolders, read_align_pairs
    from attnmt.compare.variants import BaseConfig
    from attnmt.data import splits
    from test_compare import toy_experiment

    config = toy_experiment(tmp_path)
    settings = ComparisonSettings(align_pairs=tmp_path / "gold.pairs", log=lambda m: None)
    folders = RunFolders(BaseConfig(config), [], tmp_path / "out", settings)
    whole_reads_refused(monkeypatch, tmp_path / "train.tsv")
    folders.prepare_shared(folders.shared_data())
    monkeypatch.undo()
    corpus = training_corpus(BaseConfig(config).with_overrides({"experiment_dir": str(folders.shared)}))
    gold = read_align_pairs(tmp_path / "gold.pairs")
    expected = splits.tsv_rows(corpus.sources + gold[0], corpus.targets + gold[1])
    assert (folders.shared / "train.tsv").read_text() == expected
    assert len(expected.splitlines()) == len(corpus.sources) + 2 > 300


def test_compares_statistical_aligner_scores_the_corpus_as_held_in_memory(tmp_path, monkeypatch, fake_eflomal):
    """The scores of eflomal's models 1-3 on the gold pairs at the end of the training text are
    those of its links of the texts held in memory; eflomal is given files, and they are removed."""
    from attnmt.compare.runs import ComparisonSettings
    from attnmt.compare.scores import gold_links, score_statistical
    from attnmt.data.corpus import read_corpus
    from attnmt.translation.align import symmetrized_scores

    text = tmp_path / "train.tsv"
    text.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS) + "abc def\tfed cba\nabc\tcba\n")
    (tmp_path / "gold.links").write_text("1-2 2-1\n1-1\n")
    settings = ComparisonSettings(align_gold=tmp_path / "gold.links", one_based=True, log=lambda m: None)
    sure, possible = gold_links(settings)
    corpus = read_corpus({"tsv": text})
    expected = {}
    for model, name in ((1, "eflomal IBM1"), (2, "eflomal HMM"), (3, "eflomal HMM+fertility")):
        forward, backward = eflomal_in_memory(corpus.sources, corpus.targets, model, folder=tmp_path)
        start = len(corpus.sources) - len(sure)
        expected[name] = symmetrized_scores(forward[start:], backward[start:], sure, possible)
    FakeEflomal.calls.clear()
    (tmp_path / "scores").mkdir()
    whole_reads_refused(monkeypatch, text)
    scores = score_statistical(text, tmp_path / "scores" / "statistical.json", settings)
    monkeypatch.undo()
    assert scores == expected
    assert json.loads((tmp_path / "scores" / "statistical.json").read_text()) == json.loads(json.dumps(expected))
    assert fake_eflomal == [(1, "TextIOWrapper"), (2, "TextIOWrapper"), (3, "TextIOWrapper")]
    assert [p.name for p in (tmp_path / "scores").iterdir()] == ["statistical.json"]


# ---------------------------------------------------------------------- guided alignment's file


def test_the_eflomal_links_file_takes_its_pairs_as_a_stream_and_stamps_them_as_before(tmp_path, fake_eflomal):
    """guided_alignment.eflomal_file given its pairs as a stream (a generator at each pass): the
    links and the SHA-256 stamp of the texts held in memory; the same texts again: one pass, for
    the stamp, and the file reused (eflomal not run, its input not written); other texts: made
    again."""
    from attnmt.translation.guided_alignment import eflomal_file

    config = types.SimpleNamespace(experiment_dir=tmp_path)
    sources, targets = [words(s) for s, _ in PAIRS[:100]], [words(t) for _, t in PAIRS[:100]]
    forward, backward = eflomal_in_memory(sources, targets, folder=tmp_path)
    FakeEflomal.calls.clear()
    passed = []

    def stream(texts):
        for pair in texts:
            passed.append(pair)
            yield pair

    path = eflomal_file(config, lambda: stream(zip(sources, targets)), lambda m: None)
    assert path.read_text() == "".join(format_pharaoh(grow_diag_final(f, b)) + "\n" for f, b in zip(forward, backward))
    assert (path.parent / "train.eflomal.sha256").read_text() == old_digest(sources, targets) + "\n"
    assert len(passed) == 100 and fake_eflomal == [(3, "TextIOWrapper")]
    made = path.stat().st_mtime_ns
    eflomal_file(config, lambda: stream(zip(sources, targets)), lambda m: None)
    assert len(fake_eflomal) == 1 and len(passed) == 200 and path.stat().st_mtime_ns == made  # (reused)
    eflomal_file(config, lambda: stream(zip(sources, targets[::-1])), lambda m: None)
    assert len(fake_eflomal) == 2 and len(passed) == 400  # (a pass for the stamp, one into eflomal's files)
    assert sorted(p.name for p in path.parent.iterdir()) == ["train.eflomal.links", "train.eflomal.sha256"]


def test_an_eflomal_run_that_fails_half_way_leaves_no_links_file(tmp_path, monkeypatch, fake_eflomal):
    """The links are written through an atomic writer: eflomal failing after some of them leaves
    neither the links file nor its stamp (nor eflomal's input files)."""
    from attnmt.translation import statistical_align
    from attnmt.translation.guided_alignment import eflomal_file

    def failing(source, target, forward, backward, model=3):
        forward.write_text("0-0\n" * 3)
        backward.write_text("0-0\n" * 3)  # (3 pairs of 10: the reading of the links fails)

    monkeypatch.setattr(statistical_align, "align_files", failing)
    config = types.SimpleNamespace(experiment_dir=tmp_path)
    with pytest.raises(AttnmtError, match="eflomal wrote the links of 3 pairs, not of 10"):
        eflomal_file(config, lambda: ((f"a{k} b", f"B A{k}") for k in range(10)), lambda m: None)
    assert list((tmp_path / "alignment").iterdir()) == []


# ----------------------------------------------------------------------------- bounded memory

MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, sys, types, zlib
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_streamed_corpus_commands import FakeEflomal
    sys.modules["eflomal"] = types.SimpleNamespace(Aligner=FakeEflomal)
    from attnmt.compare.runs import ComparisonSettings
    from attnmt.compare.scores import score_statistical
    from attnmt.core.config import CorpusFiles
    from attnmt.translation.guided_alignment import eflomal_file, training_texts

    folder, pairs = Path(sys.argv[1]), int(sys.argv[2])
    corpus = folder / "train.tsv"
    with open(corpus, "w") as out:  # (written as a stream: the script holds no corpus)
        for k in range(pairs):
            words = [f"w{{(k * 7 + i * 13) % 997}}" for i in range(4 + k % 20)]
            out.write(" ".join(words) + "\\t" + " ".join(w.upper() for w in reversed(words)) + "\\n")
        out.write("w1 w2\\tW2 W1\\n")
    (folder / "gold.links").write_text("1-2 2-1\\n")
    def status(field):  # (KB)
        return int(next(l for l in open("/proc/self/status") if l.startswith(field + ":")).split()[1])

    open("/proc/self/clear_refs", "w").write("5")  # (the peak, VmHWM, set to what is resident now)
    before = status("VmRSS")
    config = types.SimpleNamespace(experiment_dir=folder, data=types.SimpleNamespace(train=CorpusFiles(tsv=corpus)))
    eflomal_file(config, lambda: training_texts(config, range(pairs + 1)), print)
    settings = ComparisonSettings(align_gold=folder / "gold.links", one_based=True, log=print)
    (folder / "scores").mkdir()
    score_statistical(corpus, folder / "scores" / "statistical.json", settings)
    print("GROWTH", status("VmHWM") - before)
    """
)


@pytest.mark.slow  # (20,000 pairs through eflomal's files four times: about 10 s)
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's /proc/self/clear_refs resets the peak")
def test_the_eflomal_links_and_the_statistical_aligner_take_no_more_memory_for_a_larger_corpus(tmp_path):
    """The peak resident memory (VmHWM, reset before the work) of a fresh process that streams a
    generated corpus through eflomal_file (guided alignment's links, the shortlist's) and compare's
    statistical aligner grows by less than 10 MB from 2,000 to 20,000 pairs (2.8 MB of text).
    Measured: 4 KB at either size; with the statistical aligner's texts and links held in memory as
    they were before (read_corpus, eflomal_links), 4.4 MB and 46 MB."""
    script = tmp_path / "script.py"
    script.write_text(MEMORY_SCRIPT.format(tests=str(Path(__file__).parent)))
    growth = {}
    for pairs in (2_000, 20_000):
        folder = tmp_path / str(pairs)
        folder.mkdir()
        done = subprocess.run(
            [sys.executable, str(script), str(folder), str(pairs)], capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        growth[pairs] = int(done.stdout.split("GROWTH")[-1])
    assert growth[20_000] - growth[2_000] < 10_000, growth


# ------------------------------------------------------------------- guided alignment's self links


@pytest.mark.slow  # (trains two first rounds: seconds)
def test_self_links_are_aligned_a_chunk_at_a_time_as_the_texts_held_in_memory_were(
    tmp_path,
    first_rounds,  # noqa: F811
    monkeypatch,
):
    """links: self streams the texts (read three times, never whole): the file is the first round's
    links of every usable pair, in order, an empty line for each pair that is not (here one in
    four, mixed in), with the chunks of pairs aligned (SELF_CHUNK) and read (SELF_READ) made
    small; its stamp is the SHA-256 of the texts held in memory."""
    from attnmt.api import load
    from attnmt.translation import guided_alignment
    from attnmt.translation.align import align
    from attnmt.translation.training import prepare_data
    from test_guided_alignment import second_round

    pairs, _, forward, _ = first_rounds
    config = second_round(tmp_path, pairs, first_round=str(forward))
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    left_out = {k for k, s in enumerate(sources) if zlib.crc32(s.encode()) % 4 == 0}
    expected = [
        "" if k in left_out else format_pharaoh(links) for k, links in enumerate(align(load(forward), sources, targets))
    ]
    with_their_words = guided_alignment._with_their_words

    def some_left_out(models, chunk):
        return [
            fits and zlib.crc32(s.encode()) % 4 != 0 for (s, _), fits in zip(chunk, with_their_words(models, chunk))
        ]

    monkeypatch.setattr(guided_alignment, "_with_their_words", some_left_out)
    monkeypatch.setattr(guided_alignment, "SELF_CHUNK", 7)
    monkeypatch.setattr(guided_alignment, "SELF_READ", 5)
    whole_reads_refused(monkeypatch, config.data.train.tsv)
    messages = []
    prepare_data(config, log=messages.append)
    monkeypatch.undo()
    folder = config.experiment_dir / "alignment"
    assert (folder / "train.self.links").read_text().split("\n")[:-1] == expected
    assert (folder / "train.self.sha256").read_text().split("\n")[0] == "text " + old_digest(sources, targets)
    assert f"word links: {len(left_out)} training pair(s) whose pieces" in " ".join(messages)
    assert 0 < len(left_out) < len(pairs)


# ------------------------------------------------------------------------------ the pieces


def test_an_atomic_writer_leaves_the_old_file_or_the_whole_new_one(tmp_path):
    """core.files.atomic_writer: the file appears whole when the block ends; an error in the block
    leaves the old file and no temporary one; a folder that cannot be written is an error naming it."""
    from attnmt.core.files import atomic_writer

    path = tmp_path / "sub" / "links.txt"
    with atomic_writer(path) as out:
        out.write("0-0\n")
        assert not path.exists()  # (nothing there until the block ends)
        out.write("1-1\n")
    assert path.read_bytes() == b"0-0\n1-1\n"
    with pytest.raises(KeyboardInterrupt):
        with atomic_writer(path) as out:
            out.write("2-2\n")
            raise KeyboardInterrupt
    assert path.read_text() == "0-0\n1-1\n" and sorted(p.name for p in path.parent.iterdir()) == ["links.txt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(AttnmtError, match="file"):
        with atomic_writer(tmp_path / "file" / "x.txt") as out:
            out.write("never")


def test_the_texts_at_a_stores_lines_are_read_as_they_pass_and_a_missing_line_names_the_file(tmp_path):
    """guided_alignment.training_texts: the pairs at the given (ascending) lines of data.train, their
    words single-spaced, read line by line (a generator of lines is enough); a line that is no
    pair of the corpus (a corpus changed since its store was made) is an error naming file and line."""
    from attnmt.core.config import CorpusFiles
    from attnmt.translation.guided_alignment import training_texts

    corpus = tmp_path / "train.tsv"
    corpus.write_text("a  b\tB A\n\t\nc\u00a0d\tD C\ne\tE\n")  # (line 2: an empty pair, no pair of the corpus)
    config = types.SimpleNamespace(data=types.SimpleNamespace(train=CorpusFiles(tsv=corpus)))
    texts = training_texts(config, (line for line in (0, 2, 3)))
    assert next(texts) == ("a b", "B A")
    assert list(texts) == [("c d", "D C"), ("e", "E")]
    with pytest.raises(AttnmtError, match=r"train.tsv: line 2 is not a sentence pair of the training corpus"):
        list(training_texts(config, [0, 1, 2]))
    with pytest.raises(AttnmtError, match=r"train.tsv: line 9 is not a sentence pair"):
        list(training_texts(config, [3, 8]))
