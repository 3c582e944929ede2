"""Teacher-forced training of a translation model (RNN or Transformer) on a GPU, as CUDA graphs.

A step-by-step decoder launches a few dozen small kernels per target position, forward and
backward: at batch 64 an H100 finishes each long before Python has launched the next, so the GPU
waits (80-85 % idle, measured with eager PyTorch). A CUDA graph records the kernels of a whole
pass once and replays them with one launch. What is captured, once per batch shape:

    src, lengths, tgt_in, tgt_out
        -> the encoder, keys, the T decoder steps, the output layer, the summed loss   forward graph
        -> the gradients of every weight                                               backward graph

(``torch.cuda.make_graphed_callables``); the optimizer steps as before. In the graph an RNN encoder
runs as on a CPU (attnmt.core.speed): cuDNN's RNN kernel per direction over the padded batch, the
backward direction on each sentence reversed within its length, since a packed batch (what the
encoder does on a GPU outside graphs) takes its lengths from the host at every call. A Transformer
has no step loop (its decoder reads the whole target at once), but still some thirty kernels a
layer forward and more backward, small at batch 64: its pass is captured as it is.

A graph holds fixed shapes: the target is padded in time to a multiple of ``TIME_MULTIPLE`` (the
source width is already one, see attnmt.core.speed), and the padded positions are left out of the loss
by target rather than selected away (``linear_cross_entropy(..., ignore_index=PAD)``). Each new
shape is captured the first time it comes, at most ``MAX_GRAPHS`` of them; the rest run as
before. The graphs share one memory pool (``GraphedLoss.pool``): the GPU memory of the largest
shape's pass, not of all of them. Capturing runs the pass a few times: the GPU's random-number
state is put back afterwards, so dropout draws the same masks whether a shape was captured at that
step or before (a resumed run repeats the uninterrupted one).

``TrainingConfig.cuda_graphs: false``, ``attnmt.core.speed.plain()`` or ``ATTNMT_PLAIN=1`` switch this
off; tests/test_graphs.py checks that both paths compute the same loss and gradients.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmt.core import speed
from attnmt.data.batching import Batch
from attnmt.data.subwords import PAD
from attnmt.seq2seq.base import source_mask
from attnmt.seq2seq.transformer import Transformer

TIME_MULTIPLE = 8
MAX_GRAPHS = 64  # shapes; each graph keeps the activations of its pass on the GPU
WARMUP_PASSES = 2  # before a capture (cuDNN and cuBLAS choose their kernels, lazy set-up happens)


def can_graph(model: nn.Module) -> bool:
    """Whether ``model``'s training pass can be captured: an RNN encoder-decoder (its state has the
    same shape at every step) or a Transformer, not a speech model (whose loss adds CTC)."""
    from attnmt.seq2seq.model import Seq2Seq

    # the exact classes: a subclass (attnmt.speech.model.SpeechModel) adds to the encoder or the loss
    return type(model) in (Seq2Seq, Transformer)


class BatchLoss(nn.Module):
    """The captured part of a training step: a batch's tensors -> the summed loss over its real
    target tokens, the attention within ``window``. A module of its own, since
    make_graphed_callables replaces its forward."""

    def __init__(self, model: nn.Module, label_smoothing: float, window: tuple[int, int] | None = None):
        super().__init__()
        self.model, self.label_smoothing, self.window = model, label_smoothing, window

    def forward(self, src: Tensor, lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        outputs = self.decoder_outputs(src, lengths, tgt_in)
        return self.model.generator.loss(
            outputs.flatten(0, 1), tgt_out.flatten(), self.label_smoothing, ignore_index=PAD
        )

    def decoder_outputs(self, src: Tensor, lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """What enters the output layer: an RNN's with its encoder unpacked (see the module's
        docstring), a Transformer's as in any training step (its targets' padding comes after
        their tokens, which the causal mask keeps from seeing it)."""
        if isinstance(self.model, Transformer):  # (no window: a Transformer refuses one)
            return self.model.decoder_outputs(src, lengths, tgt_in, self.window)[0]
        states, final = self.model.encoder(src, lengths, unpacked=True)
        memory = self.model.memory_of(states, final, source_mask(lengths, states.size(1)), self.window)
        return self.model.decoder_outputs_of(memory, tgt_in)[0]


def padded_targets(batch: Batch) -> tuple[Tensor, Tensor]:
    """tgt_in, tgt_out padded with PAD to a multiple of TIME_MULTIPLE steps (masked in the loss)."""
    extra = -batch.tgt_in.size(1) % TIME_MULTIPLE
    return F.pad(batch.tgt_in, (0, extra), value=PAD), F.pad(batch.tgt_out, (0, extra), value=PAD)


class GraphedLoss:
    """The summed loss of a batch (on the GPU) as a CUDA graph per shape; ``window``: the
    attention window of training (training.attention_window), part of every graph."""

    def __init__(self, model: nn.Module, label_smoothing: float, window: tuple[int, int] | None = None):
        self.model, self.label_smoothing, self.window = model, label_smoothing, window
        self.graphs: dict[tuple, Callable[..., Tensor]] = {}
        self.failed = False  # a capture failed: no more tries
        # One memory pool for all the graphs: a step replays one graph's forward and backward, and
        # nothing of it is read after the step (the loss is read, the gradients are added to the
        # weights' own), so the graphs can reuse each other's memory. Each graph with a pool of its
        # own held the activations of every shape at once: 64 GB with 5,000-token batches.
        self.pool = None

    def __call__(self, batch: Batch) -> Tensor:
        inputs = (batch.src, batch.src_lengths, *padded_targets(batch))
        # Autocast's cache of cast weights cannot live across captures: inside a graph the casts
        # are replayed with the rest.
        with torch.autocast(
            "cuda",
            dtype=torch.get_autocast_dtype("cuda"),
            enabled=torch.is_autocast_enabled("cuda"),
            cache_enabled=False,
        ):
            return self.batch_loss(inputs)(*inputs)

    def batch_loss(self, inputs: tuple[Tensor, ...]) -> Callable[..., Tensor]:
        """The graph of these inputs' shapes (captured now if new), or the module itself."""
        key = (tuple((tuple(x.shape), x.dtype) for x in inputs), torch.is_autocast_enabled("cuda"))
        if key not in self.graphs:
            if len(self.graphs) >= MAX_GRAPHS or self.failed:
                return self.eager()
            self.graphs[key] = self.capture(inputs)
        return self.graphs[key]

    def capture(self, inputs: tuple[Tensor, ...]) -> Callable[..., Tensor]:
        device = inputs[0].device
        samples = tuple(x.detach().clone().requires_grad_(x.requires_grad) for x in inputs)
        # The weights' gradient accumulators, made during the warm-up passes on a side stream, then
        # serve the backward passes on the main one: harmless (one event between the streams), but
        # PyTorch warns at every step.
        quiet = getattr(torch.autograd.graph, "set_warn_on_accumulate_grad_stream_mismatch", None)
        if quiet is not None:
            quiet(False)
        random_state = torch.cuda.get_rng_state(device)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        try:
            with warnings.catch_warnings():
                # cuDNN copies each direction's weights into one block: inside the graph, a copy kernel
                warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
                return torch.cuda.make_graphed_callables(
                    self.eager(), samples, num_warmup_iters=WARMUP_PASSES, allow_unused_input=True, pool=self.pool
                )
        except RuntimeError as e:  # an operation that cannot be captured: train as before, and say so
            warnings.warn(
                f"training.cuda_graphs: the decoder could not be captured as a CUDA graph ({e}); "
                "training goes on without graphs",
                stacklevel=2,
            )
            self.failed = True
            return self.eager()
        finally:
            torch.cuda.set_rng_state(random_state, device)

    def eager(self) -> BatchLoss:
        """The pass that a graph captures, to run as it is."""
        return BatchLoss(self.model, self.label_smoothing, self.window)


def graphed_loss(
    model: nn.Module,
    label_smoothing: float,
    device: torch.device,
    enabled: bool,
    processes: int = 1,
    window: tuple[int, int] | None = None,
) -> GraphedLoss | None:
    """A GraphedLoss (with the attention ``window``) where it applies: a GPU, one process
    (DistributedDataParallel's hooks are not captured), an RNN translation model, graphs and the
    speed tricks on; else None."""
    if not (enabled and device.type == "cuda" and processes == 1 and speed.enabled() and can_graph(model)):
        return None
    return GraphedLoss(model, label_smoothing, window)
