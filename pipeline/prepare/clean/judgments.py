"""What a filter of the chain says of a document, shared by every room of filters: its reason
(`filter:NAME:REASON`), and the one-line error of a filter that cannot be used or fails.

Apart from the filters that use them (`quality/`, `web/`), so that they import it and it imports
none of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from schemas.errors import UsageError

PREFIX = "filter:"
# A document longer than `filter_max_document_bytes` is not read whole: it is removed for that.
TOO_LONG = "filter:too_long"
INSTALL_HINT = "install the filters extra: pip install -e '.[filters]'"
# What a filter raises on a document its parameters make it fail on (a division by no words, say).
RULE_ERRORS = (TypeError, ValueError, ZeroDivisionError)


class FilterError(UsageError, ValueError):
    """A filter or parameter that cannot be used, said in one line."""


# Per document, what the filters note beside their decision: its language and the model's score
# for it (`language`, `language_score`), the replacements PII made (`emails`, `ips`).
Notes = dict[str, Any]
PII_KINDS = ("emails", "ips")


class Judged(NamedTuple):
    """What a web filter says of one document: whether it is kept, its text as kept, its notes."""

    kept: bool
    text: str
    notes: Notes


class Filters(Protocol):
    def judge_many(self, texts: Sequence[str]) -> list[tuple[str | None, str]]:
        """For each text: the reason of the first filter that removes it and the text, or None and
        the text as the filters leave it."""

    def judge_noted(self, texts: Sequence[str]) -> tuple[list[tuple[str | None, str]], list[Notes]]:
        """`judge_many`'s judgments, and each document's notes."""


def removal_reason(name: str, why: str | None) -> str:
    return f"{PREFIX}{name}:{why}" if why else f"{PREFIX}{name}"


def rule_failed(name: str, error: Exception) -> FilterError:
    """The error of a run whose filter `name` raised `error` (one of RULE_ERRORS) on a document."""
    return FilterError(
        f"filter {name} failed on a document ({type(error).__name__}: {error}); check its "
        "parameters"
    )
