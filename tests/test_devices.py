"""Device bugs caught on a CPU (issue 23): the commands run as if the model were on a GPU.

On a GPU two things fail that pass on a CPU: ``.numpy()`` (or ``np.asarray``) on a tensor that
lives on the GPU, and an operation between a tensor made on the host (a batch) that was never
moved to the model's device and the model's own tensors. The ``as_on_a_gpu`` fixture makes both
fail here too:

- ``torch.Tensor.numpy`` refuses every caller but attnmt.core.devices (``to_numpy``, which copies to
  the CPU first): a tensor reaching numpy any other way is an error, wherever it lives;
- the batches attnmt makes on the host (``data.batching.pad``, speech's ``feature_batch``) are
  HostTensors, which refuse to meet the model's tensors until moved with ``.to(device)``, as a
  CPU tensor refuses to meet a CUDA one. ``Batch.to`` and ``PairBatch.to`` skip the move when the
  device is the CPU (nothing to do there); here they always move, as they do for a GPU.

Each task is trained a few steps, resumed, and put through its commands, its Python API and its
HTTP API under the fixture. The tensors made inside the model's computations are checked to be made
on its device by test_decoding.py::test_every_tensor_of_decoding_is_made_on_the_models_device (the
meta device); GPU runs proper are tests/test_gpu.py.
"""

from __future__ import annotations

import base64
import json
import sys
from importlib.util import find_spec

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree

from attnmt.api import load
from attnmt.cli import main
from attnmt.core import devices
from attnmt.core.config import config_from_dict
from attnmt.data import batching
from attnmt.data.batching import Batch
from attnmt.pairs import classifier as classify
from attnmt.pairs.classifier import PairBatch
from attnmt.serve import ServerLimits, create_app
from attnmt.speech import recognizer
from attnmt.speech import training as speech_training
from attnmt.training import Trainer, train
from conftest import local_client, pair_config, random_strings, reverse, toy_config, write, write_tsv
from speech_helpers import random_texts, speech_config, write_tone_corpus


