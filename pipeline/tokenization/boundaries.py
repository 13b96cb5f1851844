"""Where one document ends and the next begins, in token ids: the rule every backend applies.

Every document ends with an end-of-document id (EOS), and starts with a beginning-of-document id
(BOS) when the tokenizer's convention has one: GPT-2 and Qwen put `<|endoftext|>` after each
document, Llama 3 and Mistral put their BOS before and their EOS after. The EOS is what records,
the loader's document packing and `inspect` find documents by, so a rule without one is refused.

Both must be special tokens of the tokenizer, which document text never encodes to (text is always
encoded as ordinary text): an ordinary token as EOS, or an added token not marked special, would
let a document holding its text end in the middle. And the BOS may not be the EOS: the loader finds
a document's end by the EOS, so a BOS equal to it would end a document of its own before each.

A cut document's pieces (see `pipeline.prepare.read.documents`) each end with the EOS, and only the
first piece starts with the BOS: the loader sees the pieces as documents, and a BOS still marks
only a document's real start.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Collection, Sequence

import numpy as np

from schemas.errors import RunError

# With no rule from the tokenizer, the first of these it holds ends every document.
DEFAULT_EOS_TOKENS = ("<|endoftext|>", "</s>", "<eos>")
# The `--bos-token` value that asks for no BOS even where the tokenizer's rule has one.
NO_BOS = "none"


class TokenizerError(RunError, ValueError):
    """A tokenizer spec that cannot be loaded as asked: the message names it and the fix."""


@dataclasses.dataclass(frozen=True)
class Boundary:
    """The ids around each document and where the rule came from (for the manifest and
    `inspect`)."""

    eos_token: str
    eos_id: int
    bos_token: str | None
    bos_id: int | None
    source: str

    def describe(self) -> str:
        before = f"{self.bos_token} ({self.bos_id}) before, " if self.bos_token is not None else ""
        return f"{before}{self.eos_token} ({self.eos_id}) after each document, from {self.source}"


def resolve_boundary(
    *,
    spec: str,
    token_id: Callable[[str], int | None],
    specials: Collection[str],
    bos: str | None,
    eos: str | None,
    source: str,
    bos_flag: str | None,
    eos_flag: str | None,
) -> Boundary:
    """The rule: the `--bos-token`/`--eos-token` flags over the tokenizer's own `bos`/`eos` (found
    in `source`), and with no EOS from either, the first of `DEFAULT_EOS_TOKENS` the tokenizer
    holds. `specials` are the tokenizer's special tokens; a boundary token must be one of them."""
    if bos_flag is not None or eos_flag is not None:
        source = (
            "the --bos-token/--eos-token flags"
            if bos is None and eos is None
            else f"{source} and flags"
        )
    bos = (None if bos_flag == NO_BOS else bos_flag) if bos_flag is not None else bos
    eos = eos_flag if eos_flag is not None else eos
    if eos is None:
        eos = next((t for t in DEFAULT_EOS_TOKENS if token_id(t) is not None), None)
        if eos is None:
            raise TokenizerError(
                f"tokenizer {spec!r} names no end-of-document token and holds none of "
                f"{list(DEFAULT_EOS_TOKENS)}; pass --eos-token TOKEN"
            )
        source = "the default" if bos is None else source
    ids = {}
    for flag, token in (("--eos-token", eos), ("--bos-token", bos)):
        if token is not None:
            ids[flag] = token_id(token)
            if ids[flag] is None:
                raise TokenizerError(
                    f"tokenizer {spec!r} has no token {token!r} ({flag}); pass one of its special "
                    f"tokens{_listed(specials)}"
                )
            if token not in specials:
                raise TokenizerError(
                    f"{token!r} ({flag}, from {source}) is not a special token of tokenizer "
                    f"{spec!r}: document text holding it would encode to its id and split the "
                    f"document; pass one of its special tokens{_listed(specials)}, or mark it "
                    "special in the tokenizer"
                )
    if bos is not None and ids["--bos-token"] == ids["--eos-token"]:
        raise TokenizerError(
            f"the BOS {bos!r} is also the EOS (from {source}): documents end at the EOS, so each "
            "BOS would end a document of its own; pass --bos-token none (the EOS after each "
            "document already precedes the next)"
        )
    return Boundary(eos, ids["--eos-token"], bos, ids.get("--bos-token"), source)


def _listed(specials: Collection[str], most: int = 8) -> str:
    names = sorted(specials)
    if not names:
        return " (it has none)"
    more = f", ... ({len(names)} in all)" if len(names) > most else ""
    return " (" + ", ".join(map(repr, names[:most])) + more + ")"


class BoundaryInTextError(TokenizerError):
    """Document text encoded to a boundary id: the tokenizer's ordinary vocabulary holds it too."""


def check_boundary_counts(flat: np.ndarray, counts: dict[str, int], boundary: Boundary) -> None:
    """Raises unless `flat` holds the EOS and the BOS exactly `counts["EOS"]` and `counts["BOS"]`
    times (those the rule put there): a boundary id that document text encoded to would split a
    document wherever ids are read back."""
    for name, token_id, token in (
        ("EOS", boundary.eos_id, boundary.eos_token),
        ("BOS", boundary.bos_id, boundary.bos_token),
    ):
        if token_id is not None and np.count_nonzero(flat == token_id) != counts[name]:
            raise BoundaryInTextError(
                f"document text encoded to the {name} id {token_id} ({token!r}): the tokenizer's "
                "ordinary vocabulary holds that id too; give the boundary token an id of its own"
            )


def join_documents(
    documents: Sequence[Sequence[int]], boundary: Boundary
) -> tuple[np.ndarray, np.ndarray]:
    """Each document's ids between its boundary ids, concatenated as uint32, and their lengths
    (boundary ids included)."""
    lengths = np.fromiter(map(len, documents), dtype=np.int64, count=len(documents))
    extra = 1 if boundary.bos_id is None else 2
    lengths += extra
    total = int(lengths.sum())
    flat = np.empty(total, dtype=np.uint32)
    ends = np.cumsum(lengths)
    body = np.ones(total, dtype=bool)
    body[ends - 1] = False
    flat[ends - 1] = boundary.eos_id
    if boundary.bos_id is not None:
        starts = ends - lengths
        body[starts] = False
        flat[starts] = boundary.bos_id
    flat[body] = np.fromiter(
        itertools.chain.from_iterable(documents),
        dtype=np.uint32,
        count=total - extra * len(documents),
    )
    check_boundary_counts(flat, {"EOS": len(documents), "BOS": len(documents)}, boundary)
    return flat, lengths


def piece_ids(
    ids: Sequence[int], boundary: Boundary, *, first: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One piece of a cut document: the BOS only before the first piece, the EOS after every one."""
    bos = [boundary.bos_id] if first and boundary.bos_id is not None else []
    flat = np.concatenate(
        [
            np.array(bos, dtype=np.uint32),
            np.asarray(ids, dtype=np.uint32),
            np.array([boundary.eos_id], dtype=np.uint32),
        ]
    )
    check_boundary_counts(flat, {"EOS": 1, "BOS": len(bos)}, boundary)
    return flat, np.array([len(flat)], dtype=np.int64)
