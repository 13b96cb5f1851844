"""Which source the next row (concat, document packing) or piece (document-first-fit) of a mixture
comes from.

Each comes from the source furthest below its weight once a row more is taken: the largest
`w_k * (T + row) - t_k`, where `t_k` are the tokens taken from source `k` in the current stage, `T`
their sum and `row` a row's tokens (the first source on a tie). This is the rule of Megatron's
BlendedDataset (each sample from the dataset with the largest error, `w_k * n - c_k`), with the
error counted after the sample it places: over rows of equal size it keeps every source's realized
tokens within one row of its weight at every step (counted before the sample, as Megatron does, a
source strays by more than one sample), and over pieces of up to a row within one row as well.
Choosing a source per record strays by a whole record: one long document's worth.
"""

from __future__ import annotations

from collections.abc import Sequence


def next_source(weights: Sequence[float], taken: Sequence[int], row: int) -> int:
    total = sum(taken) + row
    best, gap = 0, weights[0] * total - taken[0]
    for k in range(1, len(weights)):
        g = weights[k] * total - taken[k]
        if g > gap:
            best, gap = k, g
    return best
