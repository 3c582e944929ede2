#!/usr/bin/env bash
# The experiments of docs/experiments.md with their default budgets, one after the other, each
# under the benchmark lock (one training at a time on the machine). Run from the checkout's root:
#     bash benchmarks/experiments.sh [e1 ... e7 e6-seeds e6-transformer e7-seeds e7-nn ...]   (default: e1-e5; in runs/experiments/)
# A finished run is skipped when this is run again; an interrupted one continues (--resume).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=runs/experiments
LOCK=/tmp/attnmt-bench.lock
GOLD=(--align-pairs runs/e4-data/hansards.pairs --align-gold runs/e4-data/hansards.gold --one-based)
LUONG=(--vary model.attention.type=luong-dot,luong-general,luong-concat --vary model.attention.input_feeding=true,false
       --variant bahdanau:model.attention=bahdanau --variant location:model.attention=location)
# E5: Luong et al.'s Table 4 (global: location, dot, general; local-m, local-p: dot, general) with the paper's D = 10, and a
# narrower D = 3; without input feeding, which E2 found better at this budget
NO_FEED=model.attention.input_feeding=false
LOCAL=(--variant "global-location:model.attention.type=luong-location,$NO_FEED"
       --variant "global-dot:model.attention.type=luong-dot,$NO_FEED"
       --variant "global-general:model.attention.type=luong-general,$NO_FEED"
       --variant "local-m-dot:model.attention.type=luong-dot,model.attention.local=local-m,$NO_FEED"
       --variant "local-m-general:model.attention.type=luong-general,model.attention.local=local-m,$NO_FEED"
       --variant "local-p-dot:model.attention.type=luong-dot,model.attention.local=local-p,$NO_FEED"
       --variant "local-p-general:model.attention.type=luong-general,model.attention.local=local-p,$NO_FEED"
       --variant "local-m-general-D3:model.attention.type=luong-general,model.attention.local=local-m,model.attention.window=3,$NO_FEED"
       --variant "local-p-general-D3:model.attention.type=luong-general,model.attention.local=local-p,model.attention.window=3,$NO_FEED")
# E5 at four times the steps (about 9 epochs of Multi30k, Luong et al. trained 10-12 of WMT): the four that matter
LOCAL_LONG=("${LOCAL[@]:2:4}"
            --variant "local-m-general:model.attention.type=luong-general,model.attention.local=local-m,$NO_FEED"
            --variant "local-p-general:model.attention.type=luong-general,model.attention.local=local-p,$NO_FEED")

# E6: the softmax of two scores (Bahdanau's, and Luong's general without input feeding) against sparsemax and
# 1.5-entmax (model.attention.normalizer)
SPARSE=()
for score in bahdanau luong-general; do
  feeding=$([ $score = bahdanau ] && echo "" || echo ",$NO_FEED")
  for normalizer in softmax sparsemax entmax15; do
    SPARSE+=(--variant "$score-$normalizer:model.attention.type=$score,model.attention.normalizer=$normalizer$feeding")
  done
done

# E6 with the Transformer: every head's softmax against 1.5-entmax (Correia et al. 2019) and sparsemax
SPARSE_TRANSFORMER=()
for normalizer in softmax sparsemax entmax15; do
  SPARSE_TRANSFORMER+=(--variant "transformer-$normalizer=configs/experiments/transformer.yaml:model.attention_normalizer=$normalizer")
done

# E7: coverage (Tu et al. 2016; See et al. 2017): Bahdanau's score with the coverage of each source word in it
# (plain, and divided by Tu et al.'s fertility with N = 2), and See et al.'s coverage loss (lambda 1) with and without it
COVERAGE=(--variant bahdanau:model.attention=bahdanau
          --variant coverage:model.attention=coverage
          --variant coverage-fertility:model.attention.type=coverage,model.attention.fertility=2
          --variant bahdanau-loss:model.attention=bahdanau,training.coverage_loss=1
          --variant coverage-loss:model.attention=coverage,training.coverage_loss=1)
