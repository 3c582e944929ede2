"""A decoder step captured as a CUDA graph, cheaply enough to capture one per batch
(attnmt.seq2seq.fast_decoding's searches do)."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Callable

import torch

# A capture that neither waits for the GPU nor empties its caches (see captured); ATTNMT_LEAN_CAPTURE=0:
# torch.cuda.graph's, as before.
LEAN_CAPTURE = os.environ.get("ATTNMT_LEAN_CAPTURE", "1") != "0"
_ONE_CAPTURE_AT_A_TIME = threading.Lock()


def captured(run: Callable[[], None], device: torch.device) -> Callable[[], None]:
    """``run`` as a CUDA graph's replay on a CUDA device; ``run`` itself elsewhere.

    Each batch of a search captures its own graph, so a capture must cost little. torch.cuda.graph,
    the usual way in, first waits for the GPU and empties the memory caches (of the GPU and of pinned
    host memory) to give the graph room, and each graph gets a private memory pool, freed with it:
    every batch would then give memory back and ask for it again. Here (``LEAN_CAPTURE``) the capture
    is ordered after the current stream's work instead of waiting for it, and the graphs of a thread
    share one pool, kept alive by the thread's last graph (_ThreadGraphs): a thread runs one search
    at a time, and a search's graph is never replayed after its search has ended, so the next capture
    may take its memory.
    (Threads keep pools apart: the server's may decode at once.) Measured on an H100, see
    docs/performance.md."""
    if device.type != "cuda":
        return run
    graph = torch.cuda.CUDAGraph()
    # Autocast's cache of cast weights does not outlive its context, while the graph would read it
    # at every replay: inside the graph the weights are cast with the rest. One capture at a time
    # (the server decodes in threads), and only this thread's calls are checked during it: another
    # thread may go on with its own (eager) work on its own stream.
    autocast = torch.autocast(
        "cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=torch.is_autocast_enabled("cuda"), cache_enabled=False
    )
    if not LEAN_CAPTURE:
        with _ONE_CAPTURE_AT_A_TIME, autocast, torch.cuda.graph(graph, capture_error_mode="thread_local"):
            run()
        return graph.replay
    mine = _THREAD.graphs.setdefault(device, _ThreadGraphs())
    try:
        with _ONE_CAPTURE_AT_A_TIME, autocast, side_stream(device):
            graph.capture_begin(pool=mine.pool(), capture_error_mode="thread_local")
            try:
                run()
            finally:
                graph.capture_end()
    except BaseException:
        _THREAD.graphs.pop(device)  # the next capture starts a pool of its own
        raise
    mine.last = graph
    return graph.replay


class _ThreadGraphs:
    """The memory pool that a thread's graphs on one device share. A pool can be joined only while
    a graph of it is alive (PyTorch counts them), so the thread's last graph is kept until the next
    capture has joined the pool."""

    def __init__(self):
        self.handle, self.last = None, None

    def pool(self):
        if self.handle is None:
            self.handle = torch.cuda.graph_pool_handle()  # made by the first capture that names it
        return self.handle


class _PerThread(threading.local):
    def __init__(self):  # run in each thread that looks
        self.graphs: dict[torch.device, _ThreadGraphs] = {}


_THREAD = _PerThread()


@contextmanager
def side_stream(device: torch.device):
    """The work of the block on a CUDA side stream, ordered after and before the current one's."""
    if device.type != "cuda":
        yield
        return
    current, side = torch.cuda.current_stream(device), torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        yield
    current.wait_stream(side)
