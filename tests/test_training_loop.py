"""The pieces of training alone: the batches of the epochs, the metrics window, the data of an
experiment, and the loop with a model that is not a translation model."""

import json
import time
from dataclasses import asdict
from functools import partial

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from attnmt.core.config import config_from_dict
from attnmt.core.distributed import ONE_PROCESS
from attnmt.core.distributed import device as distributed_device
from attnmt.data.batching import epoch_batches
from attnmt.core.errors import AttnmtError
from attnmt.training import MetricsWindow, ProgressBar, TrainerState, TrainingLoop, batches_to_train, setup_training
from attnmt.training.loop import CPU_OUT_OF_MEMORY
from attnmt.training.divergence import DivergenceCheck
from attnmt.translation.training import prepare_data
from conftest import random_strings, reverse, toy_config, write_tsv

SIZES = [3, 9, 4, 7, 5, 8, 2, 6, 9, 4, 3, 5, 7, 8, 6, 2, 4, 9, 5, 3, 6, 7, 8, 2, 5, 4, 9]
EPOCH = partial(epoch_batches, SIZES, 4, None, 2, 3)  # 27 examples by 4: 7 batches an epoch


def take(state: TrainerState, count: int, min_size: int = 1) -> list[list[int]]:
    """The next ``count`` batches, as the loop takes them: stopping is decided before each one."""
    taken = []
    for indices in batches_to_train(state, EPOCH, lambda: len(taken) >= count, min_size):
        taken.append(indices)
    return taken


def test_batches_resumed_mid_epoch_continue_where_they_stopped():
    straight = TrainerState()
    expected = take(straight, 17)  # two epochs and 3 batches
    assert expected == list(EPOCH(0)) + list(EPOCH(1)) + EPOCH(2)[:3]
    first = TrainerState()
    before = take(first, 10)
    assert (first.epoch, first.batch_in_epoch) == (1, 3)
    resumed = TrainerState(**json.loads(json.dumps(asdict(first))))  # through a checkpoint's JSON
    assert before + take(resumed, 7) == expected
    assert (resumed.epoch, resumed.batch_in_epoch) == (straight.epoch, straight.batch_in_epoch) == (2, 3)


def test_an_epoch_limit_stops_with_the_epoch_counted_and_small_batches_are_skipped():
    state = TrainerState()
    batches = list(batches_to_train(state, EPOCH, lambda: state.epoch >= 1, min_size=4))
    assert batches == [b for b in EPOCH(0) if len(b) >= 4] and len(batches) == len(EPOCH(0)) - 1
    assert (state.epoch, state.batch_in_epoch) == (1, 0)