# E7: Tu et al.'s NN-based coverage (a GRU's vector per source word, d = 10 as in their experiments) beside the three above
NN_COVERAGE=("${COVERAGE[@]:0:6}" --variant coverage-nn:model.attention.type=coverage,model.attention.dim=10)
# E7: the coverage loss with smaller lambdas from the start, and as See et al. trained it: in a short last phase,
# from the Bahdanau model of e7 (its subwords and weights), against the same steps without it
LOSS=(--variant bahdanau-loss-0.1:model.attention=bahdanau,training.coverage_loss=0.1
      --variant bahdanau-loss-0.01:model.attention=bahdanau,training.coverage_loss=0.01)
FROM=training.init_from=$PWD/runs/experiments/e7-de-en/bahdanau/seed42  # (relative: to the config's folder)
PHASE=(--variant "bahdanau-more:$FROM" --variant "bahdanau-then-loss:$FROM,training.coverage_loss=1")
# E7: constrained sparsemax (Malaviya et al. 2018) with constant fertilities 1, 2 and 3, against plain sparsemax
CONSTRAINED=(--variant bahdanau-sparsemax:model.attention.type=bahdanau,model.attention.normalizer=sparsemax)
for f in 1 2 3; do
  CONSTRAINED+=(--variant "bahdanau-csparsemax-$f:model.attention.type=bahdanau,model.attention.normalizer=csparsemax,model.attention.fertility_bound=$f")
done

run() {  # NAME ARGS...: one experiment, its date, commit and command logged beside its results
    local name=$1; shift
    mkdir -p "$OUT/$name"
    { date -u +"start %Y-%m-%dT%H:%M:%SZ commit $(git rev-parse --short HEAD)"; echo "attnmt compare $*";
      } | tee -a "$OUT/$name.log"
    flock "$LOCK" attnmt compare "$@" --out "$OUT/$name" --resume --no-progress 2>&1 | tee -a "$OUT/$name.log"
    date -u +"end %Y-%m-%dT%H:%M:%SZ" | tee -a "$OUT/$name.log"
}

