"""Where a SentencePiece BPE model's long document may be cut so that its pieces' ids join to
exactly the whole document's: the split rule (docs/sentencepiece.md has its proof against the
library's C++ source; tests/tokenization/test_sentencepiece.py checks it against whole-document
`encode`).

- Prefix models (the usual case, `treat_whitespace_as_suffix` off: Llama 2, Mistral, Gemma): cut
  before an ASCII space whose preceding character is in the model's *safe set*; every piece but the
  first is encoded by a *continuation* processor, the same model with `add_dummy_prefix` set to
  its `remove_extra_whitespaces` (with the whitespace collapse on, the piece's leading space is
  stripped and the dummy `▁` stands for it; with it off, the space itself becomes the `▁`).
- Suffix models: cut after an ASCII space whose following character is safe and whose preceding
  one is "before"-safe; every piece but the last uses the continuation processor.

The safe set is printable ASCII less every character that a vocabulary piece joins to a `▁`
across the cut, that a normalization rule or user-defined symbol joins to the space, or whose
normalization could end (start) in whitespace or vanish. The cut then falls where the normalized
text has a non-`▁` character next to a `▁` that no vocabulary piece covers, so BPE's merges never
cross it and its merge order on each side is independent of the other side.

Refused (`SplitRule.allowed` false: the document is encoded whole, exactly, in memory that grows
with it): Unigram models (the Viterbi search sums path scores in float32, so near-ties after a cut
break by the rounding of everything before it), WORD and CHAR models, UNUSED pieces (BPE's
re-segmentation table is global), `escape_whitespaces` off, NaN scores, no `▁` piece without byte
fallback (runs of unknown pieces merge into one `<unk>`), a normalization rule that starts with a
space, a user-defined symbol that starts with one under the whitespace collapse, an empty safe set.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import struct
from collections.abc import Iterator

from pipeline.tokenization.sentencepiece_model import (
    NORMAL,
    SPACE,
    UNUSED,
    USER_DEFINED,
    ModelKind,
    PieceTable,
    inspect_model,
)
from pipeline.tokenization.sentencepiece_normalizer import nodes_reaching, read_charsmap

# Long documents are cut into pieces of about this many characters. BPE holds about 40 bytes per
# character of the text it encodes at once, and slows down on long inputs (its agenda outgrows the
# caches): per CPU-second it encodes 1.7 MB of a 5 MiB document whole, 5.8 MB in 2**14-character
# pieces (docs/sentencepiece.md).
PIECE_CHARS = 2**14
# The characters a cut may sit next to, before the model's own exclusions: printable ASCII but
# space.
CANDIDATES = frozenset(chr(c) for c in range(0x21, 0x7F))
_SEARCH_TRIES = 64  # rfind steps before the rest of the window is searched by pattern


@dataclasses.dataclass(frozen=True)
class SplitRule:
    """Whether and where a model's long documents may be cut (see the module docstring)."""

    allowed: bool
    reasons: tuple[str, ...]  # why it is refused; empty when allowed
    suffix: bool = False  # cut after the space (treat_whitespace_as_suffix) rather than before it
    safe: frozenset[str] = frozenset()  # the characters a cut may sit next to
    safe_before: frozenset[str] = (
        frozenset()
    )  # suffix models: the characters before the cut's space
    continuation_dummy: bool = False  # add_dummy_prefix of the processor for the other pieces
    excluded: tuple[str, ...] = ()  # printable ASCII taken out of the safe set, with why

    def explain(self) -> str:
        if self.allowed:
            side = "after a space followed by" if self.suffix else "before a space preceded by"
            return (
                f"long documents are cut {side} one of {len(self.safe)} safe characters; "
                f"other pieces use add_dummy_prefix={self.continuation_dummy}"
            )
        return "long documents are encoded whole: " + "; ".join(self.reasons)


def _bad_ends(value: bytes, suffix: bool) -> bool:
    """Whether a replacement could leave whitespace (or nothing) at the side of a cut."""
    if not value:
        return True
    text = value.decode("utf-8", "replace")
    end = text[0] if suffix else text[-1]
    return end in (" ", SPACE)


