"""The sections of the configuration that belong to one task: ``speech`` (task: speech), for
task: pairs the data and model sections that take the place of the translation ones, and
training.guided_alignment (task: translation). Config
(attnmt.core.config) uses them, and every name here is importable from there too.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from attnmt.core.sections import NORMALIZERS, ConfigPath, Section, SetName, SubwordConfig, Width, named_sets

# ------------------------------------------------------------------------------ task: speech


class SpecAugment(Section):
    """Masks on the normalised features during training (Park et al., 2019): up to
    ``freq_width`` mel bins ``freq_masks`` times, up to ``time_width`` frames ``time_masks`` times."""

    freq_masks: int = Field(2, ge=0)
    freq_width: int = Field(10, ge=0)
    time_masks: int = Field(2, ge=0)
    time_width: int = Field(20, ge=0)


class SpeechConfig(Section):
    """task: speech: the audio features and the speech encoder (attnmt.speech.audio, attnmt.speech.model)."""

    sample_rate: int = Field(16000, ge=4000, le=96000)  # audio is resampled to this rate
    n_mels: int = Field(80, gt=0, le=256)
    window_ms: float = Field(25.0, gt=0, le=200)
    hop_ms: float = Field(10.0, gt=0, le=100)
    max_seconds: float = Field(30.0, gt=0, le=600)  # longer files are skipped (training) or refused
    normalize: Literal["utterance", "global"] = "utterance"  # mean and variance of each bin
    subsample: Literal[4, 8] = 4  # frames per encoder state: 2 or 3 convolutions of stride 2
    conv_channels: Width = 32
    spec_augment: SpecAugment | None = None
    # Weight w of a CTC loss on the encoder states beside the decoder's (Kim et al. 2017): the
    # loss is (1 - w) cross-entropy + w CTC. CTC makes each state carry its own stretch of speech,
    # which helps the attention learn to align; 0 = no CTC. Needs about 2 states per character.
    ctc_weight: float = Field(0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def window_fits(self):
        if self.sample_rate * self.window_ms / 1000 < 16:
            raise ValueError(f"window_ms ({self.window_ms}) is under 16 samples at {self.sample_rate} Hz")
        return self


# ------------------------------------------------------------------------------ task: pairs


Column = int | str  # an index (from 0) or a name in the header line


class PairFiles(Section):
    """A TSV file of labelled sentence pairs: premise, hypothesis and label columns, each by index
    (from 0) or by its name in the header line."""

    tsv: ConfigPath
    premise_column: Column = 0
    hypothesis_column: Column = 1
    label_column: Column = 2
    header: bool | None = None  # the first line names the columns; default: when a column is given by name

    @model_validator(mode="after")
    def distinct_columns(self):
        columns = [self.premise_column, self.hypothesis_column, self.label_column]
        if any(isinstance(c, int) and c < 0 for c in columns):
            raise ValueError(f"column indices count from 0, got {columns}")
        if len(set(columns)) < 3:
            raise ValueError(f"premise, hypothesis and label need three different columns, got {columns}")
        if self.header is False and any(isinstance(c, str) for c in columns):
            raise ValueError("columns given by name need the header line (header: true)")
        return self

    @property
    def has_header(self) -> bool:
        return (
            self.header
            if self.header is not None
            else any(isinstance(c, str) for c in (self.premise_column, self.hypothesis_column, self.label_column))
        )


class PairDataConfig(Section):
    """The data of a sentence-pair classifier: TSV files of premise, hypothesis and label."""

    train: PairFiles
    dev: PairFiles | None = None
    test: dict[SetName, PairFiles] = {}  # by name, or the files of one set (named "test")
    labels: list[str] | None = Field(None, min_length=2)  # the classes in order; default: data.train's, sorted
    subwords: SubwordConfig = SubwordConfig(vocab_size=4000)  # one vocabulary (joint) for both sentences
    max_length: int = Field(100, gt=0)  # pairs with a longer sentence (subwords) are dropped
    batch_size: int = Field(32, gt=0)
    batch_tokens: int | None = Field(None, gt=0)
    bucket_batches: int = Field(100, gt=0)

    @field_validator("test", mode="before")
    @classmethod
    def one_test_set_is_named_test(cls, value):
        return named_sets(value, PairFiles)

    @model_validator(mode="after")
    def one_vocabulary(self):
        if not self.subwords.joint:
            raise ValueError("subwords.joint must be true: premise and hypothesis share one vocabulary")
        if self.labels is not None and len(set(self.labels)) < len(self.labels):
            raise ValueError(f"labels: each label once, got {self.labels}")
        return self

    @property
    def held_out(self) -> dict[str, int]:
        """No set is held out of data.train: dev and test sets are files."""
        return {}


class EmbeddingsConfig(Section):
    """Where the word embeddings of a pair model start: a trained attnmt translation model's (its
    subwords become the pair model's), or word2vec vectors trained (gensim) on a text corpus."""

    model: ConfigPath | None = None  # a trained attnmt translation model folder
    side: Literal["src", "tgt"] = "tgt"  # of ``model``: the embeddings of the side in the pairs' language
    word2vec: ConfigPath | None = None  # a text file (plain or gzip), one sentence a line
    epochs: int = Field(5, gt=0)  # word2vec
    window: int = Field(5, gt=0)  # word2vec
    freeze: bool = False  # keep them fixed during training (Parikh et al. fix theirs)

    @model_validator(mode="after")
    def one_source(self):
        if (self.model is None) == (self.word2vec is None):
            raise ValueError("give one of 'model' (a trained translation model folder) or 'word2vec' (a text corpus)")
        return self


