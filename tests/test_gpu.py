"""On a CUDA GPU (issue 23): every task trains there and every command runs there, a resumed run
repeats the uninterrupted one bit for bit, and torchrun trains with NCCL.

    python -m pytest -q -m gpu tests/test_gpu.py

Skipped with a message where torch.cuda.is_available() is False (tests/conftest.py), so CI without
a GPU passes them by; tests/test_devices.py catches the same kind of bug on a CPU. The HTTP API's
tests need fastapi and httpx (skipped without them).
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnmt.api import load
from attnmt.cli import main
from attnmt.core.checkpoint import read_trainer_state
from attnmt.core.config import config_from_dict, config_to_yaml
from attnmt.core.errors import AttnmtError
from attnmt.training import Trainer, train
from conftest import local_client, pair_config, random_strings, reverse, toy_config, write, write_tsv
from speech_helpers import random_texts, speech_config, write_tone_corpus
from test_distributed import run  # train with torchrun (or one process), checked to succeed

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

PAIRS = [(s, reverse(s)) for s in random_strings(300, 3, 8, seed=21)]
DEV = [(s, reverse(s)) for s in random_strings(20, 3, 8, seed=22)]
QUIET = {"log": lambda message: None, "progress": False}
RNN = {"attention": "bahdanau", "dropout": 0.2}
TRANSFORMER = {
    "type": "transformer",
    "d_model": 32,
    "heads": 4,
    "feed_forward": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "dropout": 0.2,
    "attention_dropout": 0.1,
    "share_embeddings": True,
}


def cuda_experiment(folder, model=RNN, steps: int = 6, test: bool = True, **training):
    """A toy experiment (reverse strings) trained on cuda, with a test set scored at its end if ``test``."""
    data = {"test": {"test": {"tsv": str(write_tsv(folder / "test.tsv", DEV[:8]))}}} if test else {}
    return toy_config(
        folder,
        PAIRS,
        DEV,
        model=model,
        data=data,
        training={
            "device": "cuda",
            "max_steps": steps,
            "validate_every": 3,
            "log_every": 3,
            "threads": 2,
            "dev_beam": 2,
            **training,
        },
        decoding={"beam": 3, "batch_size": 16, "max_length_ratio": 1.5, "max_length_offset": 3},
    )


def cuda_weights(folder, name="last.safetensors") -> dict:
    return {k: v for k, v in load_file(str(folder / name)).items() if k.startswith("model.")}


def run_cli(*argv) -> int:
    return main([str(a) for a in argv])


def test_cuda_is_the_device_of_training_and_of_every_command(tmp_path, capsys):
    """An RNN model trained on cuda (validation, checkpoints, test scores), resumed on cuda and on
    the CPU, then translate, evaluate, align and plot with --device cuda, and the Python API on
    cuda: the same forced attention as on the CPU."""
    from attnmt.translation.align import force_attention

    config = cuda_experiment(tmp_path, steps=6, keep_checkpoints=2)
    state = Trainer(config, **QUIET).train()
    assert state.step == 6
    folder = config.experiment_dir
    tensors = load_file(str(folder / "last.safetensors"))
    assert tensors["rng.cuda"].dtype == torch.uint8 and tensors["rng.cuda"].numel() > 0
    assert json.loads((folder / "test-scores.json").read_text())["test"]["sentences"] == 8
    config.training.max_steps = 8
    assert Trainer(config, **QUIET).train(resume=True).step == 8
    config.training.device, config.training.max_steps = "cpu", 10  # a GPU checkpoint resumed on a CPU
    assert Trainer(config, **QUIET).train(resume=True).step == 10

    sources = [s for s, _ in DEV[:6]]
    src = write(tmp_path / "src.txt", "\n".join(sources) + "\n")
    tgt = write(tmp_path / "tgt.txt", "\n".join(reverse(s) for s in sources) + "\n")
    for argv in (
        ("translate", folder, "-i", src, "-o", tmp_path / "out.txt", "--device", "cuda"),
        (
            "translate",
            folder,
            "-i",
            src,
            "-o",
            tmp_path / "nbest.txt",
            "--device",
            "cuda",
            "--beam",
            "3",
            "--n-best",
            "2",
        ),
        ("translate", folder, "-i", src, "-o", tmp_path / "bf16.txt", "--device", "cuda", "--bf16"),
        (
            "translate",
            folder,
            "-i",
            src,
            "-o",
            tmp_path / "sampled.txt",
            "--device",
            "cuda",
            "--sample",
            "--seed",
            "1",
            "--top-k",
            "3",
            "--top-p",
            "0.9",
        ),
        (
            "translate",
            folder,
            "-i",
            src,
            "-o",
            tmp_path / "ensemble.txt",
            "--device",
            "cuda",
            "--beam",
            "3",
            "--ensemble",
            folder,
        ),
        ("average", folder),
        (
            "translate",
            folder,
            "-i",
            src,
            "-o",
            tmp_path / "averaged.txt",
            "--device",
            "cuda",
            "--checkpoint",
            "averaged",
        ),
        ("evaluate", folder, "--trust-config", "--device", "cuda", "--json", tmp_path / "scores.json"),
        ("evaluate", folder, "--device", "cuda", "--src", src, "--ref", tgt),
        ("align", folder, "--src", src, "--tgt", tgt, "-o", tmp_path / "links.txt", "--device", "cuda"),
        ("score", folder, "--src", src, "--tgt", tgt, "-o", tmp_path / "scores.txt", "--device", "cuda"),
        (
            "score",
            folder,
            "--src",
            src,
            "--tgt",
            tgt,
            "-o",
            tmp_path / "dual.txt",
            "--device",
            "cuda",
            "--backward",
            folder,
        ),
        (
            "translate",
            folder,
            "-i",
            src,
            "-o",
            tmp_path / "reranked.txt",
            "--device",
            "cuda",
            "--beam",
            "3",
            "--rerank",
            folder,
        ),
        (
            "translate",
            folder,
            "-i",
            src,
            "-o",
            tmp_path / "covered.txt",
            "--device",
            "cuda",
            "--beam",
            "3",
            "--coverage-penalty",
            "0.4",
            "--length-penalty",
            "0.6",
        ),
        (
            "translate",
            folder,
            "-i",
            src,
            "-o",
            tmp_path / "constrained.txt",
            "--device",
            "cuda",
            "--beam",
            "3",
            "--constraints",
            write(tmp_path / "phrases.txt", "ab\n" * len(DEV[:6])),
        ),
        (
            "plot",
            folder,
            sources[0],
            "--device",
            "cuda",
            "--out",
            tmp_path / "heatmap.png",
            "--states",
            tmp_path / "states.png",
            "--step",
            "1",
            tmp_path / "step.png",
            "--gif",
            tmp_path / "steps.gif",
        ),
    ):
        assert run_cli(*argv) == 0, capsys.readouterr().err
    assert len((tmp_path / "out.txt").read_text().splitlines()) == len(sources)
    assert len((tmp_path / "links.txt").read_text().splitlines()) == len(sources)

    on_gpu, on_cpu = load(folder, device="cuda"), load(folder)
    assert on_gpu.model.generator.weight.is_cuda
    for beam, n_best in ((1, 1), (3, 2)):
        for t in on_gpu.translate(sources, beam=beam, n_best=n_best):
            assert isinstance(t.attention, np.ndarray) and t.attention.shape[1] == len(t.source_tokens)
    sampled = [t.text for t in on_gpu.translate(sources, sampling={"seed": 1, "top_k": 3, "top_p": 0.9})]
    assert (tmp_path / "sampled.txt").read_text().splitlines() == sampled  # the seed's draws, on the GPU too
    translation, nodes = on_gpu.beam_tree(sources[0], beam=3)
    assert nodes[0]["status"] == "root" and any(n["status"] == "finished" for n in nodes)
    for constrained in (on_gpu, on_cpu):  # the constrained search's tree, on the GPU as on the CPU
        translation, nodes = constrained.beam_tree(sources[0], beam=3, constraints=["ab"])
        assert "ab" in translation.text and all(n["met"] is not None for n in nodes[1:])
    trace = on_gpu.trace(sources[0])
    assert trace.encoder_states.shape[0] == len(trace.source_tokens) and trace.steps[0].weights is not None
    targets = [reverse(s) for s in sources]
    for a, b in zip(force_attention(on_gpu, sources, targets), force_attention(on_cpu, sources, targets)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    starts = [t[:2] for t in targets]
    prefixed = zip(
        starts, on_gpu.translate(sources, beam=3, prefix=starts), on_cpu.translate(sources, beam=3, prefix=starts)
    )
    for start, a, b in prefixed:  # the fixed-shape search on the GPU, its prefix restricted there
        assert a.text.startswith(start) and a.text == b.text
    for translator in (on_gpu, on_cpu):  # the fixed-shape search on the GPU, its coverage summed there
        translator.set_decoding(coverage_penalty=0.4, length_penalty=0.6)
    for a, b in zip(on_gpu.translate(sources, beam=3, n_best=2), on_cpu.translate(sources, beam=3, n_best=2)):
        assert [c.text for c in a.candidates] == [c.text for c in b.candidates]
        assert [c.score for c in a.candidates] == pytest.approx([c.score for c in b.candidates], abs=1e-3)
    wanted = [["ab"], [], ["c", "de"], [], [], ["j"]]
    for a, b in zip(
        on_gpu.translate(sources, beam=3, constraints=wanted), on_cpu.translate(sources, beam=3, constraints=wanted)
    ):
        assert a.text == b.text
    for a, b in zip(on_gpu.score(sources, targets), on_cpu.score(sources, targets)):
        np.testing.assert_allclose(a.log_probs, b.log_probs, atol=1e-4)
    scores = [float(line) for line in (tmp_path / "scores.txt").read_text().splitlines()]
    assert scores == pytest.approx([s.log_prob for s in on_cpu.score(sources, targets)], abs=1e-3)
    with pytest.raises(AttnmtError, match="for CPUs"):
        load(folder, quantize="int8", device="cuda")


@pytest.mark.parametrize("model", [RNN, TRANSFORMER], ids=["rnn", "transformer"])
def test_resume_on_cuda_repeats_the_uninterrupted_run_bit_for_bit(tmp_path, model):
    """8 steps straight against 4 steps + resume to 8 (dropout on: the GPU's generator is in the
    checkpoint), on the same GPU: the same weights, bit for bit."""
    schedule = {"schedule": "noam", "warmup_steps": 3, "adam_betas": [0.9, 0.98]} if model is TRANSFORMER else {}
    straight = cuda_experiment(tmp_path / "straight", model, steps=8, test=False, **schedule)
    train(straight, **QUIET)
    interrupted = cuda_experiment(tmp_path / "resumed", model, steps=4, test=False, **schedule)
    train(interrupted, **QUIET)
    interrupted.training.max_steps = 8
    assert Trainer(interrupted, **QUIET).train(resume=True).step == 8
    a, b = cuda_weights(straight.experiment_dir), cuda_weights(interrupted.experiment_dir)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("model", [RNN, TRANSFORMER], ids=["rnn", "transformer"])
def test_a_training_step_on_one_gpu_waits_for_nothing_and_a_diverged_step_is_caught(tmp_path, model):
    """One process on a GPU keeps each step's loss and gradient norm on the device (attnmt.training.
    divergence): once a batch shape is captured (an RNN's or a Transformer's pass), a step makes no
    host synchronisation (torch.cuda.set_sync_debug_mode raises at any); a step whose loss is not
    finite leaves the weights as they were, and the next check names it."""
    from attnmt.translation.training import translation_batch

    trainer = Trainer(cuda_experiment(tmp_path / "run", model, test=False), **QUIET)
    assert trainer.loop.loss.graphs is not None
    loop = trainer.loop
    assert loop.divergence.on_device
    batch = translation_batch(trainer.data.train, loop.epoch_batches(0)[0])
    loop.train_step(batch)  # the capture of this shape
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [loop.train_step(batch)[0] for _ in range(3)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(loss.device.type == "cuda" and torch.isfinite(loss) for loss in losses)
    loop.divergence.raise_if_diverged(4)  # nothing to say
    trainer.model.generator.weight.data[0, 0] = float("nan")  # every loss from now on: not a number
    before = {name: p.detach().nan_to_num() for name, p in trainer.model.named_parameters()}
    loop.state.step = 4
    loop.train_step(batch)  # step 5
    assert all(torch.equal(p.detach().nan_to_num(), before[name]) for name, p in trainer.model.named_parameters())
    with pytest.raises(AttnmtError, match="^step 5: the training loss or gradient norm is not finite"):
        loop.divergence.raise_if_diverged(5)


def test_transformer_pairs_and_speech_on_cuda(tmp_path, capsys):
    """The other tasks: a Transformer (every layer's and head's attention, forced attention of
    every layer, the head view), a sentence-pair classifier and a speech model, trained and used on cuda."""
    from attnmt.pairs.quickstart import make_pairs
    from attnmt.translation.align import force_attention

    config = cuda_experiment(tmp_path / "transformer", TRANSFORMER, steps=6)
    train(config, **QUIET)
    transformer = load(config.experiment_dir, device="cuda")
    source = DEV[0][0]
    maps = transformer.attention(source)
    assert maps["cross"].shape[:2] == (2, 4) and maps["encoder"].dtype == np.float32
    [layers] = force_attention(transformer, [source], [reverse(source)], layers=True)
    assert layers.shape[0] == 2 and np.allclose(layers.sum(axis=-1), 1, atol=1e-4)
    assert (
        run_cli("plot", config.experiment_dir, source, "--device", "cuda", "--head-view", tmp_path / "heads.png") == 0
    ), capsys.readouterr().err

    folder = tmp_path / "pairs"
    folder.mkdir()
    test = write(folder / "test.tsv", "".join("\t".join(t) + "\n" for t in make_pairs(40, seed=3)))
    raw = pair_config(
        folder,
        data={"dev": {"tsv": str(test)}, "test": {"test": {"tsv": str(test)}}},
        model={"dropout": 0.2},
        training={"max_steps": 6, "validate_every": 3, "device": "cuda"},
    )
    pairs = config_from_dict(raw, folder)
    train(pairs, **QUIET)
    classifier = load(pairs.experiment_dir, device="cuda")
    [result] = classifier.classify([("two red cats are sleeping", "two cats are sleeping")])
    assert result.premise_attention.shape == (len(result.premise_tokens), len(result.hypothesis_tokens))
    assert 0 <= classifier.evaluate(classifier.test_sets["test"])["accuracy"] <= 1
    lines = write(tmp_path / "pairs.txt", "two red cats\ttwo cats\n")
    assert run_cli("classify", pairs.experiment_dir, "-i", lines, "--device", "cuda") == 0, capsys.readouterr().err

    texts = random_texts(8, seed=4)
    tsv = write_tone_corpus(tmp_path, "tones", texts)
    speech = speech_config(
        tmp_path / "speech",
        tsv,
        dev=tsv,
        test=tsv,
        steps=6,
        training={"device": "cuda"},
        speech={"conv_channels": 8, "n_mels": 40, "ctc_weight": 0.3},
    )
    train(speech, **QUIET)
    recognizer = load(speech.experiment_dir, device="cuda")
    wavs = [tmp_path / "tones" / f"{i}.wav" for i in range(3)]
    for t in recognizer.transcribe(wavs, beam=2):
        assert t.features.shape[1] == 40 and (t.attention is None or t.attention.shape[1] == len(t.source_tokens))
    assert recognizer.trace(wavs[0]).features.shape[1] == 40
    [matrix] = recognizer.force_attention([recognizer.features(wavs[0])], [texts[0]])
    assert np.allclose(matrix.sum(axis=1), 1, atol=1e-4)
    lines = write(tmp_path / "wavs.txt", "".join(f"{w}\n" for w in wavs))
    assert run_cli("translate", speech.experiment_dir, "-i", lines, "--device", "cuda") == 0, capsys.readouterr().err


def test_the_http_api_on_cuda(tmp_path):
    """attnmt serve --device cuda: every endpoint of a translation model, a Transformer, a
    sentence-pair model and a speech model."""
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from attnmt.serve import ServerLimits, create_app

    rnn = cuda_experiment(tmp_path / "rnn", steps=3, test=False)
    transformer = cuda_experiment(tmp_path / "transformer", TRANSFORMER, steps=3, test=False)
    for config in (rnn, transformer):
        train(config, **QUIET)
    (tmp_path / "pairs").mkdir()
    pairs = config_from_dict(
        pair_config(tmp_path / "pairs", training={"max_steps": 3, "device": "cuda"}), tmp_path / "pairs"
    )
    train(pairs, **QUIET)
    texts = random_texts(4, seed=5)
    tsv = write_tone_corpus(tmp_path, "tones", texts)
    speech = speech_config(tmp_path / "speech", tsv, steps=3, training={"device": "cuda"})
    train(speech, **QUIET)

    app = create_app(
        [
            ("rnn", rnn.experiment_dir),
            ("transformer", transformer.experiment_dir),
            ("pairs", pairs.experiment_dir),
            ("speech", speech.experiment_dir),
            ("ensemble", rnn.experiment_dir),
        ],
        ServerLimits(timeout=120.0),
        device="cuda",
        ensembles={"ensemble": [rnn.experiment_dir]},
    )
    assert all(
        m.translator.model.training is False and next(m.translator.model.parameters()).is_cuda
        for m in app.state.models.values()
    )
    source = DEV[0][0]
    audio = base64.b64encode((tmp_path / "tones" / "0.wav").read_bytes()).decode()
    with local_client(app) as client:
        for path, body in (
            ("/translate", {"text": [source, DEV[1][0]], "beam": 3, "n_best": 2}),
            ("/translate", {"text": source}),
            ("/trace", {"text": source}),
            ("/beam", {"text": source, "beam": 3}),
            ("/translate", {"text": source, "model": "transformer"}),
            ("/attention", {"text": source, "model": "transformer"}),
            ("/score", {"text": [source, DEV[1][0]], "translation": [DEV[0][1], DEV[1][1]]}),
            ("/translate", {"text": [source, DEV[1][0]], "prefix": [DEV[0][1][:2], ""], "beam": 3}),
            ("/translate", {"text": [source, DEV[1][0]], "beam": 3, "model": "ensemble"}),
            ("/trace", {"text": source, "model": "ensemble"}),
            ("/score", {"text": source, "translation": DEV[0][1], "model": "transformer"}),
            ("/classify", {"premise": "two red cats", "hypothesis": "two cats", "model": "pairs"}),
            ("/translate", {"audio": audio, "model": "speech"}),
            ("/trace", {"audio": audio, "model": "speech"}),
        ):
            response = client.post(path, json=body)
            assert response.status_code == 200, (path, body.get("model"), response.text)


def test_processes_on_gpus_join_with_nccl(monkeypatch):
    """torchrun on GPUs: each process takes the GPU of its LOCAL_RANK and the group is NCCL (gloo on
    CPUs). The group itself is faked here: one GPU is enough."""
    import torch.distributed as dist

    from attnmt.core import distributed

    backends = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, *args, **kwargs: backends.append(backend))
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    device = distributed.device("cuda")
    assert device == torch.device("cuda", 0) and torch.cuda.current_device() == 0
    processes = distributed.start(device)
    assert backends == ["nccl"] and processes.device == device and processes.active
    distributed.start(torch.device("cpu"))
    assert backends == ["nccl", "gloo"]


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="torchrun with NCCL needs two GPUs (one per process)",
)
def test_torchrun_trains_on_two_gpus_with_nccl_as_one_process_does(tmp_path):
    """2 processes on 2 GPUs (NCCL) train the model that 1 process on 1 GPU trains, up to the order of
    the sums; resuming them works."""

    def config_file(folder, steps):
        config = toy_config(
            folder,
            PAIRS,
            DEV,
            model={"attention": "bahdanau", "dropout": 0.0},
            training={"device": "cuda", "max_steps": steps, "validate_every": 6, "log_every": 3, "threads": 1},
        )
        path = folder / "train.yaml"
        path.write_text(config_to_yaml(config), encoding="utf-8")
        return config, path

    single, single_path = config_file(tmp_path / "single", 12)
    double, double_path = config_file(tmp_path / "double", 12)
    run(single_path, 1)
    run(double_path, 2)
    a, b = cuda_weights(single.experiment_dir), cuda_weights(double.experiment_dir)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)
    _, again = config_file(tmp_path / "double", 18)
    run(again, 2, resume=True)
    assert read_trainer_state(double.experiment_dir / "last.safetensors")["step"] == 18


def test_an_aligner_trains_and_aligns_on_cuda(tmp_path, capsys):
    """attnmt train-aligner on a model trained on cuda, then align --aligner on cuda: the links of
    the CPU."""
    from attnmt.translation.align import align
    from attnmt.translation.aligner import load_aligner

    config = cuda_experiment(tmp_path, steps=6, test=False)
    Trainer(config, **QUIET).train()
    folder = config.experiment_dir
    write(tmp_path / "aligner.yaml", f"model: {folder}\nsteps: 4\nlexicon_steps: 2\nsize: 16\ndevice: cuda\n")
    assert run_cli("train-aligner", tmp_path / "aligner.yaml") == 0, capsys.readouterr().err
    sources = [s for s, _ in DEV[:6]]
    targets = [reverse(s) for s in sources]
    on_gpu, on_cpu = load(folder, device="cuda"), load(folder)
    layer = load_aligner(folder / "aligner", on_gpu)
    assert layer.W_o.weight.is_cuda
    assert align(on_gpu, sources, targets, aligner=layer) == align(
        on_cpu, sources, targets, aligner=load_aligner(folder / "aligner", on_cpu)
    )