def test_metrics_window_gives_loss_per_token_and_speed_since_its_start(monkeypatch):
    clock = iter([10.0, 12.0, 12.0, 16.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    window = MetricsWindow()  # at 10 s
    window.add(6.0, 3)
    window.add(3.0, 6)
    assert window.record(lr=0.1) == {"loss": 1.0, "tokens_per_s": 4.5, "lr": 0.1}  # at 12 s
    window.restart()  # at 12 s
    window.add(8.0, 2)
    assert window.record(lr=0.2) == {"loss": 4.0, "tokens_per_s": 0.5, "lr": 0.2}  # at 16 s


def test_the_step_bar_shows_on_a_terminal_only(capsys):
    """Not in a log or a pipe (attnmt compare's logs filled with bars): pytest's stderr is no terminal."""
    bar = ProgressBar(10, 0, enabled=True, max_minutes=None)
    bar.update()
    bar.close()
    assert capsys.readouterr().err == ""


def test_prepare_data_trains_subwords_and_encodes_the_corpora(tmp_path):
    pairs = [(s, reverse(s)) for s in random_strings(50, 3, 8, seed=1)] + [("abcdefghij" * 2, "x")]
    dev = [(s, reverse(s)) for s in random_strings(5, 3, 8, seed=2)] + [("abcdefghij" * 2, "x")]
    config = toy_config(tmp_path, pairs, dev, data={"max_length": 12})
    data = prepare_data(config, log=lambda m: None)
    assert (config.experiment_dir / "spm" / "joint.model").is_file()
    assert list(data.train.lines) == list(range(len(pairs) - 1))  # the long pair is dropped from training ...
    assert data.dev.sources == [s for s, _ in dev]  # ... not from the dev set
    assert [data.src_sw.decode(ids) for ids in data.train.src_ids] == [s for s, _ in pairs[:-1]]
    assert data.tgt_sw.decode(data.train.tgt_ids[0]) == pairs[0][1]
    assert (config.experiment_dir / "store" / "manifest.json").is_file()  # (read from the store)
    assert prepare_data(toy_config(tmp_path / "no-dev", pairs), log=lambda m: None).dev is None


# --- the loop with a classifier: no sentence pairs, no BLEU --------------------------------------


class Examples:
    """A batch of a classifier: feature vectors and their class."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def to(self, device):
        return Examples(self.x.to(device), self.y.to(device))


class ClassifierLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, batch):
        return nn.functional.cross_entropy(self.model(batch.x), batch.y, reduction="sum"), len(batch.y)


class DevLoss:
    def __init__(self, dev: Examples):
        self.dev = dev

    @torch.no_grad()
    def __call__(self, model):
        model.eval()  # no dropout: it would draw random numbers, and a resumed run would differ
        return {"loss": nn.functional.cross_entropy(model(self.dev.x), self.dev.y).item()}

    def describe(self, record):
        return f"dev loss {record['loss']:.4f}"


class PoisonedLoss(ClassifierLoss):
    """The classifier's loss, not a number at its ``bad_call``-th call (a diverging step)."""

    def __init__(self, model, bad_call: int):
        super().__init__(model)
        self.calls, self.bad_call = 0, bad_call

    def forward(self, batch):
        self.calls += 1
        loss, size = super().forward(batch)
        return (loss * float("nan") if self.calls == self.bad_call else loss), size


def classifier_run(
    folder, max_steps, resume=False, bad_step=None, on_device=False, memory_check=True, sizes=None, batches=None
):
    """A linear classifier of 8 features into 2 classes trained by the loop; its log and weights.
    ``bad_step``: that step's loss is not a number; ``on_device``: the loop checks losses as it
    does on one GPU, on the device (attnmt.training.divergence), here on the CPU. ``sizes``: the
    examples' (all 1 unless given); ``batches``: a list that gets the indices of each batch made."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 8, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()
    config = config_from_dict(
        {
            "experiment_dir": str(folder),
            "data": {"train": {"tsv": str(write_tsv(folder / "unused.tsv", [("a", "b")]))}, "batch_size": 16},
            "training": {
                "max_steps": max_steps,
                "validate_every": 10,
                "log_every": 5,
                "learning_rate": 0.05,
                "early_stopping_metric": "loss",
                "early_stopping_patience": None,
                "memory_check": memory_check,
            },
        },
        folder,
    )
    torch.manual_seed(1)
    model = nn.Sequential(nn.Dropout(0.1), nn.Linear(8, 2))
    logged = []
    # (the memory check before the first step is the loss's first call)
    loss = ClassifierLoss(model) if bad_step is None else PoisonedLoss(model, bad_step + memory_check)
    setup = setup_training(model, loss, config.training, ONE_PROCESS)
    loop = TrainingLoop(
        config,
        setup,
        [1] * 160 if sizes is None else sizes,
        lambda indices: (batches.append(indices) if batches is not None else None) or Examples(x[indices], y[indices]),
        DevLoss(Examples(x[160:], y[160:])),
        "model: a linear classifier",
        log=logged.append,
        progress=False,
    )
    loop.divergence = DivergenceCheck(setup.optimizer, on_device=on_device)
    assert loop.divergence.on_device == on_device  # fused Adam honours found_inf on a CPU too
    state = loop.run(resume)
    return state, logged, load_file(str(folder / "last.safetensors"))


def test_the_loop_trains_a_classifier_and_resumes_it_exactly(tmp_path):
    state, logged, straight = classifier_run(tmp_path / "straight", 30)
    assert state.step == 30 and state.sentences == state.target_tokens == 30 * 16
    assert logged[0] == "model: a linear classifier" and logged[1].startswith("step 10: dev loss ")
    records = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["type"], r["step"]) for r in records if r["type"] == "valid"] == [
        ("valid", 10),
        ("valid", 20),
        ("valid", 30),
    ]
    assert [r["step"] for r in records if r["type"] == "train"] == [5, 10, 15, 20, 25, 30]
    valid = [r for r in records if r["type"] == "valid"]
    assert valid[-1]["loss"] < valid[0]["loss"] and {"lr", "best"} <= valid[0].keys()
    assert (tmp_path / "straight" / "best.safetensors").is_file()

    classifier_run(tmp_path / "resumed", 13)  # mid-epoch: an epoch is 10 batches
    state, logged, resumed = classifier_run(tmp_path / "resumed", 30, resume=True)
    assert logged[0] == f"resumed from {tmp_path / 'resumed' / 'last.safetensors'} at step 13"
    for key in straight:
        if key.startswith("model."):
            assert torch.equal(straight[key], resumed[key]), key


def test_the_memory_check_runs_the_longest_batch_first_and_changes_nothing(tmp_path):
    """Before the first step, one pass over the corpus's longest examples (TrainingLoop.check_memory);
    the model has dropout, so the random state must be put back for the same run to follow."""
    sizes = [1 + (i * 7) % 23 for i in range(160)]
    checked, unchecked = [], []
    _, _, with_check = classifier_run(tmp_path / "check", 12, sizes=sizes, batches=checked)
    _, _, without = classifier_run(tmp_path / "none", 12, memory_check=False, sizes=sizes, batches=unchecked)
    left_out = set(range(160)) - set(checked[0])
    assert len(checked[0]) == 16 and min(sizes[i] for i in checked[0]) >= max(sizes[i] for i in left_out)
    assert checked[1:] == unchecked and len(unchecked) == 12  # then the same batches ...
    assert with_check.keys() == without.keys()
    for key in with_check:  # ... and bit for bit the same weights, optimizer state and random state
        assert torch.equal(with_check[key], without[key]), key


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
        # torch's CPU allocator, word for word (torch.empty(10**13) on a CPU)
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 40000000000000 bytes. Error code 12 (Cannot allocate memory)"
        ),
    ],
    ids=["cuda", "cpu"],
)
def test_a_longest_batch_that_does_not_fit_is_a_clear_error_before_the_first_step(tmp_path, monkeypatch, error):
    def out_of_memory(self, batch):
        raise error

    monkeypatch.setattr(ClassifierLoss, "forward", out_of_memory)
    with pytest.raises(
        AttnmtError, match=r"longest batch of the corpus \(16 examples of up to 1 pieces\) does not fit"
    ):
        classifier_run(tmp_path / "run", 5)
    assert not (tmp_path / "run" / "last.safetensors").exists()


def test_the_memory_check_passes_other_errors_on(tmp_path, monkeypatch):
    def broken(self, batch):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(ClassifierLoss, "forward", broken)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        classifier_run(tmp_path / "run", 5)


def test_the_cpu_allocators_message_is_the_one_caught():
    """The text matched is torch's own: a CPU allocation too large for any machine fails with it."""
    with pytest.raises(RuntimeError, match=CPU_OUT_OF_MEMORY):
        torch.empty(1 << 60, dtype=torch.uint8)


def test_checking_divergence_on_the_device_trains_the_same_weights(tmp_path):
    """One GPU checks each step's loss and norm on the device: with finite steps, bit for bit the same run."""
    _, _, read_each_step = classifier_run(tmp_path / "host", 30)
    _, _, on_device = classifier_run(tmp_path / "device", 30, on_device=True)
    assert read_each_step.keys() == on_device.keys()
    for key in read_each_step:
        assert torch.equal(read_each_step[key], on_device[key]), key


@pytest.mark.parametrize("on_device", [False, True])
def test_a_step_that_is_not_finite_stops_the_run_and_the_last_checkpoint_stays(tmp_path, on_device):
    folder = tmp_path / "run"
    with pytest.raises(AttnmtError) as error:
        classifier_run(folder, 30, bad_step=13, on_device=on_device)
    # read at once on the host; on the device, at the next train record (every 5 steps)
    assert str(error.value).startswith("step 13: the training loss")
    assert ("read at step 15" in str(error.value)) == on_device
    assert "checkpoint stay as they were" in str(error.value)
    kept = load_file(str(folder / "last.safetensors"))  # the checkpoint of step 10, finite
    assert all(torch.isfinite(t).all() for k, t in kept.items() if k.startswith("model."))
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 10  # no record of a diverged window


def test_a_step_not_finite_is_skipped_on_the_device_and_the_first_is_named():
    weight = nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([weight], lr=0.1, fused=True)
    check = DivergenceCheck(optimizer, on_device=True)
    for step, loss in enumerate([1.0, float("inf"), 2.0, float("nan")], start=1):
        before = weight.detach().clone()
        weight.grad = torch.ones(3)
        with check.guarded(step, torch.tensor(loss), torch.tensor(1.0)):
            optimizer.step()
        assert torch.equal(weight.detach(), before) != (loss == loss and abs(loss) != float("inf")), step
        assert not hasattr(optimizer, "found_inf")
    assert int(optimizer.state[weight]["step"]) == 2  # Adam's own count skips them too
    with pytest.raises(AttnmtError, match="^step 2: .* read at step 4"):
        check.raise_if_diverged(4)
    finite_norm_only = DivergenceCheck(torch.optim.Adam([weight], fused=True), on_device=True)
    with finite_norm_only.guarded(1, torch.tensor(1.0), torch.tensor(float("nan"))):
        pass
    with pytest.raises(AttnmtError, match="^step 1: "):
        finite_norm_only.raise_if_diverged(1)
    assert not DivergenceCheck(torch.optim.Adam([weight], foreach=False), on_device=True).on_device


@pytest.mark.parametrize("exchange", ["from_main", "total"])
def test_numbers_exchanged_between_processes_live_on_their_device(monkeypatch, exchange):
    """NCCL (GPUs) takes only GPU tensors: the numbers go on the processes' device."""
    import torch.distributed as dist

    from attnmt.core import distributed

    class Sent(Exception):
        pass

    def record(tensor, *args, **kwargs):
        raise Sent(tensor.device)

    monkeypatch.setattr(dist, "broadcast", record)
    monkeypatch.setattr(dist, "all_reduce", record)
    processes = distributed.Processes(0, 2, torch.device("meta"))
    with pytest.raises(Sent) as sent:
        getattr(distributed, exchange)([1.0, 2.0], processes)
    assert sent.value.args[0] == torch.device("meta")


def test_training_on_cuda_without_cuda_is_a_clear_error(tmp_path, capsys):
    from attnmt.cli import main

    path = tmp_path / "config.yaml"
    path.write_text("experiment_dir: exp\ndata: {train: {tsv: t.tsv}}\ntraining: {max_steps: 1}\n")
    (tmp_path / "t.tsv").write_text("a\tb\n")
    if torch.cuda.is_available():  # (a machine with a GPU gets the device of its process)
        assert distributed_device("cuda").type == "cuda"
        return
    assert main(["train", str(path), "--device", "cuda"]) == 2
    assert "CUDA is not available here" in capsys.readouterr().err
