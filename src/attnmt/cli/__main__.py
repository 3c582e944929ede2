"""``python -m attnmt.cli ...`` (torchrun, tests and benchmarks run the command so)."""

import sys

from attnmt.cli import command_line

sys.exit(command_line())
