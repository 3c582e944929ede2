"""The beam search tree of one sentence: every candidate the search looked at, whether it stayed in
the beam, ended in EOS or fell out, with the final hypotheses (the server's /beam, the explorer's
beam view)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable

import torch

from attnmt.data.batching import make_batch
from attnmt.data.subwords import EOS
from attnmt.seq2seq.constraints import Phrases
from attnmt.seq2seq.decoding import BeamRecorder
from attnmt.seq2seq.prefix import Prefixes
from attnmt.seq2seq.results import Translation
from attnmt.seq2seq.search import decode


@torch.inference_mode()
def beam_tree(
    translator,
    text: str,
    beam: int,
    stop: Callable[[], bool] | None = None,
    prefixes: Prefixes | None = None,
    tag: str = "",
    phrases: Phrases | None = None,
) -> tuple[Translation, list[dict]]:
    """Beam search on ``text`` by ``translator`` (an attnmt.api.Translator) with its search tree, as
    Translator.beam_tree describes it; ``prefixes``: of a batch of one (attnmt.seq2seq.prefix), or
    None; ``phrases``: the constraints of its outputs (attnmt.seq2seq.constraints), or None."""
    src_ids = translator.source_ids([text], tag)[0]
    batch = make_batch([src_ids]).to(translator.device)
    recorder = BeamRecorder(1, beam)
    [hypotheses] = decode(
        translator.model,
        batch.src,
        batch.src_lengths,
        translator.config.decoding,
        beam=beam,
        n_best=beam,
        prefixes=prefixes,
        constraints=[phrases] if phrases else None,
        record=recorder,
        stop=stop,
    )
    translation = Translation(
        text,
        translator.src_subwords.pieces(src_ids + [EOS]),
        [translator.candidate(h) for h in hypotheses],
        tagged=bool(tag),
    )
    tokens = translator.tgt_subwords
    return translation, [{**asdict(node), "token": tokens.pieces([node.token])[0]} for node in recorder.trees[0]]
