"""A trained sequence-to-sequence model ready to use: its vocabularies, its decoding settings, and what it
gives (translations with their attention, the beam search tree, the trace of every decoder step, a Transformer's
layers and heads). Translation models load as this Translator; speech models as attnmt.speech.recognizer.Recognizer."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
from pydantic import ValidationError

from attnmt.core import speed
from attnmt.core.config import MAX_CONSTRAINTS, Config, DecodingConfig, Sampling
from attnmt.core.devices import to_numpy
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import inference_device, inside_folder, load_model, model_config, weights_path
from attnmt.core.progress import phase_bar
from attnmt.data import splits
from attnmt.data.batching import forced_batches, inference_batches, make_batch
from attnmt.data.subwords import BOS, EOS, load_subwords, subword_paths, valid_text
from attnmt.seq2seq import build_model
from attnmt.seq2seq.constraints import phrases_of
from attnmt.seq2seq.ensemble import Ensemble
from attnmt.seq2seq.heads import mask_heads, parse_heads
from attnmt.seq2seq.prefix import Prefixes, Spelling, prefixes_of
from attnmt.seq2seq.quantize import QUANTIZE, quantize_int8
from attnmt.seq2seq.results import Aligner, Candidate, ScoredTranslation, Translation, links_of
from attnmt.seq2seq.search import decode
from attnmt.seq2seq.shortlist import FILE_NAME as SHORTLIST_FILE
from attnmt.seq2seq.shortlist import Shortlist, load_shortlist


def within(phrases: list[tuple[int, ...]], max_tokens: int) -> list[tuple[int, ...]]:
    """The first of a text's constraint ``phrases`` (their pieces) that fit MAX_CONSTRAINTS phrases and
    ``max_tokens`` pieces in all: the bounds of the server's requests, which a line of the command line
    gets too (one line of 2,000 phrases took 218 s)."""
    kept, pieces = [], 0
    for phrase in phrases[:MAX_CONSTRAINTS]:
        if pieces + len(phrase) > max_tokens:
            break
        kept.append(phrase)
        pieces += len(phrase)
    return kept


class Translator:
    """A trained model with its vocabularies and decoding settings."""

    inputs = "text"  # what its requests carry (the server and the CLI check it before any work)
    what = "a translation model"  # in messages

    def __init__(
        self,
        folder: str | Path,
        checkpoint: str = "best",
        quantize: str | None = None,
        device: str | torch.device = "cpu",
    ):
        if quantize not in QUANTIZE:
            raise AttnmtError(f"quantize must be one of {', '.join(map(repr, QUANTIZE))}, got {quantize!r}")
        self.device = inference_device(device)
        if quantize == "int8" and self.device.type != "cpu":
            raise AttnmtError(f"quantize='int8' is for CPUs; on {self.device} use quantize=None or 'bf16'")
        self.folder = Path(folder)
        self.config: Config = model_config(self.folder)
        self.src_subwords, self.tgt_subwords = self._vocabularies()
        self.weights = weights_path(self.folder, checkpoint)  # the file the model's weights come from
        self.model = load_model(self._build, self.weights, self.device)
        self.quantize = quantize
        if quantize == "int8":
            self.model = quantize_int8(self.model)
        if quantize == "bf16":  # the output layer's product (the largest of a decoder step) in bfloat16
            self.model.generator.compute_dtype = torch.bfloat16
            if self.device.type == "cpu" and not speed.cpu_has_bf16():
                warnings.warn(
                    "quantize='bf16' (--bf16) on a CPU without bf16 units (AVX512-BF16 or AMX): the "
                    "product is emulated and slower than float32 here",
                    stacklevel=3,
                )
        self.attention_window = self.config.decoding.attention_window
        # Where word links come from (align_outputs, Translation.alignment): None, the attention;
        # an aligner of its own (attnmt.translation.aligner.OutputAligner: attnmt.load sets the
        # alignment layer of MODEL/aligner when it was trained on these weights; else, for a
        # Transformer trained by guided alignment, attnmt.translation.align.GuidedAttentionLinks)
        self.aligner: Aligner | None = None
        # translate()'s shortlist when it is given none (None: the config's decoding.shortlist)
        self.shortlist: bool | str | Path | None = None
        self._shortlists: dict[Path, Shortlist] = {}  # the tables read so far, by file
        self._spelling: Spelling | None = None  # the target pieces' texts, for prefixes that end inside a word
        self.ensembled: list[Path] = []  # the folders of the models it decodes with (ensemble)

    @property
    def attention_window(self) -> tuple[int, int] | None:
        """(left, right): each decoder step attends only within that many source positions of the
        median of the previous step's weights (as in Chorowski et al. 2014); None: over the whole source.
        The config's decoding.attention_window unless set here; RNN attention only. Setting it
        changes the decoding settings (config.decoding), which every decoding call passes on:
        never the model."""
        return self.config.decoding.attention_window

    @attention_window.setter
    def attention_window(self, window: tuple[int, int] | None):
        decoder = getattr(self.model, "decoder", None)  # (read only: an RNN decoder and its attention)
        if window is not None and getattr(decoder, "attention", None) is None:
            raise AttnmtError(
                f"{self.folder}: an attention window is for RNN decoders with attention; this model "
                f"is a {self.config.model.type} with attention {getattr(self.config.model, 'attention', 'multi-head')}"
            )
        try:
            decoding = DecodingConfig.model_validate({**self.config.decoding.model_dump(), "attention_window": window})
        except ValidationError as error:
            raise AttnmtError(
                f"attention window {window!r}: give two whole numbers >= 0 (left, right), "
                f"or None ({error.errors()[0]['msg']})"
            ) from None
        self.config = self.config.model_copy(update={"decoding": decoding})

    def set_decoding(self, **settings):
        """Changes decoding settings for every later call: fields of config.decoding (beam,
        length_penalty, coverage_penalty, max_length_ratio, ...), validated as in a config; an unknown
        field or a wrong value is an AttnmtError naming it. The model is never changed."""
        if "attention_window" in settings:
            self.attention_window = settings.pop("attention_window")
        if settings.get("coverage_penalty") and getattr(getattr(self.model, "decoder", None), "attention", 1) is None:
            raise AttnmtError(
                f"{self.folder}: a coverage penalty sums the attention weights; this model has attention: none"
            )
        try:
            decoding = DecodingConfig.model_validate({**self.config.decoding.model_dump(), **settings})
        except ValidationError as error:
            field = ".".join(map(str, error.errors()[0]["loc"])) or "decoding"
            raise AttnmtError(f"decoding.{field}: {error.errors()[0]['msg']}") from None
        self.config = self.config.model_copy(update={"decoding": decoding})

    def mask_heads(self, heads: str | list[tuple[str, int, int]]):
        """Switches these attention heads of a Transformer off for every later call, the others on
        (attnmt.seq2seq.heads): "cross.2.0,encoder.0.3" or (kind, layer, head) tuples; "": all on."""
        mask_heads(self.model, parse_heads(heads) if isinstance(heads, str) else heads)

    def __repr__(self) -> str:
        model = self.config.model
        kind = (
            model.transformer_name
            if model.type == "transformer"
            else f"{model.rnn_type} {model.attention_name} attention"
        )
        parameters = sum(p.numel() for p in self.model.parameters())
        sizes = "/".join("-" if v is None else f"{len(v):,}" for v in (self.src_subwords, self.tgt_subwords))
        return (
            f"<{type(self).__name__} {self.folder}: {kind}, {parameters:,} parameters, vocabularies {sizes}, "
            f"beam {self.config.decoding.beam}, {self.device}{', ' + self.quantize if self.quantize else ''}>"
        )

    def _vocabularies(self):
        if self.config.task != "translation":
            raise AttnmtError(
                f"{self.folder}: a model of task {self.config.task}, not a translation model "
                "(attnmt.load gives the right class)"
            )
        joint = self.config.data.subwords.joint
        for path in subword_paths(self.folder, joint):
            inside_folder(self.folder, path)
        return load_subwords(self.folder, joint)

    def _build(self):
        return build_model(self.config.model, len(self.src_subwords), len(self.tgt_subwords))

    @property
    def test_sets(self) -> dict:
        """The test sets of the model's config (data.test), name -> files; a set held out of the
        training corpus is the TSV file in the folder's splits/."""
        sets = {name: splits.resolved(files, name, self.folder) for name, files in self.config.data.test.items()}
        for name, files in self.config.data.test.items():
            if files.split is not None:
                inside_folder(self.folder, sets[name].tsv)
        return sets

    def describe(self) -> dict:
        """What the model is, as the server's /models says it: the fields of its type, the others None."""
        m, dc = self.config.model, self.config.decoding
        none = dict.fromkeys(
            "rnn_type input_feeding local_attention local_window attention_normalizer"
            " coverage_fertility coverage_dim fertility_bound decoder_hidden d_model heads"
            " feed_forward norm".split()
        )
        common = dict(
            type=m.type,
            encoder_layers=m.encoder_layers,
            decoder_layers=m.decoder_layers,
            beam=dc.beam,
            length_penalty=dc.length_penalty,
            coverage_penalty=dc.coverage_penalty,
        )
        if m.type == "transformer":
            return {
                **common,
                **none,
                "attention": "multi-head",
                "d_model": m.d_model,
                "heads": m.heads,
                "feed_forward": m.feed_forward,
                "norm": m.norm,
                "attention_normalizer": m.attention_normalizer,
            }
        local = {
            "local_attention": m.local_attention,
            "local_window": None if m.local_attention == "none" else m.local_window,
            "attention_normalizer": None if m.attention == "none" else m.attention_normalizer,
            **{
                key: getattr(m, key) if m.attention == "coverage" else None
                for key in ("coverage_fertility", "coverage_dim")
            },
            "fertility_bound": m.fertility_bound if m.attention_normalizer == "csparsemax" else None,
        }
        return {
            **common,
            **none,
            "attention": m.attention,
            "rnn_type": m.rnn_type,
            "input_feeding": m.input_feeding,
            **local,
            "decoder_hidden": m.decoder_hidden,
        }

    def files_of_test_set(self, files) -> list[Path]:
        """Every file a test set of the config reads (attnmt.data.test_sets keeps them inside the folder)."""
        return [path for path in (files.src, files.tgt, files.tsv) if path is not None]

    def translate(
        self,
        texts: list[str],
        beam: int | None = None,
        n_best: int = 1,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        progress: str | None = None,
        shortlist: bool | str | Path | None = None,
        align: bool = False,
        sampling: Sampling | dict | None = None,
        prefix: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        tag: str | list[str] | None = None,
    ) -> list[Translation]:
        """Translates each text; the output has one Translation per input, in order.

        Empty (or whitespace-only) inputs give an empty translation without running the model.
        ``max_tokens``: a text of more subword pieces is cut to its first ``max_tokens`` (its
        Translation says ``truncated``), so that no line can ask for unbounded work; so is its
        prefix, and its constraints to the first phrases within MAX_CONSTRAINTS and ``max_tokens``
        pieces in all (its Translation's ``cut`` says "prefix", "constraints").
        ``progress``: the description of a progress bar over the texts (on stderr, on a terminal only).
        ``shortlist``: the output layer restricted to each batch's likely pieces (attnmt.translation.shortlist):
        True, the folder's shortlist.json; a path, that table; False, none; None, as the config's
        decoding.shortlist says (unless ``Translator.shortlist`` is set).
        ``align``: every candidate's word links filled in (align_outputs); without it,
        ``Translation.alignment`` finds the best candidate's when asked.
        ``sampling``: each translation drawn from the model instead of searched for
        (attnmt.core.config.Sampling, or a dict of its fields: top_k, top_p, temperature, seed); one
        candidate each, beam 1.
        ``prefix``: for each text, the start its translations must have ("": none); the search
        continues it, and completes a last word left unfinished (attnmt.seq2seq.prefix).
        ``constraints``: for each text, words or phrases its translations must contain ([]: none), by
        beam search with dynamic beam allocation (attnmt.seq2seq.constraints: no sampling nor shortlist;
        outputs that could not fit them all within the length limit come after those that did).
        ``tag``: a tag of the model's data.extra_train put before every source, or one per text (""
        or None: none); see source_ids. The Translation's source_tokens begin with it.
        """
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of strings; wrap a single sentence in a list")
        dc = self.config.decoding
        beam, sampling = self._search(beam, n_best, sampling)
        generator = self._generator(sampling)
        table = self.shortlist_table(self.shortlist if shortlist is None else shortlist)
        texts = [valid_text(text) for text in texts]
        prefixes = self._prefixes(texts, prefix, max_tokens)
        phrases, cut_phrases = self._constraints(texts, constraints, max_tokens)
        cut_prefixes = frozenset() if prefixes is None else prefixes.cut
        src_ids = self.source_ids(texts, tag)
        truncated = {i for i, ids in enumerate(src_ids) if max_tokens is not None and len(ids) > max_tokens}
        for i in truncated:
            src_ids[i] = src_ids[i][:max_tokens]
        results = [Translation(text, [], [Candidate("", [], 0.0, None)]) for text in texts]
        # Whitespace-only as Python sees it: sentencepiece keeps some Unicode spaces (U+0085) as pieces.
        todo = [i for i, ids in enumerate(src_ids) if ids and texts[i].strip()]
        with phase_bar(len(todo), progress or "", enabled=progress is not None) as bar:
            for batch_indices in inference_batches([len(src_ids[i]) for i in todo], batch_size or dc.batch_size):
                indices = [todo[j] for j in batch_indices]
                batch = make_batch([src_ids[i] for i in indices]).to(self.device)
                with torch.inference_mode():
                    decoded = decode(
                        self.model,
                        batch.src,
                        batch.src_lengths,
                        dc,
                        beam=beam,
                        n_best=n_best,
                        shortlist=table,
                        sampling=sampling,
                        generator=generator,
                        prefixes=None if prefixes is None else prefixes.of(indices),
                        constraints=None if phrases is None else [phrases[i] for i in indices],
                    )
                for i, hypotheses in zip(indices, decoded):
                    results[i] = Translation(
                        texts[i],
                        self.src_subwords.pieces(src_ids[i] + [EOS]),
                        [self.candidate(h) for h in hypotheses],
                        i in truncated,
                        self.aligner,
                        tagged=self._tagged(src_ids[i]),
                        cut=("prefix",) * (i in cut_prefixes) + ("constraints",) * (i in cut_phrases),
                    )
                bar.update(len(indices))
        return self.align_outputs(results) if align else results

    def _search(self, beam: int | None, n_best: int, sampling: Sampling | dict | None) -> tuple[int, Sampling | None]:
        """The beam and sampling of a translate() call, checked (sampling: beam 1 unless given)."""
        sampling = Sampling.model_validate(sampling) if sampling is not None else None
        beam = (1 if sampling is not None else self.config.decoding.beam) if beam is None else beam
        if beam < 1 or n_best < 1 or n_best > beam:
            raise ValueError(f"need 1 <= n_best <= beam (got beam {beam}, n_best {n_best})")
        if sampling is not None and beam != 1:
            raise ValueError(f"sampling draws one translation per text: beam must be 1 (got {beam})")
        return beam, sampling

    def _prefixes(self, texts: list[str], prefix: list[str] | None, max_tokens: int | None = None) -> Prefixes | None:
        """What each text's translations begin with (attnmt.seq2seq.prefix.prefixes_of); None where none has one."""
        if prefix is None:
            return None
        if self._spelling is None:
            self._spelling = Spelling(self.tgt_subwords.spellings())
        return prefixes_of(self.tgt_subwords, texts, prefix, self._spelling, max_tokens)

    def _constraints(self, texts: list[str], constraints: list[list[str]] | None, max_tokens: int | None):
        """Each text's constraint phrases (attnmt.seq2seq.constraints.phrases_of), with ``max_tokens``
        only the first that fit (``within``); None where no text has one. And the texts whose phrases
        were cut."""
        phrases = None if constraints is None else phrases_of(self.tgt_subwords, texts, constraints)
        if phrases is None or max_tokens is None:
            return phrases, set()
        kept = [within(text_phrases, max_tokens) for text_phrases in phrases]
        return kept if any(kept) else None, {i for i, (a, b) in enumerate(zip(phrases, kept)) if len(a) > len(b)}

    def source_ids(self, texts: list[str], tag: str | list[str] | None = None) -> list[list[int]]:
        """The subword ids of each text, after its tag's: ``tag`` one of the model's tags (``tags``)
        for every text, or one per text ("" or None: none). A tag is a piece of its own, which
        training put before the sources of its data.extra_train corpus (attnmt.translation.prepare):
        the text "<BT> ..." would be cut into other pieces, so it is given here, never in the text."""
        tags = [tag] * len(texts) if tag is None or isinstance(tag, str) else list(tag)
        if len(tags) != len(texts):
            raise AttnmtError(f"{len(tags)} tags for {len(texts)} texts: give one tag, or one per text")
        unknown = sorted({t for t in tags if t and t not in self.tags})
        if unknown:
            known = f"its tags are {', '.join(self.tags)}" if self.tags else "it was trained without tags"
            raise AttnmtError(f"tag {unknown[0]!r} is not a tag of {self.folder} ({known}: data.extra_train's tag)")
        ids = {t: self.src_subwords.sp.piece_to_id(t) for t in set(tags) if t}
        return [[ids[t], *row] if t else row for t, row in zip(tags, self.src_subwords.encode(texts))]

    @property
    def tags(self) -> list[str]:
        """The tags the model was trained with (data.extra_train's), which source_ids can put before a text."""
        return getattr(self.config.data, "tags", [])

    def _tagged(self, ids: list[int]) -> bool:
        """Whether these source ids begin with a tag (their first piece is one of the model's tags)."""
        return bool(ids and self.tags) and self.src_subwords.pieces(ids[:1])[0] in self.tags

    def score(
        self,
        sources: list[str],
        translations: list[str],
        batch_size: int | None = None,
        max_tokens: int | None = None,
        progress: str | None = None,
        tag: str | list[str] | None = None,
    ) -> list[ScoredTranslation]:
        """How probable the model finds each given translation of its source, by forced decoding:
        log p(y | x) = sum_t log p(y_t | y_<t, x) over the translation's subword pieces and the end
        of sentence, each as a search scores the token it writes (no length penalty, no shortlist).
        One ScoredTranslation per pair, in order. Low scores per token point at pairs that are not
        translations of each other (corpus filtering); the scores also rerank other systems'
        outputs, and their mean is the model's perplexity on a test set. An ensemble
        (``ensemble``) scores with the mean of its members' distributions.

        ``max_tokens``: AttnmtError for a pair with more subword pieces on either side (a pair cut
        short would get another translation's score). ``progress``, ``tag``: as in translate().
        """
        if isinstance(sources, str) or isinstance(translations, str):
            raise TypeError("score() takes two lists of strings: the sources and their translations")
        if self.inputs != "text":
            raise AttnmtError(f"{self.folder}: score() scores translations of text; this is {self.what}")
        if len(sources) != len(translations):
            raise AttnmtError(f"numbers of sentences differ: {len(sources)} sources, {len(translations)} translations")
        sources, translations = [valid_text(t) for t in sources], [valid_text(t) for t in translations]
        src_ids, tgt_ids = self.source_ids(sources, tag), self.tgt_subwords.encode(translations)
        for side, ids in (("source", src_ids), ("translation", tgt_ids)):
            long = [i for i, pieces in enumerate(ids) if max_tokens is not None and len(pieces) > max_tokens]
            if long:
                raise AttnmtError(
                    f"the {side} of pair {long[0] + 1} (counting from 1) has {len(ids[long[0]])} "
                    f"subword tokens, more than {max_tokens} ({len(long)} such pair(s)): a translation "
                    "is scored whole or not at all"
                )
        results: list[ScoredTranslation | None] = [None] * len(sources)
        window = self.attention_window
        with phase_bar(len(sources), progress or "", enabled=progress is not None) as bar:
            for indices, batch in forced_batches(
                src_ids, tgt_ids, batch_size or self.config.decoding.batch_size, self.device
            ):
                with torch.inference_mode():
                    log_probs = to_numpy(
                        self.model.target_log_probs(
                            batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, window
                        ).float()
                    )
                for row, i in enumerate(indices):
                    tokens = self.tgt_subwords.pieces(tgt_ids[i] + [EOS])
                    results[i] = ScoredTranslation(
                        sources[i], translations[i], tokens, log_probs[row, : len(tokens)].copy()
                    )
                bar.update(len(indices))
        return results

    def ensemble(self, others: list[Translator]):
        """From now on this model searches together with ``others`` (attnmt.seq2seq.ensemble: at every
        step the mean of their next-token distributions), in translate() and what calls it. They
        must read and write the same subword pieces (the same sentencepiece models) and run on the
        same device; this model's decoding settings, vocabularies and aligner stay."""
        for other in others:
            if other.inputs != "text" or not isinstance(other, Translator):
                raise AttnmtError(f"{other.folder}: an ensemble is of translation models; this is {other.what}")
            for side, mine, theirs in (
                ("source", self.src_subwords, other.src_subwords),
                ("target", self.tgt_subwords, other.tgt_subwords),
            ):
                if mine.vocabulary() != theirs.vocabulary():
                    raise AttnmtError(
                        f"{other.folder}: its {side} subword model ({theirs.path}) has other pieces "
                        f"than that of {self.folder} ({mine.path}): an ensemble's models must share "
                        "their subwords (train them on the same data and settings, or copy one spm "
                        "folder into the others' experiment_dir before training)"
                    )
            if other.device != self.device:
                raise AttnmtError(
                    f"{other.folder} runs on {other.device}, {self.folder} on {self.device}: an "
                    "ensemble runs on one device"
                )
        members = self.model.members if isinstance(self.model, Ensemble) else [self.model]
        self.model = Ensemble([*members, *(other.model for other in others)])
        self.ensembled = [*self.ensembled, *(other.folder for other in others)]
        if self.aligner is not None:  # (an alignment layer, or guided heads, reads one model's states)
            warnings.warn(
                f"the word links of an ensemble come from its attention, not from {self.aligner!r}, "
                f"which reads the model of {self.folder} alone",
                stacklevel=2,
            )
            self.aligner = None

    def _generator(self, sampling: Sampling | None) -> torch.Generator | None:
        """The random numbers of a call's sampling: seeded on the model's device if it has a seed,
        else None (torch's own generator, a new draw each call)."""
        if sampling is None or sampling.seed is None:
            return None
        return torch.Generator(self.device).manual_seed(sampling.seed)

    def align_outputs(self, translations: list[Translation], n_best: int | None = None, **options) -> list[Translation]:
        """``translations`` with the word links of each of their first ``n_best`` candidates (default:
        all) filled in: from ``self.aligner`` if set (the pairs aligned in batches), else from each
        candidate's attention. ``options``: method ("argmax" or "threshold"; by default argmax for
        the attention, threshold for an aligner) and threshold.
        Candidates whose source or output is empty get no links."""
        options = {name: value for name, value in options.items() if value is not None}  # None: the default

        def chosen(t: Translation) -> list[Candidate]:
            return t.candidates[:n_best]

        def has_words(t: Translation, c: Candidate) -> bool:
            return bool(t.source.strip() and c.text.strip())

        pairs = [(t.source, c.text) for t in translations for c in chosen(t) if has_words(t, c)]
        if self.aligner is not None and pairs:
            found = iter(self.aligner([s for s, _ in pairs], [o for _, o in pairs], **options))
        else:
            found = iter([links_of(t, c, **options) for t in translations for c in chosen(t) if has_words(t, c)])
        return [
            replace(
                t,
                candidates=[replace(c, alignment=next(found) if has_words(t, c) else []) for c in chosen(t)]
                + t.candidates[len(chosen(t)) :],
            )
            for t in translations
        ]

    def shortlist_table(self, shortlist: bool | str | Path | None) -> Shortlist | None:
        """The table that ``translate(shortlist=...)`` means, read once."""
        if shortlist is None:  # the config's: a file of the model folder, which must stay inside it
            name = self.config.decoding.shortlist
            path = None if name is None else inside_folder(self.folder, self.folder / name)
        elif shortlist is True:  # the folder's own (--shortlist without FILE): inside it too
            path = inside_folder(self.folder, self.folder / SHORTLIST_FILE)
        else:  # a table given by the caller: theirs, read where it is
            path = Path(shortlist) if shortlist else None
        if path is None:
            return None
        if path not in self._shortlists:
            self._shortlists[path] = load_shortlist(path, self.src_subwords, self.tgt_subwords).to(self.device)
        return self._shortlists[path]

    def beam_tree(
        self,
        text: str,
        beam: int | None = None,
        stop: Callable[[], bool] | None = None,
        prefix: str = "",
        tag: str = "",
        constraints: list[str] | None = None,
    ) -> tuple[Translation, list[dict]]:
        """Beam search on one sentence, with its search tree: every candidate looked at, as
        {"id", "parent", "token", "log_prob", "step", "status"}; status is "root", "kept",
        "finished" (ended in EOS) or "pruned" (fell out of the beam). ``stop``: asked between two
        decoder steps; when it says True, attnmt.seq2seq.decoding.DecodingStopped (the server's time limit).
        ``prefix``, ``tag``: the start of its outputs and a tag before its source, as in translate();
        ``constraints``: words or phrases its outputs must contain, as one text's in translate() (dynamic
        beam allocation; each node then says in ``met`` how many constraint tokens it has written)."""
        from attnmt.seq2seq.beam_tree import beam_tree

        text = valid_text(text)
        phrases = None if not constraints else phrases_of(self.tgt_subwords, [text], [constraints])[0]
        return beam_tree(
            self,
            text,
            self.config.decoding.beam if beam is None else beam,
            stop,
            self._prefixes([text], [prefix]),
            tag,
            phrases,
        )

    def trace(self, text: str, top_k: int = 5, stop: Callable[[], bool] | None = None, prefix: str = "", tag: str = ""):
        """Greedy translation of one sentence with every quantity of every decoder step
        (scores, weights, context, state, top-k next tokens): see attnmt.seq2seq.trace. ``stop``:
        asked between two decoder steps; when it says True, attnmt.seq2seq.decoding.DecodingStopped.
        ``prefix``: the start of the output, as in translate(); its steps are marked ``constrained``
        and still show the model's own top-k. ``tag``: before the source, as in translate()."""
        from attnmt.seq2seq.trace import trace

        text = valid_text(text)
        return trace(self, text, top_k, stop=stop, prefixes=self._prefixes([text], [prefix]), tag=tag)

    def attention(self, text: str, translation: str | Translation | Candidate | None = None, tag: str = "") -> dict:
        """Every attention weight of a Transformer, for one sentence and its translation, from a
        teacher-forced pass over the translation's tokens (the weights decoding computed for them):

            "encoder"  (L,H,S,S)  encoder self-attention, source piece -> source piece
            "decoder"  (L,H,T,T)  decoder self-attention: row t is output piece t, looking at the
                                  decoder's inputs <s> y_1 ... y_{T-1} ("decoder_tokens"), masked
                                  so that it sees columns 0..t only
            "cross"    (L,H,T,S)  cross-attention, output piece -> source piece
            "source_tokens" (S pieces, ending in "</s>"), "tokens" (T output pieces),
            "decoder_tokens" (T: "<s>" and tokens[:-1]): the labels of the axes

        numpy float32 arrays, layers and heads in model order; each row sums to 1. The
        ``attention`` matrix of a Translation is cross[-1].mean(axis=0), the last layer's
        cross-attention averaged over its heads. ``translation``: None translates ``text`` (beam
        of the config) and takes the best; a Translation (its best), a Candidate or anything with
        the output pieces as ``.tokens`` (a DecodingTrace); or a string, a target text to force.
        ``tag``: before the source, as in translate(). See docs/transformer.md.
        """
        if self.config.model.type != "transformer":
            raise AttnmtError(
                "attention() gives the layers and heads of Transformer models; "
                "an RNN model's attention is Translation.attention"
            )
        text = valid_text(text)
        if translation is None:
            [translation] = self.translate([text], tag=tag)
        if isinstance(translation, Translation):
            translation = translation.best
        if isinstance(translation, str):
            tgt_ids = self.tgt_subwords.encode([valid_text(translation)])[0] + [EOS]
        else:
            tgt_ids = [self.tgt_subwords.sp.piece_to_id(piece) for piece in translation.tokens]
        src_ids = self.source_ids([text], tag)[0]
        batch = make_batch([src_ids]).to(self.device)
        tgt_in = torch.tensor([[BOS] + tgt_ids[:-1]], dtype=torch.long, device=self.device)[:, : len(tgt_ids)]
        with torch.inference_mode():
            maps = self.model.attention_maps(batch.src, batch.src_lengths, tgt_in)
        tokens = self.tgt_subwords.pieces(tgt_ids)
        return {
            **{name: to_numpy(weights[0].float()) for name, weights in maps.items()},
            "source_tokens": self.src_subwords.pieces(src_ids + [EOS]),
            "tokens": tokens,
            "decoder_tokens": self.tgt_subwords.pieces(tgt_in[0].tolist()),
        }

    def candidate(self, hypothesis) -> Candidate:
        """A hypothesis of a search (attnmt.seq2seq.decoding) as a Candidate: its text, pieces, score, attention."""
        attention = None if hypothesis.attention is None else to_numpy(hypothesis.attention)
        return Candidate(
            self.tgt_subwords.decode(hypothesis.tokens),
            self.tgt_subwords.pieces(hypothesis.tokens),
            hypothesis.score,
            attention,
        )
