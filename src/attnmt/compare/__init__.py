"""``attnmt compare``: variants of one experiment trained on the same data, subwords and budget, one
after the other, then scored side by side (mean and spread over seeds).

    attnmt compare CONFIG --vary model.attention=none,bahdanau --seeds 2 --steps 2000 --out runs/cmp

Variants come from a grid (``--vary FIELD=V1,V2``, every combination) and/or a list
(``--variant NAME:FIELD=V,FIELD=V`` or ``--variant NAME=OVERRIDES.yaml``, a partial config merged
over CONFIG). Everything a variant sees is prepared once, in ``OUT/shared``:

    shared/train.tsv         the training pairs (data.train less the held-out dev and test pairs),
                             followed by the text of the --align-pairs (never their gold links)
    shared/splits/           the held-out sets of data.dev / data.test: {split: N}
    shared/spm/              the subwords, trained once on train.tsv and copied into every variant
    VARIANT/seedS/           one training (its experiment folder); results.json once scored
    VARIANT/seedS-reverse/   with both_directions: the variant trained target -> source
    results.json, results.md the tables; bleu-by-length.png, attention.png, alignment.png

A run whose results.json exists is not trained again; an unfinished one (a checkpoint without
results) continues with ``resume=True``; a run folder trained with another configuration is an
error, never silently reused. The results files read back (each run's results.json and
alignment.json, eflomal.json) are validated: a file that is not what compare wrote (invalid JSON,
a number that is not finite, a field of the wrong type) is an error naming the file and the field.

The package, by job (each module imports only those above it):

    variants.py     the grid and list of variants, their names and overrides, the base config
    runs.py         the settings of a comparison; its runs, the shared data, training, the lock
    tables.py       the results files read back and validated; results.json and results.md of --out
    scores.py       scoring each run (results.json, alignment.json) and the statistical aligner
    figures.py      the figures, drawn from the table
    comparison.py   Comparison (all of it, in order) and compare(), its Python API
"""

from attnmt.compare.comparison import Comparison, compare
from attnmt.compare.figures import (
    alignment_figure,
    attention_panels_figure,
    best_alignments,
    bleu_by_length_figure,
    draw_figures,
    example_attention,
)
from attnmt.compare.runs import LOCK, ComparisonSettings, Run, RunFolders, locked, read_align_pairs, swapped
from attnmt.compare.scores import (
    attention_alignment_scores,
    score_alignments,
    score_run,
    score_statistical,
    score_test_set,
    training_record,
)
from attnmt.compare.tables import (
    ALIGNMENT_COLUMNS,
    ALIGNMENT_ROWS,
    STATISTICAL_SCORES,
    RunRecord,
    alignment_markdown,
    bucket_label,
    checked_run_record,
    flat,
    read_results,
    results_markdown,
    spread,
    spread_of,
    summarize,
)
from attnmt.compare.variants import (
    FIELD,
    SHARED_DATA_FIELDS,
    BaseConfig,
    Variant,
    assignment,
    check_name,
    grid,
    merged,
    parse_variant,
)

__all__ = [
    "compare",
    "Comparison",
    "ComparisonSettings",
    "Variant",
    "BaseConfig",
    "Run",
    "RunFolders",
    "RunRecord",
    "grid",
    "parse_variant",
    "merged",
    "assignment",
    "check_name",
    "FIELD",
    "SHARED_DATA_FIELDS",
    "LOCK",
    "locked",
    "swapped",
    "read_align_pairs",
    "score_run",
    "score_test_set",
    "score_alignments",
    "score_statistical",
    "training_record",
    "attention_alignment_scores",
    "read_results",
    "checked_run_record",
    "ALIGNMENT_ROWS",
    "STATISTICAL_SCORES",
    "ALIGNMENT_COLUMNS",
    "flat",
    "bucket_label",
    "spread",
    "spread_of",
    "summarize",
    "results_markdown",
    "alignment_markdown",
    "bleu_by_length_figure",
    "attention_panels_figure",
    "alignment_figure",
    "best_alignments",
    "example_attention",
    "draw_figures",
]
