"""The integer mix that prepare's unit shuffles, the MinHash permutations of cleaning and the
loader's record order are built on.

It lives in `pipeline/` itself, not in `prepare/`: both sides of the data path use it, and data
flows one way, so the loader (`load/`) imports nothing from `prepare/`.
"""

from __future__ import annotations

import numpy as np


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A fixed integer mix (SplitMix64's finalizer): the same bits under any numpy version."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