class HostTensor(torch.Tensor):
    """A tensor made on the host for a model on another device: any operation with the model's
    tensors (others than HostTensors, of one element or more dimensions) is refused until
    ``.to(device)`` has moved it, which gives a plain tensor. Operations between host tensors
    (lengths, sizes) are allowed, as on the CPU."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to and any(
            isinstance(a, (torch.device, str, torch.Tensor)) for a in (*args[1:], kwargs.get("device"))
        ):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs).as_subclass(torch.Tensor)
        with torch._C.DisableTorchFunctionSubclass():
            tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.dim() > 0]
        if any(isinstance(t, HostTensor) for t in tensors) and not all(isinstance(t, HostTensor) for t in tensors):
            raise RuntimeError(
                f"{getattr(func, '__name__', func)}: a tensor made on the host meets the model's "
                "tensors without being moved to the model's device (.to(device)): on a GPU, "
                "'Expected all tensors to be on the same device'"
            )
        return super().__torch_function__(func, types, args, kwargs)


def on_the_host(tensors):
    return tuple(t.as_subclass(HostTensor) for t in tensors)


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """Tensors reach numpy through attnmt.core.devices only, and batches are host tensors (see the
    module's docstring). Yields the list of refused ``.numpy()`` calls, which must stay empty
    (also where the code under test catches the error)."""
    refused = []
    real_numpy = torch.Tensor.numpy

    def numpy(self, *args, **kwargs):
        caller = sys._getframe(1)
        if caller.f_globals.get("__name__") != devices.__name__:
            where = f"{caller.f_code.co_filename}:{caller.f_lineno} ({caller.f_code.co_name})"
            refused.append(where)
            raise RuntimeError(
                f"Tensor.numpy() called at {where}, not through attnmt.core.devices.to_numpy: on a GPU, "
                "'can't convert cuda:0 device type tensor to numpy'"
            )
        return real_numpy(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "numpy", numpy)
    pad, feature_batch = batching.pad, speech_training.feature_batch
    monkeypatch.setattr(batching, "pad", lambda *args, **kwargs: on_the_host(pad(*args, **kwargs)))
    monkeypatch.setattr(classify, "pad", batching.pad)
    monkeypatch.setattr(speech_training, "feature_batch", lambda features: on_the_host(feature_batch(features)))
    monkeypatch.setattr(recognizer, "feature_batch", speech_training.feature_batch)

    def move(t, device):
        return None if t is None else t.to(device)

    monkeypatch.setattr(
        Batch,
        "to",
        lambda self, device: Batch(
            move(self.src, device),
            move(self.src_lengths, device),
            move(self.tgt_in, device),
            move(self.tgt_out, device),
            self.indices,
        ),
    )
    monkeypatch.setattr(
        PairBatch,
        "to",
        lambda self, device: PairBatch(
            move(self.premise, device), move(self.hypothesis, device), move(self.labels, device)
        ),
    )
    yield refused
    assert not refused, f"Tensor.numpy() called outside attnmt.core.devices at {refused}"


def test_the_guards_catch_what_fails_on_a_gpu(as_on_a_gpu):
    """The fixture refuses what a GPU refuses, and lets the helper through."""
    tensor = torch.arange(6.0).view(2, 3)
    with pytest.raises(RuntimeError, match="not through attnmt.core.devices.to_numpy"):
        tensor.numpy()
    with pytest.raises(RuntimeError, match="not through attnmt.core.devices.to_numpy"):
        np.asarray(tensor)
    as_on_a_gpu.clear()
    np.testing.assert_array_equal(devices.to_numpy(tensor), [[0, 1, 2], [3, 4, 5]])
    assert devices.to_numpy(tensor.bfloat16()).dtype == np.float32  # numpy has no bfloat16
    batch = batching.make_batch([[5, 6, 7], [8]])
    embedding = torch.nn.Embedding(10, 4)
    with pytest.raises(RuntimeError, match="without being moved to the model's device"):
        embedding(batch.src)
    assert embedding(batch.to(torch.device("cpu")).src).shape == (2, 4, 4)
    assert int(batch.src_lengths.max()) == 4  # host tensors among themselves: as on the CPU


def test_to_numpy_copies_when_asked_and_leaves_dtypes():
    tensor = torch.arange(4, dtype=torch.int64)
    shared, copied = devices.to_numpy(tensor), devices.to_numpy(tensor, copy=True)
    tensor[0] = 9
    assert shared[0] == 9 and copied[0] == 0 and copied.dtype == np.int64
    weights = torch.ones(2, 2, requires_grad=True)
    assert devices.to_numpy(weights * 2).tolist() == [[2, 2], [2, 2]]  # detached
    assert devices.model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert devices.model_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameters


PAIRS = [(s, reverse(s)) for s in random_strings(200, 3, 8, seed=11)]
DEV = [(s, reverse(s)) for s in random_strings(12, 3, 8, seed=12)]
QUIET = {"log": lambda message: None, "progress": False}


def translation_experiment(tmp_path, model: dict, steps: int):
    test = write_tsv(tmp_path / "test.tsv", DEV[:6])
    return toy_config(
        tmp_path,
        PAIRS,
        DEV,
        model=model,
        data={"test": {"test": {"tsv": str(test)}}},
        training={"max_steps": steps, "validate_every": 3, "log_every": 3, "threads": 1, "dev_beam": 2},
        decoding={"beam": 2, "batch_size": 8, "max_length_ratio": 1.5, "max_length_offset": 3},
    )


def train_and_resume(config, steps: int):
    """Trains to ``steps``, then resumes to twice as many (a checkpoint written and read back)."""
    train(config, **QUIET)
    config.training.max_steps = 2 * steps
    state = Trainer(config, **QUIET).train(resume=True)
    assert state.step == 2 * steps


LIMITS = ServerLimits(max_sentences=8, max_chars=40, max_tokens=20, max_beam=5, max_work=400, timeout=60.0)


def post(client, path: str, body: dict) -> dict:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.slow  # trains a model (a few steps: about a second)
def test_rnn_translation_commands_on_a_device(as_on_a_gpu, tmp_path, capsys):
    """Training (validation, checkpoints, test scores), resume, translate, evaluate, beam tree,
    trace, align, plot and the HTTP API of an RNN model with attention."""
    from attnmt.translation.align import align, force_attention

    config = translation_experiment(tmp_path, {"attention": "bahdanau", "dropout": 0.2}, steps=3)
    train_and_resume(config, 3)
    folder = config.experiment_dir
    assert (folder / "test-scores.json").is_file()
    translator = load(folder)
    sources = [s for s, _ in DEV[:4]]
    for beam, n_best in ((1, 1), (3, 2)):
        [t, *_] = translator.translate(sources, beam=beam, n_best=n_best)
        assert isinstance(t.attention, np.ndarray) and t.attention.shape[1] == len(t.source_tokens)
    translation, nodes = translator.beam_tree(sources[0], beam=3)
    assert nodes[0]["status"] == "root" and isinstance(translation.attention, np.ndarray)
    translation, nodes = translator.beam_tree(sources[0], beam=3, constraints=[reverse(sources[0])[:2]])
    assert nodes[1]["met"] is not None and isinstance(translation.attention, np.ndarray)
    trace = translator.trace(sources[0])
    assert isinstance(trace.encoder_states, np.ndarray) and isinstance(trace.steps[0].weights, np.ndarray)
    [matrix] = force_attention(translator, sources[:1], [reverse(sources[0])])
    pieces = len(translator.src_subwords.encode(sources[:1])[0]) + 1  # (+ "</s>"; the target: as many)
    assert matrix.shape == (pieces, pieces)
    assert len(align(translator, sources[:2], [reverse(s) for s in sources[:2]], words=False)) == 2
    [prefixed] = translator.translate(sources[:1], beam=2, prefix=[reverse(sources[0])[:1]])
    assert isinstance(prefixed.attention, np.ndarray)
    [scored] = translator.score(sources[:1], [reverse(sources[0])])
    assert isinstance(scored.log_probs, np.ndarray) and scored.log_prob < 0

    src = write(tmp_path / "src.txt", "\n".join(sources) + "\n")
    tgt = write(tmp_path / "tgt.txt", "\n".join(reverse(s) for s in sources) + "\n")
    for argv in (
        ["translate", folder, "-i", src, "-o", tmp_path / "out.txt", "--beam", "2"],
        [
            "translate",
            folder,
            "-i",
            src,
            "-o",
            tmp_path / "sampled.txt",
            "--sample",
            "--seed",
            "1",
            "--top-k",
            "3",
            "--top-p",
            "0.9",
        ],
        ["translate", folder, "-i", src, "-o", tmp_path / "ensemble.txt", "--beam", "2", "--ensemble", folder],
        ["evaluate", folder, "--trust-config", "--json", tmp_path / "scores.json"],
        ["evaluate", folder, "--src", src, "--ref", tgt],
        ["score", folder, "--src", src, "--tgt", tgt, "-o", tmp_path / "scores.txt", "--ensemble", folder],
        ["score", folder, "--src", src, "--tgt", tgt, "-o", tmp_path / "dual.txt", "--backward", folder],
        ["translate", folder, "-i", src, "-o", tmp_path / "reranked.txt", "--beam", "2", "--rerank", folder],
        ["align", folder, "--src", src, "--tgt", tgt, "-o", tmp_path / "links.txt"],
        ["train-aligner", write(tmp_path / "aligner.yaml", f"model: {folder}\nsteps: 3\nlexicon_steps: 1\n")],
        [
            "align",
            folder,
            "--src",
            src,
            "--tgt",
            tgt,
            "--aligner",
            folder / "aligner",
            "-o",
            tmp_path / "aligner-links.txt",
        ],
        [
            "plot",
            folder,
            sources[0],
            "--out",
            tmp_path / "heatmap.png",
            "--states",
            tmp_path / "states.png",
            "--step",
            "1",
            tmp_path / "step.png",
        ],
    ):
        assert main([str(a) for a in argv]) == 0, capsys.readouterr().err
    assert len((tmp_path / "out.txt").read_text().splitlines()) == len(sources)
    assert len((tmp_path / "aligner-links.txt").read_text().splitlines()) == len(sources)

    with local_client(create_app([folder], LIMITS)) as client:
        answer = post(client, "/translate", {"text": sources[:2], "beam": 2, "n_best": 2, "attention": True})
        assert len(answer["translations"][0]["candidates"][0]["attention"]) > 0
        post(client, "/translate", {"text": sources[0], "beam": 1})
        assert post(client, "/trace", {"text": sources[0]})["steps"]
        assert post(client, "/beam", {"text": sources[0], "beam": 3})["nodes"]
        assert post(client, "/beam", {"text": sources[0], "beam": 3, "constraints": ["ab"]})["nodes"][1]["met"] >= 0
        assert post(client, "/score", {"text": sources[:2], "translation": sources[:2]})["scores"][1]["log_probs"]


@pytest.mark.slow  # trains a model (a few steps: about a second)
def test_transformer_commands_and_attention_maps_on_a_device(as_on_a_gpu, tmp_path, capsys):
    """A Transformer: training and resume (dropout on), translation, every layer's and head's
    attention (API and /attention), forced attention of every layer, the head view, export."""
    from attnmt.translation.align import force_attention

    model = {
        "type": "transformer",
        "d_model": 16,
        "heads": 2,
        "feed_forward": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "dropout": 0.1,
        "attention_dropout": 0.1,
    }
    config = translation_experiment(tmp_path, model, steps=3)
    config.experiment_dir = tmp_path / "transformer"
    train_and_resume(config, 3)
    folder = config.experiment_dir
    translator = load(folder)
    source = DEV[0][0]
    [t] = translator.translate([source], beam=2)
    maps = translator.attention(source)
    assert maps["cross"].shape[:2] == (2, 2) and maps["encoder"].dtype == np.float32
    assert translator.attention(source, reverse(source))["decoder"].shape[:2] == (2, 2)
    [layers] = force_attention(translator, [source], [reverse(source)], layers=True)
    pieces = len(translator.src_subwords.encode([source])[0]) + 1
    assert layers.shape == (2, pieces, pieces)
    assert main([str(a) for a in ["plot", folder, source, "--head-view", tmp_path / "heads.png"]]) == 0, (
        capsys.readouterr().err
    )
    aligner = write(tmp_path / "aligner.yaml", f"model: {folder}\nsteps: 2\nlexicon_steps: 1\nsize: 8\n")
    assert main(["train-aligner", str(aligner)]) == 0, capsys.readouterr().err
    pairs = write(tmp_path / "src.txt", source + "\n"), write(tmp_path / "tgt.txt", reverse(source) + "\n")
    assert (
        main(
            [
                str(a)
                for a in [
                    "align",
                    folder,
                    "--src",
                    pairs[0],
                    "--tgt",
                    pairs[1],
                    "--aligner",
                    folder / "aligner",
                    "-o",
                    tmp_path / "links.txt",
                ]
            ]
        )
        == 0
    ), capsys.readouterr().err
    with local_client(create_app([folder], LIMITS)) as client:
        assert len(post(client, "/attention", {"text": source})["cross"]) == 2
        post(client, "/translate", {"text": [source], "beam": 2})
        assert post(client, "/score", {"text": source, "translation": reverse(source)})["scores"][0]["per_token"] < 0
    if find_spec("ctranslate2") is not None:  # the weights to numpy for CTranslate2
        assert main([str(a) for a in ["export", folder, "--ct2", tmp_path / "ct2"]]) == 0, capsys.readouterr().err


@pytest.mark.slow  # trains a model (a few steps: about a second)
def test_sentence_pair_commands_on_a_device(as_on_a_gpu, tmp_path, capsys):
    """A sentence-pair classifier: training with validation and test scores, resume, classify,
    evaluate, plot and /classify."""
    from attnmt.pairs.quickstart import make_pairs

    test = write(tmp_path / "test.tsv", "".join("\t".join(t) + "\n" for t in make_pairs(20, seed=3)))
    raw = pair_config(
        tmp_path,
        data={"dev": {"tsv": str(test)}, "test": {"test": {"tsv": str(test)}}},
        model={"dropout": 0.2},
        training={"max_steps": 3, "validate_every": 3, "threads": 1},
    )
    config = config_from_dict(raw, tmp_path)
    config.experiment_dir = tmp_path / "pairs"
    train_and_resume(config, 3)
    folder = config.experiment_dir
    classifier = load(folder)
    [result] = classifier.classify([("two red cats are sleeping", "two cats are sleeping")])
    assert isinstance(result.premise_attention, np.ndarray) and isinstance(result.class_scores, np.ndarray)
    assert 0 <= classifier.evaluate(classifier.test_sets["test"])["accuracy"] <= 1
    pairs = write(tmp_path / "pairs.txt", "two red cats\ttwo cats\n")
    for argv in (
        ["classify", folder, "-i", pairs, "-o", tmp_path / "labels.txt"],
        ["evaluate", folder, "--trust-config"],
        ["plot", folder, "two red cats", "--hypothesis", "two cats", "--out", tmp_path / "pair.png"],
    ):
        assert main([str(a) for a in argv]) == 0, capsys.readouterr().err
    with local_client(create_app([folder], LIMITS)) as client:
        assert post(client, "/classify", {"premise": "two red cats", "hypothesis": "two cats"})["label"]


@pytest.mark.slow  # trains a model (a few steps: about a second)
def test_speech_commands_on_a_device(as_on_a_gpu, tmp_path, capsys):
    """A speech model (CTC too): training with validation and test scores, resume, transcribe,
    trace, forced attention, translate / evaluate / plot, and audio over HTTP."""
    texts = random_texts(6, seed=4)
    tsv = write_tone_corpus(tmp_path, "train", texts)
    config = speech_config(
        tmp_path, tsv, dev=tsv, test=tsv, steps=3, speech={"conv_channels": 8, "n_mels": 40, "ctc_weight": 0.3}
    )
    config.experiment_dir = tmp_path / "speech"
    train_and_resume(config, 3)
    folder = config.experiment_dir
    model = load(folder)
    wavs = [tmp_path / "train" / f"{i}.wav" for i in range(2)]
    [t, _] = model.transcribe(wavs, beam=2)
    assert isinstance(t.features, np.ndarray) and isinstance(t.attention, np.ndarray)
    trace = model.trace(wavs[0])
    assert isinstance(trace.features, np.ndarray) and trace.steps
    [matrix] = model.force_attention([model.features(wavs[0])], [texts[0]])
    assert matrix.shape[0] == len(model.tgt_subwords.encode(texts[:1])[0]) + 1
    lines = write(tmp_path / "wavs.txt", "".join(f"{w}\n" for w in wavs))
    for argv in (
        ["translate", folder, "-i", lines, "-o", tmp_path / "out.txt"],
        ["evaluate", folder, "--trust-config"],
        ["plot", folder, wavs[0], "--out", tmp_path / "speech.png"],
    ):
        assert main([str(a) for a in argv]) == 0, capsys.readouterr().err
    audio = base64.b64encode(wavs[0].read_bytes()).decode()
    with local_client(create_app([folder], LIMITS)) as client:
        assert post(client, "/translate", {"audio": audio, "attention": True})["translations"]
        assert post(client, "/trace", {"audio": audio})["steps"]
    assert json.loads((folder / "test-scores.json").read_text())["test"]["utterances"] == 6


@pytest.mark.slow  # trains a model (a few steps: about a second)
def test_every_tensor_of_training_is_made_on_the_models_device(tmp_path, monkeypatch):
    """With "meta" as the default device, a tensor made without naming its device lands there
    and the first operation mixing it with the model's (CPU) tensors fails (see
    test_decoding.py::test_every_tensor_of_decoding_is_made_on_the_models_device): the training
    steps, validation and checkpoints of each task, and resuming, name their device everywhere.
    (The models are built before, as they are built on the CPU and then moved; no test set, whose
    scoring loads a model.)"""
    transformer = {
        "type": "transformer",
        "d_model": 16,
        "heads": 2,
        "feed_forward": 32,
        "dropout": 0.1,
        "attention_dropout": 0.1,
    }
    texts = random_texts(6, seed=4)
    tsv = write_tone_corpus(tmp_path, "tones", texts)
    from attnmt.pairs.quickstart import make_pairs

    (tmp_path / "pairs").mkdir()
    write(tmp_path / "pairs" / "d.tsv", "".join("\t".join(t) + "\n" for t in make_pairs(20, seed=3)))
    pairs = pair_config(
        tmp_path / "pairs", data={"dev": {"tsv": str(tmp_path / "pairs" / "d.tsv")}}, model={"dropout": 0.2}
    )
    configs = [
        toy_config(tmp_path / "rnn", PAIRS, DEV, model={"attention": "location", "dropout": 0.2}),
        toy_config(tmp_path / "transformer", PAIRS, DEV, model=transformer),
        config_from_dict(pairs, tmp_path / "pairs"),
        speech_config(
            tmp_path / "speech", tsv, dev=tsv, steps=3, speech={"conv_channels": 8, "n_mels": 40, "ctc_weight": 0.3}
        ),
    ]
    for config in configs:
        config.training.validate_every, config.training.threads, config.training.dev_beam = 3, 1, 2
        for steps, resume in ((3, False), (5, True)):
            config.training.max_steps = steps
            trainer = Trainer(config, **QUIET)
            with torch.device("meta"):
                assert trainer.train(resume=resume).step == steps


def test_checkpoints_keep_the_gpus_generator_and_load_without_a_gpu(tmp_path, monkeypatch):
    """The training state of a model on a GPU holds that GPU's generator (rng.cuda), restored on
    resume on that GPU; on a CPU, a checkpoint holding one loads all the same (its generator is
    ignored). The GPU is faked here: tests/test_gpu.py resumes on a real one."""
    from attnmt.core import checkpoint

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = tmp_path / "last.safetensors"
    checkpoint.save_training_state(path, model, optimizer, {"trainer": {"step": 1}})
    assert "rng.cuda" not in checkpoint.read_checkpoint(path)[0]  # on a CPU: none

    cuda = torch.device("cuda", 0)
    generator = torch.arange(16, dtype=torch.uint8)
    restored = []
    monkeypatch.setattr(checkpoint, "model_device", lambda model: cuda)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: generator if device == cuda else None)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.append((state, device)))
    checkpoint.save_training_state(path, model, optimizer, {"trainer": {"step": 1}})
    tensors, _ = checkpoint.read_checkpoint(path)  # (the checksum covers it)
    assert torch.equal(tensors["rng.cuda"], generator)
    assert checkpoint.load_training_state(path, model, optimizer) == {"trainer": {"step": 1}}
    [(state, device)] = restored
    assert torch.equal(state, generator) and device == cuda

    monkeypatch.setattr(checkpoint, "model_device", lambda model: torch.device("cpu"))
    assert checkpoint.load_training_state(path, model, optimizer) == {"trainer": {"step": 1}}
    assert len(restored) == 1  # a GPU checkpoint resumed on a CPU: the GPU's generator is not asked for


def test_processes_on_gpus_join_with_nccl_and_on_cpus_with_gloo(monkeypatch):
    """The backend of torchrun's process group follows the device: NCCL takes GPU tensors only, gloo
    CPU ones. The group is faked (tests/test_gpu.py runs torchrun on two GPUs)."""
    import torch.distributed as dist

    from attnmt.core import distributed

    backends = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, *args, **kwargs: backends.append(backend))
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    for device in (torch.device("cuda", 1), torch.device("cpu")):
        processes = distributed.start(device)
        assert processes == distributed.Processes(1, 2, device)
    assert backends == ["nccl", "gloo"]
