#!/usr/bin/env bash
# Everything one short GPU lease checks, in one command of under 10 minutes (docs/benchmarks.md, "On a GPU"):
#
#     OUT=/some/folder bash benchmarks/gpu_lease.sh [MINUTES]    # MINUTES of training a system (default 1.5)
#
#   1. python -m pytest -m gpu (every command on cuda, resume bit for bit, graphs and fast searches
#      against their textbook paths, a training step that waits for nothing), at most 260 s;
#   2. benchmarks/gpu_peers.sh MINUTES --batch-tokens 0 --attnmt-precision fp32: attnmt (batch 64) and OpenNMT-py 3.5.1
#      trained one after the other for MINUTES each, then decoding test_2016 (about 2 x (MINUTES + 0.7) min);
#   3. benchmarks/gpu_speed.py --first-calls on the attnmt model just trained: a process's first
#      decoding against the ones after it, then that first decoding (beam 5) under torch.profiler.
# Needs .whl/ and .peers-data/ carried beside the working tree (see gpu_peers.sh). Output under $OUT:
# five files (a device lease returns few), the peers' logs and results packed in peers.tar.gz.
#
#     OUT=/some/folder bash benchmarks/gpu_lease.sh transformer [STEPS]   # a second command (about 3 min)
#
# instead: the Transformer's graphs (benchmarks/gpu_speed.py --transformer --steps STEPS, default 600):
# its training with graphs against without, its decoding with the fixed cache as graphs against the
# growing cache and the reference search; output in $OUT/transformer.txt and transformer.json.
set -uo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-1.5}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-/tmp/gpu-lease}
# What the lease must have, checked before anything is installed or started (benchmarks/requirements.py:
# one message, exit status 2): a lease is too short to lose its first minutes to a missing file.
python3 - "$MINUTES" <<'CHECK' || exit
import sys

sys.path.insert(0, "benchmarks")
from requirements import any_file, check, files, program

peers = sys.argv[1] != "transformer"  # (the Transformer's graphs need neither OpenNMT-py nor its configurations)
multi30k = [f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("de", "en")]
configs = ["opennmt-rnn_de_en.yaml", "opennmt-translate_greedy.yaml", "opennmt-translate_beam5.yaml"]
carried = "carry it beside the working tree (the top of benchmarks/gpu_peers.sh says what it holds)"
check(
    "benchmarks/gpu_lease.sh",
    program("nvidia-smi", "the GPU's driver", advice="run it on a machine with an NVIDIA GPU"),
    any_file(".whl", "*.whl", "the wheels of what the machine lacks (OpenNMT-py 3.5.1, attnmt's dependencies)", carried),
    files(".peers-data", multi30k, "Multi30k", carried),
    files(".peers-data/peers", configs, "the peers' configurations", carried) if peers else None,
)
CHECK
mkdir -p "$OUT"
started=$(date +%s)
elapsed() { echo $(( $(date +%s) - started )); }

python3 -m pip install -q --no-index --no-deps --upgrade --target "$SITE" .whl/*.whl 2>&1 | grep -v "WARNING: Target directory"
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
git log -1 --format='attnmt at %h %s' 2>/dev/null | tee -a "$OUT/gpu.txt"

if [ "$MINUTES" = transformer ]; then
    timeout -k 5 570 python3 benchmarks/gpu_speed.py --data .peers-data --transformer --steps "${2:-600}" \
        --work /tmp/gpu-speed 2>&1 | tee "$OUT/transformer.txt"
    cp /tmp/gpu-speed/transformer.json "$OUT/" 2>/dev/null
    echo "done after $(elapsed) s"
    exit 0
fi

echo "== 1. pytest -m gpu ($(elapsed) s)"
# The searches' graphs first: if attnmt's own way of capturing them fails here, the rest of the lease
# runs with torch.cuda.graph's (ATTNMT_LEAN_CAPTURE=0) rather than losing the benchmark.
if ! timeout -k 10 90 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_fast_decoding.py \
        > "$OUT/pytest-gpu.txt" 2>&1; then
    tail -30 "$OUT/pytest-gpu.txt"
    export ATTNMT_LEAN_CAPTURE=0
    echo "the searches' graphs failed: ATTNMT_LEAN_CAPTURE=0 from here on" | tee -a "$OUT/pytest-gpu.txt"
fi
tail -1 "$OUT/pytest-gpu.txt"
timeout -k 10 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests --deselect tests/test_fast_decoding.py 2>&1 \
    | tail -25 | tee -a "$OUT/pytest-gpu.txt"

echo "== 2. peers ($(elapsed) s)"
PEERS_LIMIT=$(( 520 - $(elapsed) )) SITE="$SITE" OUT=/tmp/peers-out bash benchmarks/gpu_peers.sh "$MINUTES" \
    --batch-tokens 0 --attnmt-precision fp32 > "$OUT/peers.txt" 2>&1
sed -n '/^Multi30k de-en/,$p' "$OUT/peers.txt"
tail -2 "$OUT/peers.txt"
tar -czf "$OUT/peers.tar.gz" -C /tmp/peers-out peers 2>/dev/null

echo "== 3. first calls ($(elapsed) s)"
if [ -d /tmp/peers-cuda/attnmt/model ]; then
    echo "-- first calls" | tee -a "$OUT/first-calls.txt"
    timeout -k 5 60 python3 benchmarks/gpu_speed.py --data .peers-data \
        --first-calls /tmp/peers-cuda/attnmt/model 2>&1 | tee -a "$OUT/first-calls.txt"
    echo "-- the first call of a process, beam 5, profiled" | tee -a "$OUT/first-calls.txt"
    timeout -k 5 $(( 585 - $(elapsed) )) python3 benchmarks/gpu_speed.py --data .peers-data --profile-first \
        --first-calls /tmp/peers-cuda/attnmt/model >> "$OUT/first-calls.txt" 2>&1
    tail -45 "$OUT/first-calls.txt"
fi
echo "done after $(elapsed) s"
