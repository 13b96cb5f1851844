"""The fast quality filters: datatrove's four filters' rules, judged a batch of documents at a time.

The rules, their parameters and defaults, their reasons and C4's line edits are datatrove's; what
is done differently is how the words are had. datatrove splits every document with spaCy and walks
its words in Python; here each distinct whitespace chunk is split by spaCy once per process
(`word_cache`), and the statistics of a batch's documents are numpy gathers and sums over their
chunks (`gopher_quality`, `gopher_repetition`), with bounds that spare most documents the costlier
counts (`c4_quality`'s sentences, `fineweb_quality`'s words). Decisions depend on content alone:
the same in every process, whatever the batches or the cache holds.

Filters run in the order given; a document is removed by the first that rejects it, and a filter
after C4 judges the text C4 keeps, as in a datatrove pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.prepare.clean.judgments import RULE_ERRORS, Notes, removal_reason, rule_failed
from pipeline.prepare.clean.quality.c4_quality import C4Quality
from pipeline.prepare.clean.quality.fineweb_quality import FineWebQuality
from pipeline.prepare.clean.quality.gopher_quality import GopherQuality
from pipeline.prepare.clean.quality.gopher_repetition import GopherRepetition
from pipeline.prepare.clean.quality.word_cache import WordCache, Words
from pipeline.prepare.clean.quality.word_chunks import chunks
from pipeline.prepare.clean.web.classifier_filter import ClassifierRule
from pipeline.prepare.clean.web.language_filter import LanguageRule
from pipeline.prepare.clean.web.pii import PIIRule

RULES = {
    "gopher-quality": GopherQuality,
    "gopher-repetition": GopherRepetition,
    "c4": C4Quality,
    "fineweb": FineWebQuality,
    "language": LanguageRule,
    "fasttext": ClassifierRule,
    "pii": PIIRule,
}
# Text judged at a time: a few hundred web documents, whose arrays stay in the processor's caches.
BATCH_CHARACTERS = 1 << 19


class _Words:
    """The words of the documents `judged` (numbers in the batch) as their texts were then."""

    def __init__(self, cache: WordCache, texts: list[str], judged: list[int]):
        found = chunks([texts[d] for d in judged])
        self.words = Words(cache, cache.ids(found), found.bounds)
        self._texts = {d: texts[d] for d in judged}
        self._rows = {d: row for row, d in enumerate(judged)}

    def of(self, texts: list[str], alive: list[int]) -> Words | None:
        """The words of documents `alive`, or None if some text is not the one split."""
        if any(texts[d] is not self._texts.get(d) for d in alive):
            return None
        return self.words.subset(np.array([self._rows[d] for d in alive], dtype=np.int64))

    def count(self, texts: list[str], d: int) -> int | None:
        return int(self.words.counts[self._rows[d]]) if texts[d] is self._texts.get(d) else None


class FastFilters:
    """The filters of a run (names in order, parameters by name), built once per worker."""

    def __init__(
        self,
        names: Sequence[str],
        params: Mapping[str, Mapping[str, Any]],
        language_model: str | None = None,
    ):
        self._rules = [(name, RULES[name](**params.get(name, {}))) for name in names]
        for _, rule in self._rules:
            if getattr(rule, "web", False):
                rule.use(language_model)  # its model loaded, its labels checked
        gopher = dict(self._rules).get("gopher-quality")
        self._cache = WordCache(gopher.stop_word_list() if gopher is not None else ())

    def judge(self, text: str) -> tuple[str | None, str]:
        return self.judge_many([text])[0]

    def check(self, text: str) -> None:
        """Runs each filter's rules on a check document without splitting it with spaCy (whose
        import alone takes most of a second): what their parameters cannot do raises FilterError."""
        for name, rule in self._rules:
            try:
                rule.check(text)
            except RULE_ERRORS as e:
                raise rule_failed(name, e) from e

    def judge_many(self, texts: Sequence[str]) -> list[tuple[str | None, str]]:
        """For each text: why the first filter that removes it does (`filter:NAME:REASON`) and the
        text, or None and its text as the filters leave it."""
        return self.judge_noted(texts)[0]

    def judge_noted(self, texts: Sequence[str]) -> tuple[list[tuple[str | None, str]], list[Notes]]:
        """`judge_many`'s judgments and each document's notes (see `judgments.Notes`)."""
        judged: list[tuple[str | None, str]] = []
        notes: list[Notes] = []
        start = size = 0
        for i, text in enumerate(texts):
            if size and size + len(text) > BATCH_CHARACTERS:
                notes += self._batch(list(texts[start:i]), judged)
                start, size = i, 0
            size += len(text)
        if start < len(texts):
            notes += self._batch(list(texts[start:]), judged)
        return judged, notes

    def _batch(self, texts: list[str], judged: list[tuple[str | None, str]]) -> list[Notes]:
        """Judges a batch, its judgments added to `judged`; returns its notes."""
        current = list(texts)  # each text as the filters so far leave it
        notes: list[Notes] = [{} for _ in texts]
        results: list[tuple[str | None, str] | None] = [None] * len(texts)
        alive = list(range(len(texts)))
        words: _Words | None = None
        chunks_at_least: dict[int, int] = {}
        with np.errstate(divide="ignore", invalid="ignore"):
            for name, rule in self._rules:
                if not alive:
                    break
                judging = [current[d] for d in alive]
                try:
                    if rule.web:
                        reasons = []
                        for d, found in zip(alive, rule.judge(judging)):
                            notes[d].update(found.notes)
                            reasons.append(None if found.kept else "")
                            if found.kept and found.text is not current[d]:
                                current[d] = found.text
                                chunks_at_least.pop(d, None)
                    elif rule.needs_words:
                        found = words.of(current, alive) if words is not None else None
                        if found is None:
                            words = _Words(self._cache, current, alive)
                            found = words.of(current, alive)
                        reasons = rule.judge(judging, found)
                    elif name == "c4":
                        reasons, kept, bounds = rule.judge(judging, self._cache)
                        for d, text, bound in zip(alive, kept, bounds):
                            current[d] = text
                            chunks_at_least.pop(d, None)
                            if bound is not None:
                                chunks_at_least[d] = bound
                    else:
                        known = [
                            words.count(current, d) if words is not None else None for d in alive
                        ]
                        reasons = rule.judge(
                            judging, self._cache, known, [chunks_at_least.get(d) for d in alive]
                        )
                except RULE_ERRORS as e:
                    raise rule_failed(name, e) from e
                still = []
                for d, why in zip(alive, reasons):
                    if why is None:
                        still.append(d)
                    else:
                        results[d] = (removal_reason(name, why), texts[d])
                alive = still
        for d in alive:
            results[d] = (None, current[d])
        judged += results
        return notes
