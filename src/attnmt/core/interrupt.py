"""Ctrl-C during training: finish the step under way, save a checkpoint, then stop.

A KeyboardInterrupt raised in the middle of an optimizer step would leave the weights half
updated, so the first SIGINT only sets a flag that the training loop checks between steps.
A second SIGINT raises KeyboardInterrupt at once (the last checkpoint on disk stays valid).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class InterruptFlag:
    requested: bool = False


@contextmanager
def deferred_interrupt():
    """Yields an InterruptFlag set by the first SIGINT while the block runs. Outside the main
    thread (where Python cannot install signal handlers) the flag stays False."""
    flag = InterruptFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag.requested:
            raise KeyboardInterrupt
        flag.requested = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
