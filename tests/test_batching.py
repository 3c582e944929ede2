"""Batching: seeded epoch order, size budgets, length-homogeneous batches, padding of batches."""

import random

import numpy as np
import pytest
import torch

from attnmt.data.batching import epoch_batches, inference_batches, longest_batch, make_batch, training_batch
from attnmt.data.subwords import BOS, EOS, PAD


def random_sizes(n: int, seed: int, low: int = 2, high: int = 60) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(n)]


SIZES = random_sizes(1000, seed=3)


def flatten(batches):
    return [i for batch in batches for i in batch]


def padding_fraction(batches, sizes) -> float:
    padded = sum(len(b) * max(sizes[i] for i in b) for b in batches)
    return 1 - sum(sizes[i] for b in batches for i in b) / padded


@pytest.mark.parametrize("batch_size, batch_tokens", [(32, None), (7, None), (64, 600), (64, 61)])
def test_every_index_exactly_once(batch_size, batch_tokens):
    batches = epoch_batches(SIZES, batch_size, batch_tokens, pool_batches=10, seed=1, epoch=0)
    indices = flatten(batches)
    assert sorted(indices) == list(range(len(SIZES)))
    assert all(batches)  # no empty batch


def test_same_seed_and_epoch_give_the_same_batches():
    a = epoch_batches(SIZES, 32, None, pool_batches=5, seed=7, epoch=3)
    b = epoch_batches(SIZES, 32, None, pool_batches=5, seed=7, epoch=3)
    assert a == b


def test_another_epoch_or_seed_gives_other_batches():
    base = epoch_batches(SIZES, 32, None, pool_batches=5, seed=7, epoch=3)
    assert epoch_batches(SIZES, 32, None, pool_batches=5, seed=7, epoch=4) != base
    assert epoch_batches(SIZES, 32, None, pool_batches=5, seed=8, epoch=3) != base


def test_order_is_independent_of_the_global_torch_seed():
    torch.manual_seed(1)
    a = epoch_batches(SIZES, 32, 500, pool_batches=5, seed=7, epoch=0)
    torch.manual_seed(2)
    torch.rand(10)
    b = epoch_batches(SIZES, 32, 500, pool_batches=5, seed=7, epoch=0)
    assert a == b


@pytest.mark.parametrize("batch_tokens", [61, 200, 1000])
def test_token_budget_is_respected(batch_tokens):
    batches = epoch_batches(SIZES, 64, batch_tokens, pool_batches=10, seed=0, epoch=0)
    for batch in batches:
        assert len(batch) * max(SIZES[i] for i in batch) <= batch_tokens
    # The budget is used, not just respected: batches are on average more than half full.
    used = sum(len(b) * max(SIZES[i] for i in b) for b in batches) / len(batches)
    assert used > batch_tokens / 2


def test_an_over_long_example_goes_alone_into_its_batch():
    sizes = [5] * 50 + [500, 700] + [6] * 50
    batches = epoch_batches(sizes, 64, 100, pool_batches=100, seed=0, epoch=0)
    assert sorted(flatten(batches)) == list(range(len(sizes)))
    for batch in batches:
        longest = max(sizes[i] for i in batch)
        if longest > 100:
            assert len(batch) == 1
        else:
            assert len(batch) * longest <= 100
    assert [50] in batches and [51] in batches


@pytest.mark.parametrize("batch_size", [1, 10, 33])
def test_batch_size_is_respected(batch_size):
    batches = epoch_batches(SIZES, batch_size, None, pool_batches=4, seed=0, epoch=0)
    assert all(1 <= len(b) <= batch_size for b in batches)
    # Only the last batch of each pool may be short.
    pool = 4 * batch_size
    assert sum(len(b) < batch_size for b in batches) <= -(-len(SIZES) // pool)


def test_batches_are_more_length_homogeneous_than_random_ones():
    sorted_pools = epoch_batches(SIZES, 32, None, pool_batches=10, seed=0, epoch=0)
    order = list(range(len(SIZES)))
    random.Random(0).shuffle(order)
    random_batches = [order[i : i + 32] for i in range(0, len(order), 32)]
    ours, theirs = padding_fraction(sorted_pools, SIZES), padding_fraction(random_batches, SIZES)
    assert ours < theirs / 3, (ours, theirs)


def test_batch_order_is_shuffled_not_sorted_by_length():
    batches = epoch_batches(SIZES, 16, None, pool_batches=100, seed=0, epoch=0)  # one pool
    longest = [max(SIZES[i] for i in b) for b in batches]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)


