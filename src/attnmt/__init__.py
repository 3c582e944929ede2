"""attnmt: neural machine translation built around attention."""

from attnmt.core import threads as _threads

_threads.configure_waiting()  # before torch is imported: OpenMP reads once, at load, how its threads wait

from attnmt.api import Candidate, Translation, Translator, load  # noqa: E402
from attnmt.core.errors import AttnmtError  # noqa: E402

__version__ = "0.1.0"
__all__ = ["AttnmtError", "Candidate", "Translation", "Translator", "load", "__version__"]
