"""Quality filters: datatrove's own filter classes, run on each whole document of a unit.

The rules are datatrove's (Gopher quality and repetition, C4, FineWeb), called as its pipeline calls
them: one `Document` passed through the filters in the order asked for, the first that returns
False removing it (its words split once for them all: see `shared_words`). A removal's reason is
`filter:NAME:REASON`, REASON being what that filter gives (`gopher_short_doc`, `dup_line_frac`,
...), or `filter:NAME` where it gives none. Parameters are the filter classes' keyword arguments,
their defaults datatrove's.

A filter may also change the documents it keeps (datatrove's C4 filter drops their lines without
terminal punctuation, or about javascript or cookies): the kept text is then the filters' text, the
one deduplicated and tokenized (see `unit_fingerprints`).

Only English: datatrove's English word tokenizer is spaCy's blank pipeline, which needs no model,
while other languages' tokenizers fetch models (nltk, stanza) at run time.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Mapping
from typing import Any

from schemas.errors import UsageError
from schemas.prepare_config import FILTER_NAMES

FILTER_CLASSES = dict(
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
# Keyword arguments that are not rules: where datatrove writes removed documents, and the language
# (see above).
_NOT_PARAMETERS = ("self", "exclusion_writer", "language")
PREFIX = "filter:"
# A document longer than `filter_max_document_bytes` is not read whole: it is removed for that.
TOO_LONG = "filter:too_long"
INSTALL_HINT = "install the filters extra: pip install -e '.[filters]'"


class FilterError(UsageError, ValueError):
    """A filter or parameter that cannot be used, said in one line."""


@functools.cache
def _module():
    try:
        from datatrove.pipeline import filters
    except ImportError as e:
        raise FilterError(f"--filter needs datatrove and spaCy ({e}); {INSTALL_HINT}") from None
    return filters


def filter_class(name: str) -> type:
    if name not in FILTER_CLASSES:
        raise FilterError(f"unknown filter {name!r}; expected one of {sorted(FILTER_CLASSES)}")
    return getattr(_module(), FILTER_CLASSES[name])


def parameters(name: str) -> dict[str, Any]:
    """The settable keyword arguments of a filter, with datatrove's defaults."""
    signature = inspect.signature(filter_class(name).__init__)
    return {
        p.name: p.default for p in signature.parameters.values() if p.name not in _NOT_PARAMETERS
    }


def parse_parameter(text: str) -> tuple[str, str, Any]:
    """`NAME.KEY=VALUE` as `(name, key, value)`; VALUE is read as JSON (`30`, `0.2`, `false`,
    `null`, `["a","b"]`), else taken as a string."""
    target, sep, raw = text.partition("=")
    name, dot, key = target.partition(".")
    if not sep or not dot or not name or not key:
        raise FilterError(
            "a filter parameter is NAME.KEY=VALUE, e.g. gopher-quality.min_doc_words=30 (got "
            f"{text!r})"
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return name, key, value


def check_filters(names: list[str], params: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuses unknown filters and parameters, parameters of filters not asked for, and values the
    filter classes do not take, before any unit runs."""
    if len(set(names)) != len(names):
        raise FilterError(f"a filter is named twice (got {names=})")
    for name in names:
        filter_class(name)
    for name, values in params.items():
        if name not in names:
            raise FilterError(
                f"parameters given for {name!r}, which is not in --filter "
                f"{','.join(names) or '(none)'}"
            )
        known = parameters(name)
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise FilterError(
                f"{name} has no parameters {unknown}; its parameters: {', '.join(sorted(known))}"
            )
    QualityFilters(names, params).judge("A check of the filters' parameters.")


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


class QualityFilters:
    """The filters of a run, built once per worker."""

    def __init__(self, names: list[str], params: Mapping[str, Mapping[str, Any]]):
        from datatrove.data import Document
        from datatrove.pipeline.filters.base_filter import get_filter_result

        from pipeline.prepare.clean.shared_words import SharedWords

        words = SharedWords()
        self._filters = [
            (name, filter_class(name)(**_declared(name, params.get(name, {})), language=words))
            for name in names
        ]

        self._document, self._result = Document, get_filter_result

    def judge(self, text: str) -> tuple[str | None, str]:
        """Why the first filter that removes this document does (None when all keep it), and its
        text as the filters leave it (C4's drops lines of the documents it keeps)."""
        document = self._document(text=text, id="")
        for name, rule in self._filters:
            try:
                kept, why = self._result(rule.filter(document))
            except (TypeError, ValueError, ZeroDivisionError) as e:
                raise FilterError(
                    f"filter {name} failed on a document ({type(e).__name__}: {e}); check its "
                    "parameters"
                ) from e
            if not kept:
                return (f"{PREFIX}{name}:{why}" if why else f"{PREFIX}{name}"), text
        return None, document.text
