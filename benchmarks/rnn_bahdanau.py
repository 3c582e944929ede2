"""Benchmark "rnn-bahdanau": the command of benchmarks/run.py for configs/rnn-bahdanau.yaml.

    python benchmarks/rnn_bahdanau.py                 # 20 minutes, the reference run
    python benchmarks/rnn_bahdanau.py --minutes 3     # a quick check

Same as ``python benchmarks/run.py --config configs/rnn-bahdanau.yaml``; see run.py.
"""

import sys

from run import REPO, main

if __name__ == "__main__":
    main(["--config", str(REPO / "configs" / "rnn-bahdanau.yaml"), *sys.argv[1:]])
