"""Gopher quality's rules (datatrove's `GopherQualityFilter`), judged over a batch of texts.

The rules, their order, reasons and parameters are datatrove's; the word statistics come from the
word cache (`word_cache.Words`) instead of a list of words per text. The line rules first bound
their ratio by character counts (a bullet line holds a "-" or "•", a line ending in an ellipsis its
own "..." or "…", and `splitlines` gives at least one line per "\\n"), so that most texts are never
split into lines.
"""

from __future__ import annotations

import dataclasses

from pipeline.prepare.clean.quality.word_cache import Words

# datatrove's (GopherQualityFilter's STOP_WORDS; tests/prepare/test_fast_filters.py compares them).
STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
_BULLETS = ("•", "-")
_ELLIPSES = ("...", "…")


def _bullet(line: str) -> bool:
    return line.lstrip().startswith(_BULLETS)


def _ellipsis(line: str) -> bool:
    return line.rstrip().endswith(_ELLIPSES)


@dataclasses.dataclass(frozen=True)
class GopherQuality:
    """datatrove's keyword arguments and defaults."""

    min_doc_words: int | None = 50
    max_doc_words: int | None = 100000
    min_avg_word_length: int | None = 3
    max_avg_word_length: int | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2
    stop_words: list[str] | None = None

    needs_words = True
    web = False

    def stop_word_list(self) -> list[str]:
        # datatrove compares the words with `set(stop_words)`: what is not a string matches none
        return sorted(
            w
            for w in set(STOP_WORDS if self.stop_words is None else self.stop_words)
            if isinstance(w, str)
        )

    def check(self, text: str) -> None:
        """Runs every rule on a check document's statistics: what the parameters cannot do
        raises."""
        self.stop_word_list()
        n = len(text.split())
        self._reason(text, n, n, len(text) - text.count(" "), n, 2)

    def judge(self, texts: list[str], words: Words) -> list[str | None]:
        """Each text's reason for removal, or None."""
        counts = words.counts.tolist()
        non_symbol, non_symbol_length, alpha, stop_words = (
            column.tolist() for column in words.gopher()
        )
        return [
            self._reason(text, *row)
            for text, *row in zip(texts, counts, non_symbol, non_symbol_length, alpha, stop_words)
        ]

    def _reason(
        self,
        text: str,
        n_words: int,
        non_symbol: int,
        non_symbol_length: int,
        alpha: int,
        stop_words: int,
    ) -> str | None:
        if self.min_doc_words and non_symbol < self.min_doc_words:
            return "gopher_short_doc"
        if self.max_doc_words and non_symbol > self.max_doc_words:
            return "gopher_long_doc"
        # np.mean of the lengths: their exact sum over their count (nan for none, which no bound
        # rejects)
        average = non_symbol_length / non_symbol if non_symbol else float("nan")
        if self.min_avg_word_length and average < self.min_avg_word_length:
            return "gopher_below_avg_threshold"
        if self.max_avg_word_length and average > self.max_avg_word_length:
            return "gopher_above_avg_threshold"
        if self.max_symbol_word_ratio and text.count("#") / n_words > self.max_symbol_word_ratio:
            return "gopher_too_many_hashes"
        ellipses = text.count("...") + text.count("…")
        if self.max_symbol_word_ratio and ellipses / n_words > self.max_symbol_word_ratio:
            return "gopher_too_many_ellipsis"
        fewest_lines = max(1, text.count("\n")) if text else 0
        bullets_at_most = text.count("-") + text.count("•")
        if (
            not fewest_lines
            or (
                self.max_bullet_lines_ratio
                and bullets_at_most / fewest_lines > self.max_bullet_lines_ratio
            )
            or (
                self.max_ellipsis_lines_ratio
                and ellipses / fewest_lines > self.max_ellipsis_lines_ratio
            )
        ):
            lines = text.splitlines()
            if (
                self.max_bullet_lines_ratio
                and sum(map(_bullet, lines)) / len(lines) > self.max_bullet_lines_ratio
            ):
                return "gopher_too_many_bullets"
            if (
                self.max_ellipsis_lines_ratio
                and sum(map(_ellipsis, lines)) / len(lines) > self.max_ellipsis_lines_ratio
            ):
                return "gopher_too_many_end_ellipsis"
        if self.max_non_alpha_words_ratio and alpha / n_words < self.max_non_alpha_words_ratio:
            return "gopher_below_alpha_threshold"
        if self.min_stop_words and stop_words < self.min_stop_words:
            return "gopher_enough_stop_words"
        return None