class PairModelConfig(Section):
    """The decomposable attention model (Parikh et al. 2016): attend, compare, aggregate."""

    type: Literal["decomposable"] = "decomposable"
    embedding_size: Width = 100
    hidden_size: Width = 200  # of F, G, H; the embeddings are projected to it
    intra_attention: bool = False  # each sentence attends to itself first (with a distance bias)
    max_distance: int = Field(10, gt=0)  # intra-sentence attention: longer distances share one bias
    dropout: float = Field(0.2, ge=0, lt=1)
    embeddings: EmbeddingsConfig | None = None  # default: random
    # attend: the paper's e_ij = F(a_i)^T F(b_j) ("dot"), or centred cosines over a temperature with
    # Sinkhorn rounds ("one-to-one"), which align a changed word with its counterpart (docs/decomposable.md)
    attend: Literal["dot", "one-to-one"] = "dot"
    temperature: float = Field(0.1, gt=0)  # one-to-one: of the cosines
    sinkhorn_rounds: int = Field(5, ge=0)  # one-to-one: row and column normalisations
    # what turns the attend step's scores into weights, in both directions: softmax, or sparsemax
    # (Martins & Astudillo 2016) or 1.5-entmax (Peters et al. 2019), which give most words exactly 0
    attention_normalizer: Literal[NORMALIZERS] = "softmax"


# ------------------------------------------------------------------------------ task: translation


class GuidedAlignment(Section):
    """Guided alignment (Garg et al. 2019): the attention trained towards reference word links, by
    a cross-entropy beside the translation loss (attnmt.translation.guided_alignment)."""

    # A Pharaoh file ("i-j": source word i, target word j) of one line per line of data.train;
    # "eflomal": links that attnmt computes with eflomal on the training text (grow-diag-final); or
    # "self": links read from the attention of first_round, a model trained before (Garg et al. 2019)
    links: str = Field(min_length=1)
    weight: float = Field(0.05, gt=0)  # lambda: loss = cross-entropy + weight * alignment cross-entropy
    one_based: bool = False  # the file's indices start at 1
    units: Literal["words", "pieces"] = "words"  # what the file's indices count: words, or subword pieces
    # Transformer: the decoder layer (negative: from the last; default: the penultimate, or the only
    # one) and the heads of its cross-attention that are trained, averaged (Garg et al. 2019: one
    # head of the penultimate layer)
    layer: int | None = None
    heads: list[Annotated[int, Field(ge=0)]] = Field(default_factory=lambda: [0], min_length=1)
    # Transformer: train (and align with) the attention of a second decoder pass without the causal
    # mask, which sees the whole target, the word being aligned included (Garg et al. 2019's full
    # context); the translation still reads only the past
    full_context: bool = False
    # links: self: the folder of a trained translation model of the same direction (source -> target),
    # trained on the same data.train without guidance (the first round); its forced attention aligns
    # every training pair (attnmt.translation.align.align)
    first_round: ConfigPath | None = None
    # links: self, optional: a model of the reverse direction (target -> source) trained on the same pairs;
    # its links, turned around, and first_round's are symmetrized (grow-diag-final)
    first_round_backward: ConfigPath | None = None
    # links: self, optional: alignment layers of the first rounds (attnmt train-aligner), read
    # instead of their attention
    first_round_aligner: ConfigPath | None = None
    first_round_backward_aligner: ConfigPath | None = None
    # links: self with both directions: how they are combined (attnmt align --symmetrize); default
    # mean with the two aligners, grow-diag-final otherwise (the best of each on E4)
    symmetrize: Literal["intersection", "union", "grow-diag-final", "mean"] | None = None

    @model_validator(mode="after")
    def first_round_with_self(self):
        if self.links == "self" and self.first_round is None:
            raise ValueError(
                "links: self needs first_round: the folder of a translation model trained on "
                "data.train without guidance (the first round), whose attention gives the links"
            )
        for name in (
            "first_round",
            "first_round_backward",
            "first_round_aligner",
            "first_round_backward_aligner",
            "symmetrize",
        ):
            if self.links != "self" and getattr(self, name) is not None:
                raise ValueError(f"{name} is for links: self (links is {self.links!r})")
        if self.first_round_backward_aligner is not None and self.first_round_backward is None:
            raise ValueError("first_round_backward_aligner is the aligner of first_round_backward: give that too")
        if self.symmetrize is not None and self.first_round_backward is None:
            raise ValueError("symmetrize combines first_round and first_round_backward: give first_round_backward")
        return self

    @property
    def symmetrization(self) -> str:
        both_aligners = self.first_round_aligner is not None and self.first_round_backward_aligner is not None
        return self.symmetrize or ("mean" if both_aligners else "grow-diag-final")
