"""C4's rules (datatrove's `C4QualityFilter`), judged over a batch of texts: the same lines kept and
dropped, in the same order, so the kept text is datatrove's to the character.

Lines are dropped early by their last character (one that is not terminal punctuation or "]" stays
last once citations are removed), and the phrase rules look at a line only if the whole text, its
citations removed, holds the phrase.

`min_num_sentences` counts spaCy's sentences (its sentencizer over each kept line's tokens). Every
kept line holds a sentence, so the count is only needed for texts that keep fewer lines than
`min_num_sentences`; for those, each line's count is spaCy's sentencizer rule over its words from
the word cache (`sentence_counts`). The sentencizer starts a sentence at a token that is neither
punctuation nor in its `punct_chars` when the previous token that is not punctuation is in
`punct_chars`; a run of whitespace between words, other than one space, is such a token, and so is
whitespace ending a line (but one space). With `split_paragraph=False` the text is split into
sentences by datatrove (spaCy) itself, at its speed.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from pipeline.prepare.clean.quality.word_cache import OTHER, PUNCTUATION, SENTENCE_END, WordCache
from pipeline.prepare.clean.quality.word_chunks import chunks

# datatrove's (datatrove.pipeline.filters.c4_filters; tests/prepare/test_fast_filters.py compares
# them), declared here so that judging imports none of its filters.
CITATION_REGEX = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
END_PUNCTUATION = (".", "?", "!", '"', "'")
ELLIPSIS = "..."
POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
# A line ending otherwise ends so once its citations are removed: it cannot end in terminal
# punctuation.
_LAST_CHARACTERS = frozenset(END_PUNCTUATION) | {"]"}


def sentence_counts(cache: WordCache, lines: list[str]) -> np.ndarray:
    """`len(split_into_sentences(line))` of each line (datatrove's spaCy sentences)."""
    found = chunks(lines)
    ids = cache.ids(found)
    positions, words = cache.word_positions(ids)
    per_line = np.diff(found.bounds)
    last = np.zeros(len(ids), dtype=bool)
    last[found.bounds[1:][per_line > 0] - 1] = True
    # a whitespace token after a chunk: between two chunks of a line, or ending the line
    trailing = np.array([_trailing_token(line) for line in lines], dtype=bool)
    extra = np.where(last, np.repeat(trailing, per_line), ~found.one_space_after()).astype(np.int64)
    tokens = words + extra
    start = np.concatenate(([0], np.cumsum(tokens)))
    word_start = np.concatenate(([0], np.cumsum(words)))
    classes = np.full(start[-1], OTHER, dtype=np.int8)
    slots = np.repeat(start[:-1] - word_start[:-1], words) + np.arange(word_start[-1])
    classes[slots] = cache.word_class[positions]
    line_of = np.repeat(np.repeat(np.arange(len(lines)), per_line), tokens)
    counted = classes != PUNCTUATION
    kinds, owners = classes[counted], line_of[counted]
    starts = (kinds[1:] == OTHER) & (kinds[:-1] == SENTENCE_END) & (owners[1:] == owners[:-1])
    return 1 + np.bincount(owners[1:][starts], minlength=len(lines))


def _trailing_token(line: str) -> bool:
    """Whether spaCy makes a token of the whitespace ending `line` (all of it but one leading
    space), after a word."""
    rest = line[len(line.rstrip()) :]
    return bool(rest) and rest != " "


@dataclasses.dataclass(frozen=True)
class C4Quality:
    """datatrove's keyword arguments and defaults."""

    split_paragraph: bool = True
    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True

    needs_words = False
    web = False

    def check(self, text: str) -> None:
        """Runs every rule on a check document's lines (its sentences counted as its lines): what
        the parameters cannot do raises, without spaCy."""
        reason, kept, _, _ = self._kept(text, text.splitlines())
        if reason is None and self.min_num_sentences != -1:
            _ = len(kept) < self.min_num_sentences

    def judge(
        self, texts: list[str], cache: WordCache
    ) -> tuple[list[str | None], list[str], list[int | None]]:
        """Each text's reason for removal or None, its text as kept, and for a kept text a lower
        bound of its whitespace chunks where one is known (None otherwise)."""
        judged = [self._lines(text) for text in texts]
        reasons = [reason for reason, _, _, _ in judged]
        needed = self.min_num_sentences
        # Each kept line holds one sentence at least (one exactly without split_paragraph).
        short = [
            i
            for i, (reason, kept, _, _) in enumerate(judged)
            if reason is None and len(kept) < needed
        ]
        if needed != -1 and short:
            sentences = {i: len(judged[i][1]) for i in short}
            if self.split_paragraph:
                lines = [line for i in short for line in judged[i][1]]
                counts = iter(sentence_counts(cache, lines).tolist() if lines else [])
                sentences = {i: sum(next(counts) for _ in judged[i][1]) for i in short}
            for i in short:
                if sentences[i] < needed:
                    reasons[i] = "too_few_sentences"
        out_texts, lower_bounds = [], []
        for text, reason, (_, kept, edited, words) in zip(texts, reasons, judged):
            if reason is not None:
                out_texts.append(text)
                lower_bounds.append(None)
                continue
            new_text = ("\n" if self.split_paragraph else " ").join(kept).strip()
            out_texts.append(
                text if new_text == text else new_text
            )  # the same object: its words stay known
            lower_bounds.append(None if edited else words)
        return reasons, out_texts, lower_bounds

    def _lines(self, text: str) -> tuple[str | None, list[str], bool, int]:
        """Why the text is removed (or None), its kept lines, whether a citation was removed, and
        at most the kept lines' whitespace chunks."""
        if self.split_paragraph:
            lines = text.splitlines()
        else:
            from datatrove.utils.text import split_into_sentences

            lines = split_into_sentences(text)
        return self._kept(text, lines)

    def _kept(self, text: str, lines: list[str]) -> tuple[str | None, list[str], bool, int]:
        citation, policies = CITATION_REGEX, POLICY_SUBSTRINGS
        cite = self.remove_citations and "[" in text
        # A phrase in a line, its citations removed, is in the whole text with them removed.
        lowered = (citation.sub("", text) if cite else text).lower()
        lorem = self.filter_lorem_ipsum and "lorem ipsum" in lowered
        javascript = self.filter_javascript and "javascript" in lowered
        policy = self.filter_policy and any(p in lowered for p in policies)
        curly = self.filter_curly_bracket and "{" in text
        terminal = self.filter_no_terminal_punct
        longest, fewest = self.max_word_length, self.min_words_per_line
        counted = max(fewest, 4) - 1  # words are counted up to max(fewest, 4)
        kept: list[str] = []
        edited = False
        words_kept = 0
        for line in lines:
            line = line.strip()
            if terminal and line[-1:] not in _LAST_CHARACTERS:
                continue
            n_words = -1
            if longest != -1 and (
                len(line) > longest or longest < 0
            ):  # a longer word needs a longer line
                split = line.split()
                if split and max(map(len, split)) > longest:
                    continue
                n_words = len(split)
            before = line
            if cite and "[" in line:
                line = citation.sub("", line)
                edited = edited or line != before
            if terminal and (not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS)):
                continue
            if n_words < 0:
                n_words = len(before.split(None, counted))  # the words before citations went
            if n_words < fewest:
                continue
            if lorem or javascript or policy:
                lowered_line = line.lower()
                if lorem and "lorem ipsum" in lowered_line:
                    return "lorem_ipsum", [], edited, 0
                if javascript and "javascript" in lowered_line:
                    continue
                if curly and "{" in line:
                    return "curly_bracket", [], edited, 0
                if policy and any(p in lowered_line for p in policies):
                    continue
            elif curly and "{" in line:
                return "curly_bracket", [], edited, 0
            kept.append(line)
            words_kept += n_words
        return None, kept, edited, words_kept
