"""What the sections of the configuration share (attnmt.core.config, attnmt.core.task_sections):
the ``Section`` base, which forbids unknown keys, the subword settings, and test sets by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StringConstraints


class Section(BaseModel):
    # Strict: a value of the wrong type is an error naming its field, never converted (a beam of
    # true, "5" or 5.0 is not a beam of 5), and a number that is infinite or NaN is no setting.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


# YAML has no paths and no tuples: a path is written as a string, a pair as a list. These are the
# only two conversions a section makes.
ConfigPath = Annotated[Path, Strict(False)]


def _list_as_tuple(value):
    return tuple(value) if isinstance(value, list) else value


AsTuple = BeforeValidator(_list_as_tuple)  # Annotated[tuple[...], AsTuple]: a YAML list as a tuple, its items strict

# The sizes of a model (widths, layers), bounded far above any trained model (GPT-3: width 12,288,
# 96 layers) and low enough that no weight's element count overflows torch's storage size: a config
# asking for decoder_hidden 2**40 raised that RuntimeError before the weights' shapes were compared.
MAX_WIDTH = 1 << 24
Width = Annotated[int, Field(gt=0, le=MAX_WIDTH)]
Layers = Annotated[int, Field(gt=0, le=1000)]


class SubwordConfig(Section):
    type: Literal["bpe", "unigram", "char", "word"] = "bpe"
    vocab_size: int = Field(8000, gt=4, le=MAX_WIDTH)
    joint: bool = True
    character_coverage: float = Field(1.0, gt=0, le=1)
    max_sentences: int = Field(1_000_000, gt=0)  # sentences sampled to train sentencepiece
    lowercase: bool = False  # fold case, in training and encoding (sentencepiece's nmt_nfkc_cf rule)


SET_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# What turns attention scores into weights (model.attention_normalizer; attnmt.seq2seq.attention.normalize)
NORMALIZERS = ("softmax", "sparsemax", "entmax15")
# ... and for an RNN's attention, which can keep the attention each source word has had: constrained sparsemax
RNN_NORMALIZERS = (*NORMALIZERS, "csparsemax")
FERTILITY_BOUND = 2.0  # csparsemax's default bound (model.attention.fertility_bound)
SetName = Annotated[str, StringConstraints(pattern=SET_NAME, max_length=64)]


def named_sets(value, files: type[Section]):
    """Test sets by name, {name: files}; the files of one set alone are the set named "test"."""
    if isinstance(value, dict) and set(value) & set(files.model_fields):
        return {"test": value}
    return {} if value is None else value