@functools.lru_cache(maxsize=8)
def _charsmap_rule(blob: bytes, suffix: bool) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """What the normalization rules refuse, and which characters they take out of the safe set.
    Cached by content: models trained with the default normalization share one charsmap."""
    try:
        charsmap = read_charsmap(blob)
    except (struct.error, ValueError, IndexError) as e:
        return f"the normalization rules cannot be read ({e})", ()
    refusal = None
    out: dict[str, str] = {}
    root = charsmap.children[0]
    if 0x20 in root:
        node = root[0x20]
        if charsmap.children.get(node) or charsmap.leaf_value.get(node) != b" ":
            refusal = "a normalization rule starts with a space or maps a space to something else"
    for node, kids in charsmap.children.items():
        if not node:
            continue
        if suffix and charsmap.label[node] == 0x20:
            for b in kids:
                if b < 0x80:
                    out.setdefault(chr(b), "a normalization rule joins it to a preceding space")
        if not suffix and 0x20 in kids and charsmap.label[node] < 0x80:
            out.setdefault(
                chr(charsmap.label[node]), "a normalization rule joins it to a following space"
            )
    if suffix:  # the rules that start with the character: all below its node
        below = nodes_reaching(charsmap, lambda v: _bad_ends(v, suffix=True))
        for b, n in root.items():
            if b < 0x80 and n in below:
                out.setdefault(
                    chr(b), "a normalization rule for it can start in whitespace or nothing"
                )
    else:  # the rules that end with the character: the nodes it labels
        for n, v in charsmap.leaf_value.items():
            if charsmap.label[n] < 0x80 and _bad_ends(v, suffix=False):
                out.setdefault(
                    chr(charsmap.label[n]),
                    "a normalization rule ending in it can end in whitespace or nothing",
                )
    return refusal, tuple(sorted(out.items()))


def can_split(proto, table: PieceTable) -> SplitRule:
    """The split rule for a model (its ModelProto and piece table), or why it has none."""
    kind = inspect_model(proto, table)
    suffix = kind.treat_whitespace_as_suffix
    reasons: list[str] = []
    if kind.model_type != "BPE":
        why = {
            "UNIGRAM": "a Unigram model's Viterbi search sums path scores in float32 from the "
            "start of the text (unigram_model.cc, EncodeOptimized), so where near-ties fall "
            "depends on the score of everything before a cut: no cut is provably exact",
            "WORD": "a WORD model merges adjacent unknown words into one <unk>, also across a cut",
        }
        reasons.append(why.get(kind.model_type, f"{kind.model_type} models are not analysed"))
    if not kind.escape_whitespaces:
        reasons.append("escape_whitespaces is off, so spaces are not the ▁ the rule relies on")
    if kind.unused:
        reasons.append(
            f"{kind.unused} UNUSED pieces: BPE re-segments them with a table built over the whole "
            "text (bpe_model.cc, rev_merge), so a piece's ids can depend on text on the other side "
            "of a cut"
        )
    texts, types, scores = table.texts, table.types, table.scores
    scored = [
        (s, x) for s, k, x in zip(texts, types, scores) if k in (NORMAL, USER_DEFINED, UNUSED)
    ]
    if any(x != x for _, x in scored):
        reasons.append("a piece has a NaN score, which breaks BPE's merge order")
    space_type = types[texts.index(SPACE)] if SPACE in texts else None
    if not kind.byte_fallback and space_type not in (NORMAL, USER_DEFINED):
        reasons.append(
            "the vocabulary has no ▁ piece and no byte fallback: a lone ▁ would be <unk>, and runs "
            "of <unk> merge into one id across a cut"
        )
    if (
        not suffix
        and kind.remove_extra_whitespaces
        and any(s.startswith(" ") for s in kind.user_defined)
    ):
        # The symbol is one unit of the normalizer (normalizer.cc: matcher_ before the rules), which
        # the whitespace collapse treats unlike a lone space at the start of a piece.
        reasons.append(
            "a user-defined symbol starts with a space and remove_extra_whitespaces is on"
        )

    # The characters next to a cut's space, and what each must not be joined to.
    #   before: the space ends no rule or user-defined symbol that starts before it (normalizer.cc:
    #     NormalizePrefix takes the longest rule, user-defined symbols first), and the
    #     normalization before it ends in neither whitespace nor nothing;
    #   after: the same, mirrored; in suffix models only.
    # Vocabulary pieces must not join the cut's side of it to ▁ (c▁ before the space in prefix
    # models, ▁c after it in suffix models): BPE merges only into vocabulary pieces.
    before = _normalizer_exclusions(proto, kind, after=False, reasons=reasons)
    after = _normalizer_exclusions(proto, kind, after=True, reasons=reasons) if suffix else {}
    pieces = {}
    joined = "\0".join(s for s, _ in scored)  # one scan of all pieces for c▁ (▁c)
    for m in re.finditer(
        f"([^{SPACE}\0]){SPACE}" if not suffix else f"{SPACE}([^{SPACE}\0])", joined
    ):
        c = m.group(1)
        if c in CANDIDATES and c not in pieces:
            lo, hi = joined.rfind("\0", 0, m.start()) + 1, joined.find("\0", m.end())
            pieces[c] = f"the piece {joined[lo : hi if hi >= 0 else None]!r} joins it to ▁"
    cut_side = {**pieces, **(after if suffix else before)}
    safe = frozenset(CANDIDATES - cut_side.keys())
    safe_before = frozenset(CANDIDATES - before.keys()) if suffix else frozenset()
    if not safe or (suffix and not safe_before):
        reasons.append("no printable ASCII character is safe next to a cut")
    return SplitRule(
        allowed=not reasons,
        reasons=tuple(reasons),
        suffix=suffix,
        safe=safe if not reasons else frozenset(),
        safe_before=safe_before if not reasons else frozenset(),
        continuation_dummy=kind.remove_extra_whitespaces,
        excluded=tuple(f"{c!r}: {why}" for c, why in sorted(cut_side.items()))
        + tuple(f"{c!r} before the space: {why}" for c, why in sorted(before.items()) if suffix),
    )


