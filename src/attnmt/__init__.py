"""attnmt: neural machine translation built around attention."""

import os

# oneDNN, which runs the bf16 matrix products on CPUs, compiles kernels per matrix shape and keeps
# up to 1,024 of them. Batches are shaped to meet few shapes (source width rounded up, output-layer
# rows padded, an unpacked encoder), about 300 in a 20-minute run of the reference model: 512 holds
# them all, so none is compiled twice, and bounds the memory if a corpus brings more. Read when the
# first kernel is made, so it is set here, before any computation; a value set by the user wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "512")

from attnmt.api import Candidate, Translation, Translator, load  # noqa: E402
from attnmt.errors import AttnmtError  # noqa: E402

__version__ = "0.1.0"
__all__ = ["AttnmtError", "Candidate", "Translation", "Translator", "load", "__version__"]
