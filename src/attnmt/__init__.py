"""attnmt: neural machine translation built around attention."""

import os

# oneDNN, which runs the bf16 matrix products on CPUs, keeps compiled kernels for up to 1,024
# matrix shapes; training meets new shapes with every batch, and that cache alone grew a
# 20-minute run to 5 GB. 64 still holds every shape of one step. Read when the first kernel is
# made, so it is set here, before any computation; a value set by the user wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")

from attnmt.api import Candidate, Translation, Translator, load  # noqa: E402
from attnmt.errors import AttnmtError  # noqa: E402

__version__ = "0.1.0"
__all__ = ["AttnmtError", "Candidate", "Translation", "Translator", "load", "__version__"]
