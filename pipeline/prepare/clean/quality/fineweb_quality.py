"""FineWeb's rules (datatrove's `FineWebQualityFilter`), judged over a batch of texts.

The line rules are datatrove's, with C-level `map` and set sizes. The last rule divides the text's
newlines by its words (datatrove's spaCy split); a text's whitespace chunks are at most its words,
so where newlines over chunks already pass, the words are not needed, and they are counted (from
the word cache) only for the texts left.
"""

from __future__ import annotations

import dataclasses
import operator

from pipeline.prepare.clean.quality.word_cache import WordCache, Words
from pipeline.prepare.clean.quality.word_chunks import chunks

_LAST = operator.itemgetter(-1)


def _duplicated_characters(lines: list[str]) -> int:
    """datatrove's `find_duplicates(lines)[1]`."""
    return sum(map(len, lines)) - sum(map(len, set(lines)))


@dataclasses.dataclass(frozen=True)
class FineWebQuality:
    """datatrove's keyword arguments and defaults."""

    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    stop_chars: tuple[str, ...] | None = None
    short_line_thr: float = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3

    needs_words = False
    web = False

    def __post_init__(self) -> None:
        if self.stop_chars is None:
            from datatrove.utils.text import TERMINAL_PUNCTUATION

            object.__setattr__(self, "stop_chars", tuple(TERMINAL_PUNCTUATION))
        elif isinstance(self.stop_chars, list):  # JSON's list, for `str.endswith`
            object.__setattr__(self, "stop_chars", tuple(self.stop_chars))

    def check(self, text: str) -> None:
        """Runs every rule on a check document, its words counted by whitespace: what the parameters
        cannot do raises, without spaCy."""
        self.judge([text], None, [len(text.split())], [None])

    def judge(
        self,
        texts: list[str],
        cache: WordCache | None,
        words: list[int | None],
        chunks_at_least: list[int | None],
    ) -> list[str | None]:
        """Each text's reason for removal, or None. `words`: each text's word count where known,
        `chunks_at_least`: a lower bound of its whitespace chunks where one is known."""
        stop = self.stop_chars
        single = (
            frozenset(stop)
            if isinstance(stop, tuple) and all(isinstance(c, str) and len(c) == 1 for c in stop)
            else None
        )
        reasons: list[str | None] = []
        to_count = []
        for i, text in enumerate(texts):
            lines = list(filter(str.strip, text.split("\n")))
            if not lines:
                reasons.append("empty")
                continue
            if single is not None:
                ending = sum(map(single.__contains__, map(_LAST, lines)))
            else:
                ending = sum(1 for line in lines if line.endswith(stop))
            ratio = ending / len(lines)
            if ratio < self.line_punct_thr and not (ratio == 0 and self.line_punct_exclude_zero):
                reasons.append("line_punct_ratio")
                continue
            if (
                sum(map(self.short_line_length.__ge__, map(len, lines))) / len(lines)
                > self.short_line_thr
            ):
                reasons.append("short_line_ratio")
                continue
            newlines = text.count("\n")
            if _duplicated_characters(lines) / (len(text) - newlines) > self.char_duplicates_ratio:
                reasons.append("char_dup_ratio")
                continue
            known = words[i]
            if known is None:
                at_least = chunks_at_least[i]
                if not (at_least and newlines / at_least <= self.new_line_ratio):
                    at_least = len(text.split())
                if at_least and newlines / at_least <= self.new_line_ratio:
                    reasons.append(None)
                    continue
                to_count.append(i)
                reasons.append(None)
                continue
            reasons.append("list_ratio" if newlines / known > self.new_line_ratio else None)
        if to_count:
            found = chunks([texts[i] for i in to_count])
            counted = Words(cache, cache.ids(found), found.bounds).counts.tolist()
            for i, n_words in zip(to_count, counted):
                if texts[i].count("\n") / n_words > self.new_line_ratio:
                    reasons[i] = "list_ratio"
        return reasons