[ $# -gt 0 ] || set -- e1 e2 e3 e4 e5
# What the experiments asked for need, checked before the first starts (benchmarks/requirements.py):
# one message naming what to install, and exit status 2.
python - "$@" <<'CHECK' || exit
import sys
from pathlib import Path

sys.path.insert(0, "benchmarks")
from requirements import SHARED_DATA, check, extra, files, program, trained_model

experiments = sys.argv[1:]
multi30k = [f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("de", "en", "fr")]
hansards = not Path("runs/e4-data/hansards.gold").is_file()  # the English-French corpus, tokenized as the gold set
gold = {"e2", "e4", "e5", "e6", "e7", "e7-nn", "e7-constrained"} & set(experiments)  # scored against it (GOLD)
check(
    "benchmarks/experiments.sh",
    program("attnmt", "runs each experiment (attnmt compare)", advice="pip install -e . (the README's install)"),
    program("flock", "one training at a time on the machine", apt="util-linux"),
    program("git", "the commit in each experiment's log", apt="git"),
    files(SHARED_DATA / "multi30k", multi30k, "Multi30k"),
    [
        files(SHARED_DATA / "alignment", ["hansards-enfr.src-tgt", "hansards-enfr.gold"], "the Hansards gold set"),
        extra("experiments", "sacremoses", "tokenizes the English-French corpus as the gold set is"),
    ]
    if hansards
    else None,
    extra("experiments", "eflomal", f"the statistical aligner beside attention ({', '.join(sorted(gold))})")
    if gold
    else None,
    trained_model("runs/experiments/e7-de-en/bahdanau/seed42", "the model e7-loss trains further", "run e7 first")
    if "e7-loss" in experiments
    else None,
)
CHECK
[ -f runs/e4-data/hansards.gold ] || python -m attnmt.translation.hansards runs/e4-data --data ../shared/data
for experiment in "$@"; do
  case $experiment in
    e1) run e1 configs/experiments/e1-de-en.yaml --variant none:model.attention=none \
          --variant bahdanau:model.attention=bahdanau --variant transformer=configs/experiments/transformer.yaml \
          --seeds 2 --join 2,3,4 ;;
    e2) run e2-de-en configs/experiments/e1-de-en.yaml "${LUONG[@]}" --steps 1000
        run e2-en-fr configs/experiments/e4-en-fr.yaml "${LUONG[@]}" --steps 500 "${GOLD[@]}" ;;  # forward only: 8 runs
    e3) run e3 configs/experiments/e3-short.yaml --variant bahdanau:model.attention=bahdanau \
          --variant location:model.attention=location --variant luong-general:model.attention=luong-general \
          --join 2,3,4 ;;
    e4) run e4 configs/experiments/e4-en-fr.yaml --variant bahdanau:model.attention=bahdanau \
          --variant luong-general:model.attention=luong-general --variant location:model.attention=location \
          --variant transformer=configs/experiments/transformer.yaml "${GOLD[@]}" --both-directions ;;
    e5-long) run e5-de-en-4000 configs/experiments/e1-de-en.yaml "${LOCAL_LONG[@]}" --steps 4000 ;;
    e5) run e5-de-en configs/experiments/e1-de-en.yaml "${LOCAL[@]}" --steps 1000
        run e5-en-fr configs/experiments/e4-en-fr.yaml "${LOCAL[@]}" --steps 500 "${GOLD[@]}" ;;  # forward only
    e6) run e6-de-en configs/experiments/e1-de-en.yaml "${SPARSE[@]}" --steps 1000
        run e6-en-fr configs/experiments/e4-en-fr.yaml "${SPARSE[@]}" --steps 500 "${GOLD[@]}" ;;  # forward only
    e6-transformer) run e6-de-en-transformer configs/experiments/e1-de-en.yaml "${SPARSE_TRANSFORMER[@]}" --steps 1000 ;;
    e6-transformer-long) run e6-de-en-transformer-4000 configs/experiments/e1-de-en.yaml "${SPARSE_TRANSFORMER[@]:0:2}" \
                           "${SPARSE_TRANSFORMER[@]:4:2}" --steps 4000 ;;  # softmax and entmax15
    e6-seeds) run e6-de-en configs/experiments/e1-de-en.yaml "${SPARSE[@]:0:6}" --steps 1000 --seeds 2 ;;  # bahdanau's
    e7) run e7-de-en configs/experiments/e1-de-en.yaml "${COVERAGE[@]}" --steps 1000 --join 2,3,4
        run e7-en-fr configs/experiments/e4-en-fr.yaml "${COVERAGE[@]}" --steps 500 "${GOLD[@]}" ;;  # forward only
    e7-seeds) run e7-de-en configs/experiments/e1-de-en.yaml "${COVERAGE[@]:0:6}" --steps 1000 --join 2,3,4 --seeds 2 ;;
    e7-nn) run e7-de-en configs/experiments/e1-de-en.yaml "${NN_COVERAGE[@]}" --steps 1000 --join 2,3,4 --seeds 2
           run e7-en-fr configs/experiments/e4-en-fr.yaml "${NN_COVERAGE[@]}" --steps 500 "${GOLD[@]}" ;;  # forward only
    e7-long) run e7-de-en-4000 configs/experiments/e1-de-en.yaml "${NN_COVERAGE[@]}" --steps 4000 --join 2,3,4 ;;  # E5-long's budget
    e7-long-seeds) run e7-de-en-4000 configs/experiments/e1-de-en.yaml "${NN_COVERAGE[@]}" --steps 4000 --join 2,3,4 --seeds 2 ;;
    e7-loss) run e7-de-en configs/experiments/e1-de-en.yaml "${LOSS[@]}" --steps 1000 --join 2,3,4
             run e7-de-en configs/experiments/e1-de-en.yaml "${PHASE[@]}" --steps 300 --join 2,3,4 ;;  # (its subwords)
    e7-constrained) run e7-de-en-constrained configs/experiments/e1-de-en.yaml "${CONSTRAINED[@]}" --steps 1000 --join 2,3,4
                    run e7-en-fr-constrained configs/experiments/e4-en-fr.yaml "${CONSTRAINED[@]}" --steps 500 "${GOLD[@]}" ;;
    e7-constrained-seeds) run e7-de-en-constrained configs/experiments/e1-de-en.yaml "${CONSTRAINED[@]}" --steps 1000 \
                            --join 2,3,4 --seeds 2 ;;
    *) echo "unknown experiment $experiment (e1, e2, e3, e4, e5, e5-long, e6, e6-seeds, e6-transformer," \
            "e6-transformer-long, e7, e7-seeds, e7-nn, e7-long, e7-long-seeds, e7-loss, e7-constrained or e7-constrained-seeds)" >&2; exit 2 ;;
  esac
done
