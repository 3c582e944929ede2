"""``python -m attnmt.cli ...`` (torchrun, tests and benchmarks run the command so)."""

import sys

from attnmt.cli import main

sys.exit(main())