def epoch_batches_as_they_were(sizes, batch_size, batch_tokens, pool_batches, seed, epoch):
    """epoch_batches before the prepared store (lists of Python ints): what the numpy one must equal."""

    def split_by_budget(order):
        batches, current, longest = [], [], 0
        for i in order:
            new_longest = max(longest, sizes[i])
            full = (len(current) + 1) * new_longest > batch_tokens if batch_tokens else len(current) == batch_size
            if current and full:
                batches.append(current)
                current, new_longest = [], sizes[i]
            current.append(i)
            longest = new_longest
        return batches + [current] if current else batches

    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(sizes), generator=generator).tolist()
    pool = pool_batches * (batch_size if batch_tokens is None else max(1, batch_tokens // max(sizes)))
    batches = []
    for start in range(0, len(order), pool):
        batches += split_by_budget(sorted(order[start : start + pool], key=lambda i: sizes[i]))
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffled]


@pytest.mark.parametrize(
    "batch_size, batch_tokens, pool_batches", [(32, None, 10), (7, None, 3), (64, 600, 10), (64, 61, 100), (5, 1, 2)]
)
def test_the_batches_of_a_seed_are_those_of_the_list_implementation(batch_size, batch_tokens, pool_batches):
    sizes = SIZES + [200, 1] * 20  # (some over every budget)
    for seed, epoch in ((1, 0), (42, 3)):
        expected = epoch_batches_as_they_were(sizes, batch_size, batch_tokens, pool_batches, seed, epoch)
        batches = epoch_batches(np.array(sizes, np.uint16), batch_size, batch_tokens, pool_batches, seed, epoch)
        assert len(batches) == len(expected) and list(batches) == expected
        assert batches[3:5] == expected[3:5] and batches[-1] == expected[-1]


# ---------------------------------------------------------------- make_batch


def test_make_batch_adds_bos_and_eos_and_pads():
    src = [[10, 11, 12], [20]]
    tgt = [[30], [40, 41, 42, 43]]
    batch = make_batch(src, tgt, indices=[5, 9])
    assert batch.src.tolist() == [[10, 11, 12, EOS], [20, EOS, PAD, PAD]]
    assert batch.src_lengths.tolist() == [4, 2]
    assert batch.tgt_in.tolist() == [[BOS, 30, PAD, PAD, PAD], [BOS, 40, 41, 42, 43]]
    assert batch.tgt_out.tolist() == [[30, EOS, PAD, PAD, PAD], [40, 41, 42, 43, EOS]]
    assert batch.indices == [5, 9]
    assert batch.target_tokens == 2 + 5
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long


def test_source_width_can_be_rounded_up_to_a_multiple():
    for longest in (1, 7, 8, 9, 16, 23):
        batch = training_batch([[5] * (longest - 1), [6]], [[7], [8]])  # + EOS: longest tokens
        assert batch.src.size(1) == -(-longest // 8) * 8
        assert batch.src[1, 2:].eq(PAD).all()
        assert batch.src_lengths.tolist() == [longest, 2]


def test_make_batch_without_targets():
    batch = make_batch([[7, 8], [9]])
    assert batch.src.tolist() == [[7, 8, EOS], [9, EOS, PAD]]
    assert batch.tgt_in is None and batch.tgt_out is None


def test_make_batch_with_an_empty_target():
    batch = make_batch([[7]], [[]])
    assert batch.tgt_in.tolist() == [[BOS]] and batch.tgt_out.tolist() == [[EOS]]


# ---------------------------------------------------------------- inference_batches


def test_inference_batches_sorted_by_length_and_cover_all_indices():
    lengths = random_sizes(103, seed=4)
    batches = inference_batches(lengths, 10)
    assert [len(b) for b in batches] == [10] * 10 + [3]
    indices = flatten(batches)
    assert sorted(indices) == list(range(len(lengths)))
    assert [lengths[i] for i in indices] == sorted(lengths)


def test_inference_batches_of_nothing():
    assert inference_batches([], 8) == []


@pytest.mark.parametrize("batch_size, batch_tokens", [(64, None), (64, 2_000), (5_000_000, None)])
def test_the_longest_batch_holds_the_longest_examples_across_chunks(batch_size, batch_tokens):
    """The examples of the memory check's batch (TrainingLoop.check_memory): as many of the longest
    as a batch takes of them, found a million at a time (2.5 million here: three chunks)."""
    sizes = np.random.default_rng(0).integers(1, 90, 2_500_000).astype(np.uint16)
    sizes[[17, 1_048_576, 2_400_000]] = [100, 99, 98]  # the longest in each chunk
    chosen = longest_batch(sizes, batch_size, batch_tokens)
    count = min(len(sizes), batch_size if batch_tokens is None else batch_tokens // 100)
    assert len(chosen) == len(set(chosen)) == count and chosen == sorted(chosen)
    assert {17, 1_048_576, 2_400_000} <= set(chosen)
    # no example left out is longer than one chosen
    left_out = np.ones(len(sizes), bool)
    left_out[chosen] = False
    assert not left_out.any() or sizes[left_out].max() <= sizes[chosen].min()
    assert longest_batch(np.zeros(0, np.uint16), 64, None) == []
