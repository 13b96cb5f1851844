"""Long documents encoded in pieces whose ids join to exactly the whole document's ids.

The `tokenizers` library holds far more than ids while it encodes (alignments per byte, an Encoding
per token): about 130 bytes per character, so one 20 MB document would peak at 2.5 GiB. A document
longer than `PIECE_CHARS` is therefore encoded a piece at a time, cut before a single space between
two other characters ("word| word"): there every common pre-tokenizer (byte-level BPE's split
pattern, cl100k's and Llama 3's, Metaspace, Whitespace, BERT's) starts a new pre-token, and merges
never cross pre-tokens. Each cut is checked before it is taken: the ids of the text around it
(`JUNCTION` characters either side) must equal the ids of its two sides joined. A tokenizer that
joins across such a cut (a normalizer that strips or prepends to the whole input, a pre-tokenizer
that does not split at spaces) fails the check, and the document is then encoded whole: its ids stay
exact, its memory is unbounded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

PIECE_CHARS = 2**20
JUNCTION = 512  # characters either side of a cut that its check encodes
_TRIES = 16  # failed checks after which a document is taken not to be cuttable


def _candidates(text: str, start: int, piece_chars: int) -> Iterator[int]:
    """Places to cut the text after `start`: before a single space between two other characters,
    the last ones in the piece's second half first, then the first ones past it."""
    low, high = start + piece_chars // 2, start + piece_chars
    at = high + 1
    while (at := text.rfind(" ", low, at)) > low:
        yield at
    at = high
    while (at := text.find(" ", at + 1)) >= 0:
        yield at


def _clean(text: str, at: int) -> bool:
    return at + 1 < len(text) and not text[at - 1].isspace() and not text[at + 1].isspace()


def _joins(text: str, at: int, start: int, encode: Callable[[str], np.ndarray]) -> bool:
    """Whether the ids around a cut at `at` are those of its two sides joined."""
    low, high = max(start, at - JUNCTION), min(len(text), at + JUNCTION)
    joined = np.concatenate([encode(text[low:at]), encode(text[at:high])])
    return np.array_equal(encode(text[low:high]), joined)


def pieces(
    text: str, encode: Callable[[str], np.ndarray], piece_chars: int = PIECE_CHARS
) -> list[str]:
    """`text` cut into pieces of about `piece_chars` characters whose ids, joined, are its ids."""
    out, start, failed = [], 0, 0
    while len(text) - start > piece_chars and failed < _TRIES:
        for at in _candidates(text, start, piece_chars):
            if not _clean(text, at):
                continue
            if _joins(text, at, start, encode):
                out.append(text[start:at])
                start = at
                break
            failed += 1
            if failed == _TRIES:
                break
        else:
            break  # no cut left in the rest of the text
    out.append(text[start:])
    return out


def encode_in_pieces(
    text: str, encode: Callable[[str], np.ndarray], piece_chars: int = PIECE_CHARS
) -> np.ndarray:
    """The ids of `text` (what `encode` gives for it whole), encoded a piece at a time."""
    if len(text) <= piece_chars:
        return encode(text)
    return np.concatenate([encode(piece) for piece in pieces(text, encode, piece_chars)])
