"""The data section of a translation (and speech) config: its corpora, subwords and batches.
Config (attnmt.core.config) uses it, and every name here is importable from there too.
"""

from __future__ import annotations


from pydantic import Field, field_validator, model_validator

from attnmt.core.sections import ConfigPath, Section, SetName, SubwordConfig, named_sets

# A tag of data.extra_train: a word in angle brackets, no spaces (sentencepiece keeps it one piece)
TAG_PATTERN = r"^<[^\s<>]{1,30}>$"


class CorpusFiles(Section):
    """Two line-aligned files (``src``, ``tgt``), one TSV file (``tsv``), or, for a dev or test
    set, ``split: N``: N pairs held out of the training corpus (see attnmt.data.splits)."""

    src: ConfigPath | None = None
    tgt: ConfigPath | None = None
    tsv: ConfigPath | None = None
    src_column: int = Field(0, ge=0)
    tgt_column: int = Field(1, ge=0)
    split: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def one_form(self):
        forms = [self.src is not None or self.tgt is not None, self.tsv is not None, self.split is not None]
        choices = "'src' and 'tgt' files, one 'tsv' file, or 'split: N' (N pairs held out of data.train)"
        if sum(forms) > 1:
            raise ValueError(f"give one of {choices}, not both")
        if sum(forms) == 0 or (forms[0] and (self.src is None or self.tgt is None)):
            raise ValueError(f"give {choices}")
        return self

    def as_spec(self) -> dict:
        if self.tsv is not None:
            return {"tsv": self.tsv, "src_column": self.src_column, "tgt_column": self.tgt_column}
        return {"src": self.src, "tgt": self.tgt}


SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # (attnmt.data.subwords: ids 0-3)


class ExtraCorpus(CorpusFiles):
    """A training corpus beside data.train (data.extra_train): back-translations, another domain.
    ``tag``: a token put before each of its sources, one subword piece of its own (Caswell et al.
    2019 tag back-translated sources so that the model tells them from genuine ones); ``repeat``:
    how many times its pairs are in each epoch (to weigh a small corpus against a large one)."""

    # in angle brackets: sentencepiece cuts a user-defined symbol out of any text that holds it, so a
    # tag "BT" would cut every "BT" of the corpora
    tag: str | None = Field(None, pattern=TAG_PATTERN)
    repeat: int = Field(1, ge=1, le=100)

    @model_validator(mode="after")
    def files_and_a_free_tag(self):
        if self.split is not None:
            raise ValueError("an extra training corpus is files ('split' is for the sets held out of data.train)")
        if self.tag in SPECIAL_PIECES:
            raise ValueError(f"tag {self.tag!r} is a special piece of every vocabulary ({', '.join(SPECIAL_PIECES)})")
        return self


GPU_BATCH_TOKENS = 4096  # data.batch_tokens on a GPU unless the config sets a batch size


class DataConfig(Section):
    train: CorpusFiles
    # more training corpora (translation): never held out of, each with its tag and repeat count
    extra_train: list[ExtraCorpus] = []
    dev: CorpusFiles | None = None
    # test sets by name: {name: files}, or the files of one, named "test"; scored at the end of training and by
    # `attnmt evaluate`
    test: dict[SetName, CorpusFiles] = {}
    subwords: SubwordConfig = SubwordConfig()
    max_length: int = Field(100, gt=0)  # pairs with more subwords on either side are dropped
    max_source_words: int | None = Field(None, gt=0)  # training pairs whose source has more words are dropped
    # training pairs whose longer side has more than this times the subwords of the shorter are dropped
    # (misaligned or truncated pairs: Moses's clean-corpus-n uses 9 words); None keeps them all
    max_length_ratio: float | None = Field(None, ge=1)
    batch_size: int = Field(64, gt=0)  # sentences per batch ...
    batch_tokens: int | None = Field(None, gt=0)  # ... or a budget of (padded) tokens per batch
    bucket_batches: int = Field(100, gt=0)  # batches per pool sorted by length
    # processes that encode the training corpora into the prepared store (attnmt.data.store; attnmt prepare
    # --workers N); 1: the main process alone. Speed only: the store is the same.
    workers: int = Field(1, ge=1, le=256)

    @field_validator("test", mode="before")
    @classmethod
    def one_test_set_is_named_test(cls, value):
        return named_sets(value, CorpusFiles)

    @model_validator(mode="after")
    def train_is_files(self):
        if self.train.split is not None:
            raise ValueError("data.train must be files ('split' is for the dev and test sets held out of it)")
        return self

    @property
    def held_out(self) -> dict[str, int]:
        """The sets held out of data.train, by name ("dev" and the test names), with their sizes."""
        sets = {"dev": self.dev} if self.dev is not None else {}
        sets.update(self.test)
        return {name: files.split for name, files in sets.items() if files.split is not None}

    @property
    def tags(self) -> list[str]:
        """The tags of the extra training corpora, each once, in order."""
        return list(dict.fromkeys(corpus.tag for corpus in self.extra_train if corpus.tag is not None))
