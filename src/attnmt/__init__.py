"""attnmt: neural machine translation built around attention."""

from attnmt.api import Candidate, Translation, Translator, load
from attnmt.errors import AttnmtError

__version__ = "0.1.0"
__all__ = ["AttnmtError", "Candidate", "Translation", "Translator", "load", "__version__"]