def _normalizer_exclusions(
    proto, kind: ModelKind, *, after: bool, reasons: list[str]
) -> dict[str, str]:
    """The printable ASCII characters that may not sit before (after) a cut's space, by the
    normalizer: user-defined symbols (matched in the raw text) and normalization rules."""
    out: dict[str, str] = {}
    for s in kind.user_defined:
        for m in re.finditer(" ", s):
            at = m.start() + (1 if after else -1)
            if 0 <= at < len(s) and s[at] in CANDIDATES:
                out.setdefault(s[at], f"the user-defined symbol {s!r} joins it to a space")
    if kind.has_charsmap:
        refusal, by_charsmap = _charsmap_rule(proto.normalizer_spec.precompiled_charsmap, after)
        if refusal and refusal not in reasons:
            reasons.append(refusal)
        for c, why in by_charsmap:
            if c in CANDIDATES:
                out.setdefault(c, why)
    return out


def cut_points(text: str, rule: SplitRule, piece_chars: int = PIECE_CHARS) -> Iterator[int]:
    """Where `text` is cut: positions in increasing order, about `piece_chars` apart. A cut before a
    space (prefix models) is the space's index; after it (suffix models), the index past it. Lazy,
    and O(length) over the whole text."""
    if not rule.allowed:
        return
    safe, before, suffix = rule.safe, rule.safe_before, rule.suffix
    pattern = _pattern(safe, before, suffix)  # a match's second character is the space
    start = 0
    while len(text) - start > piece_chars:
        low, high = start + piece_chars // 2, start + piece_chars
        at, found = high + 1, None
        for _ in range(
            _SEARCH_TRIES
        ):  # the last space in the piece's second half with safe neighbours
            at = text.rfind(" ", low, at)
            if at <= low:
                break
            if suffix:
                if at + 1 < len(text) and text[at + 1] in safe and text[at - 1] in before:
                    found = at
                    break
            elif text[at - 1] in safe:
                found = at
                break
        else:  # many spaces without safe neighbours: the last valid one in the rest of the window
            for m in pattern.finditer(text, low, at + 1):
                if m.start() + 1 > low:
                    found = m.start() + 1
        if found is None:  # else the first one past the piece's end
            m = pattern.search(text, high)
            if m is None:
                return
            found = m.start() + 1
        cut = found + 1 if suffix else found
        if not start < cut < len(text):
            return
        yield cut
        start = cut


@functools.lru_cache(maxsize=16)
def _pattern(safe: frozenset[str], before: frozenset[str], suffix: bool) -> re.Pattern:
    def chars(s):
        return "[" + "".join(re.escape(c) for c in sorted(s)) + "]"

    return re.compile(f"{chars(before)} {chars(safe)}" if suffix else f"{chars(safe)} ")
