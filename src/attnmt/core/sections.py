"""What the sections of the configuration share (attnmt.core.config, attnmt.core.task_sections):
the ``Section`` base, which forbids unknown keys, the subword settings, and test sets by name.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubwordConfig(Section):
    type: Literal["bpe", "unigram", "char", "word"] = "bpe"
    vocab_size: int = Field(8000, gt=4)
    joint: bool = True
    character_coverage: float = Field(1.0, gt=0, le=1)
    max_sentences: int = Field(1_000_000, gt=0)  # sentences sampled to train sentencepiece
    lowercase: bool = False  # fold case, in training and encoding (sentencepiece's nmt_nfkc_cf rule)


SET_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# What turns attention scores into weights (model.attention_normalizer; attnmt.seq2seq.attention.normalize)
NORMALIZERS = ("softmax", "sparsemax", "entmax15")
# ... and for an RNN's attention, which can keep the attention each source word has had: constrained sparsemax
RNN_NORMALIZERS = (*NORMALIZERS, "csparsemax")
FERTILITY_BOUND = 2.0  # csparsemax's default bound (model.fertility_bound)
SetName = Annotated[str, StringConstraints(pattern=SET_NAME, max_length=64)]


def named_sets(value, files: type[Section]):
    """Test sets by name, {name: files}; the files of one set alone are the set named "test"."""
    if isinstance(value, dict) and set(value) & set(files.model_fields):
        return {"test": value}
    return {} if value is None else value
