"""The update's micro-batches: distinct sequences, a bound on rows and on tokens.

A batch of turns repeats itself: in Kuhn poker with compact prompts, 256 samples hold about
18 distinct (prompt, completion) pairs (9 situations, 2 replies). Two samples with the same
prompt, completion and sampling temperature have the same log-probs, so a forward pass needs
one row per distinct sequence; each sample's loss terms then read its row (an index into the
row's log-probs), and the backward pass adds the samples' gradients into that one row, so the
gradient is the same as with a row per sample up to float summation order.

A micro-batch (`distinct_chunks`) is a list of sample indices whose distinct sequences number
at most `micro` rows and, with `max_tokens`, whose rows times their longest sequence (the
padded forward's token positions) stay within `max_tokens` (one row always goes in, however
long): the memory bound of a forward pass, whatever the batch size. With `distinct` False,
every sample is its own row (the update before rows were shared; the benches compare both).
"""
from __future__ import annotations

from collections.abc import Sequence


def sample_key(sample) -> tuple:
    """What a sample's log-probs depend on: its tokens and the temperature they are taken at."""
    return sample.prompt_ids, sample.completion_ids, sample.temperature


def _groups(samples, indices: Sequence[int], distinct: bool) -> list[list[int]]:
    """`indices` grouped by `sample_key` (in the order of first appearance; one group per index
    when not `distinct`)."""
    if not distinct:
        return [[i] for i in indices]
    groups: dict[tuple, list[int]] = {}
    for i in indices:
        groups.setdefault(sample_key(samples[i]), []).append(i)
    return list(groups.values())


def distinct_chunks(samples, indices: Sequence[int], micro: int, max_tokens: int | None = None,
                    distinct: bool = True) -> list[list[int]]:
    """`indices` cut into micro-batches (lists of sample indices, each sample in one), the
    samples of a distinct sequence together, each chunk at most `micro` distinct sequences and,
    with `max_tokens`, at most `max_tokens` padded token positions (rows x longest)."""
    chunks: list[list[int]] = []
    rows, longest = 0, 0
    for group in _groups(samples, indices, distinct):
        s = samples[group[0]]
        n = len(s.prompt_ids) + len(s.completion_ids)
        wider = max(longest, n)
        full = rows >= micro or (max_tokens is not None and (rows + 1) * wider > max_tokens)
        if not chunks or full:
            chunks.append([])
            rows, wider = 0, n
        chunks[-1].extend(group)
        rows, longest = rows + 1, wider
    return chunks


def rows_of(samples, chunk: Sequence[int], distinct: bool = True) -> tuple[list[int], list[int]]:
    """The forward rows of a chunk, as (one sample index per distinct sequence, and for each
    sample of the chunk the position of its row among them)."""
    if not distinct:
        return list(chunk), list(range(len(chunk)))
    row: dict[tuple, int] = {}
    reps, where = [], []
    for i in chunk:
        k = sample_key(samples[i])
        if k not in row:
            row[k] = len(reps)
            reps.append(i)
        where.append(row[k])
    return reps, where


def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def rank_chunks(mb: list[int], micro: int, rank: int, world: int, samples=None,
                max_tokens: int | None = None,
                distinct: bool = True) -> list[tuple[list[int], float]]:
    """This rank's micro-batches of minibatch `mb` as (sample indices, weight). The samples
    are dealt round-robin (rank r takes mb[r::world]) and cut into micro-batches of `micro`
    samples, or with `samples` by `distinct_chunks`; ranks with fewer micro-batches than the
    most pad with weight-0 passes over one sample, so every rank runs the same number of
    backwards (ZeRO reduces gradients inside each one)."""
    def split(idx):
        if samples is None:
            return chunks(idx, micro)
        return distinct_chunks(samples, idx, micro, max_tokens, distinct)

    n = max(len(split(mb[r::world])) for r in range(world))
    mine = [(c, 1.0) for c in split(mb[rank::world])]
    return mine + [([mb[0]], 0.0)] * (n - len(mine))
