#!/usr/bin/env bash
# benchmarks/peers.py --device cuda on a GPU machine that has no network (docs/benchmarks.md, "On a GPU").
#
#     bash benchmarks/gpu_peers.sh [MINUTES] [more peers.py options]    # MINUTES of training a run (default 2)
#
# Reads, beside the repository (both git-ignored, carried to the machine):
#   .whl/         wheels of what the machine lacks: OpenNMT-py 3.5.1 and what it imports at start-up
#                 (configargparse, pyonmttok, rapidfuzz, pyahocorasick), attnmt's dependencies (pydantic,
#                 fastapi, uvicorn, soundfile, soxr, jiwer, ...); installed with --no-deps into $SITE
#   .peers-data/  the Multi30k files (train, val, test_2016_flickr .de/.en .gz) and, in peers/, the
#                 configurations of ../shared/peers
# attnmt runs from src/ (PYTHONPATH), not installed. Three trainings of MINUTES each (attnmt, attnmt with
# token batches, OpenNMT-py) and their decoding: about 3 x (MINUTES + 0.7) minutes in all. The run is
# stopped after $PEERS_LIMIT seconds (default 570: a 10-minute command), keeping what it measured.
# Results and logs: $WORK (default /tmp/peers-cuda), copied to $OUT/peers when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-2}
[ $# -gt 0 ] && shift
SITE=${SITE:-/tmp/site}
WORK=${WORK:-/tmp/peers-cuda}
LIMIT=${PEERS_LIMIT:-570}
PYTHON=${PYTHON:-python3}

# What the machine must have, checked before anything is installed or started (benchmarks/requirements.py:
# one message, exit status 2); peers.py checks the rest (CUDA, OpenNMT-py) once the wheels are in.
"$PYTHON" - <<'CHECK' || exit
import sys

sys.path.insert(0, "benchmarks")
from requirements import any_file, check, files, program

multi30k = [f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("de", "en")]
configs = ["opennmt-rnn_de_en.yaml", "opennmt-translate_greedy.yaml", "opennmt-translate_beam5.yaml"]
carried = "carry it beside the working tree (the top of benchmarks/gpu_peers.sh says what it holds)"
check(
    "benchmarks/gpu_peers.sh",
    program("nvidia-smi", "samples the GPU's utilisation and memory", advice="run it on a machine with an NVIDIA GPU"),
    any_file(".whl", "*.whl", "the wheels of what the machine lacks (OpenNMT-py 3.5.1, attnmt's dependencies)", carried),
    files(".peers-data", multi30k, "Multi30k", carried),
    files(".peers-data/peers", configs, "the peers' configurations", carried),
)
CHECK
mkdir -p "$WORK"
started=$(date +%s)
"$PYTHON" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" .whl/*.whl 2>&1 | grep -v "WARNING: Target directory"
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
echo "wheels installed into $SITE in $(( $(date +%s) - started )) s"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PYTHON" -c "import sys, torch, attnmt; print('python', sys.version.split()[0], '| torch', torch.__version__, \
'| CUDA', torch.version.cuda, '| cuDNN', torch.backends.cudnn.version(), '| attnmt', attnmt.__version__, \
'from', attnmt.__file__)"

timeout -k 20 "$LIMIT" "$PYTHON" benchmarks/peers.py --device cuda --minutes "$MINUTES" --data .peers-data \
    --peer-configs .peers-data/peers --work "$WORK" "$@" 2>&1 | tee "$WORK/peers.out"
status=${PIPESTATUS[0]}
echo "peers.py: exit status $status after $(( $(date +%s) - started )) s"

if [ -n "${OUT:-}" ]; then  # the small files only: no checkpoint, no data
    mkdir -p "$OUT/peers"
    cp -r "$WORK/logs" "$WORK/configs" "$OUT/peers/" 2>/dev/null
    cp "$WORK"/results.json "$WORK"/results.partial.json "$WORK/peers.out" "$OUT/peers/" 2>/dev/null
    for run in attnmt attnmt-tokens; do
        if [ -d "$WORK/$run" ]; then
            mkdir -p "$OUT/peers/$run"
            cp "$WORK/$run"/results.json "$WORK/$run"/config.yaml "$WORK/$run"/*.en "$WORK/$run/model"/metrics.jsonl \
                "$WORK/$run/model"/*.en "$OUT/peers/$run/" 2>/dev/null
        fi
    done
    [ -d "$WORK/onmt" ] && mkdir -p "$OUT/peers/onmt" && cp "$WORK/onmt"/*.en "$WORK/onmt/train.log" "$OUT/peers/onmt/" 2>/dev/null
    echo "copied to $OUT/peers"
fi
exit "$status"
