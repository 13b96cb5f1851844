"""The exact mode (`--filter-impl datatrove`): datatrove's own filter classes, run on each whole
document as its pipeline runs them.

One `Document` passes through the filters in the order asked for, the first that returns False
removing it; the words are split once for them all (see `shared_words`). Decisions and kept texts
are datatrove's to the document, at datatrove's speed: the reference the fast filters are tested
against.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.prepare.clean.judgments import (
    INSTALL_HINT,
    RULE_ERRORS,
    FilterError,
    Notes,
    removal_reason,
    rule_failed,
)
from pipeline.prepare.clean.web.datatrove_steps import WEB_NAMES, datatrove_step
from schemas.prepare_config import FILTER_NAMES

CLASSES = dict(
    zip(
        FILTER_NAMES,
        (
            "GopherQualityFilter",
            "GopherRepetitionFilter",
            "C4QualityFilter",
            "FineWebQualityFilter",
        ),
    )
)
# What datatrove's filters record of a document that the run counts.
NOTED = ("language", "language_score")
# Keyword arguments that are not rules: where datatrove writes removed documents, and the language
# (only English: other languages' tokenizers fetch models at run time).
NOT_PARAMETERS = ("self", "exclusion_writer", "language")


@functools.cache
def _module():
    try:
        from datatrove.pipeline import filters
    except ImportError as e:
        raise FilterError(f"--filter needs datatrove and spaCy ({e}); {INSTALL_HINT}") from None
    return filters


def filter_class(name: str) -> type:
    return getattr(_module(), CLASSES[name])


def class_parameters(name: str) -> dict[str, Any]:
    """The keyword arguments of a filter's datatrove class that are rules, with their defaults."""
    signature = inspect.signature(filter_class(name).__init__)
    return {
        p.name: p.default for p in signature.parameters.values() if p.name not in NOT_PARAMETERS
    }


def _declared(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON's lists as tuples where the class declares a tuple (FineWeb's `stop_chars` goes to
    `str.endswith`)."""
    declared = inspect.signature(filter_class(name).__init__).parameters
    return {
        key: tuple(value)
        if isinstance(value, list) and "tuple" in str(declared[key].annotation)
        else value
        for key, value in values.items()
    }


class DatatroveFilters:
    """The filters of a run, built once per worker."""

    def __init__(
        self,
        names: Sequence[str],
        params: Mapping[str, Mapping[str, Any]],
        language_model: str | None = None,
    ):
        from datatrove.data import Document
        from datatrove.pipeline.filters.base_filter import get_filter_result

        from pipeline.prepare.clean.quality.shared_words import SharedWords

        words = SharedWords()
        self._filters = [
            (
                name,
                datatrove_step(name, params.get(name, {}), language_model)
                if name in WEB_NAMES
                else filter_class(name)(**_declared(name, params.get(name, {})), language=words),
            )
            for name in names
        ]
        self._document, self._result = Document, get_filter_result

    def judge(self, text: str) -> tuple[tuple[str | None, str], Notes]:
        """Why the first filter that removes this document does (None when all keep it), and its
        text as the filters leave it (C4's drops lines of the documents it keeps); its notes (the
        language datatrove's `LanguageFilter` found)."""
        document = self._document(text=text, id="")
        judged = None
        for name, rule in self._filters:
            try:
                kept, why = self._result(rule.filter(document))
            except RULE_ERRORS as e:
                raise rule_failed(name, e) from e
            if not kept:
                judged = (removal_reason(name, why), text)
                break
        notes = {key: document.metadata[key] for key in NOTED if key in document.metadata}
        return judged or (None, document.text), notes

    def judge_noted(self, texts: Sequence[str]) -> tuple[list[tuple[str | None, str]], list[Notes]]:
        judged = [self.judge(text) for text in texts]
        return [j for j, _ in judged], [notes for _, notes in judged]

    def judge_many(self, texts: Sequence[str]) -> list[tuple[str | None, str]]:
        return self.judge_noted(texts)[0]
