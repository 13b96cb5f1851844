"""The quality filters' reference, datatrove's own classes chained as its pipeline chains them, and
the documents the tests compare the project's filters with it on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.filters.base_filter import get_filter_result

from support.varied_text import varied_documents
from support.web_text import held_out_documents

CLASSES = {
    "gopher-quality": GopherQualityFilter,
    "gopher-repetition": GopherRepetitionFilter,
    "c4": C4QualityFilter,
    "fineweb": FineWebQualityFilter,
}
# Made by hand: empty and whitespace-only texts, lone symbols, every odd line break and space,
# contractions, abbreviations, emoticons, units, URLs and quotes.
EDGE_CASES = [
    "",
    " ",
    "\n",
    "\n\n\n",
    "\t",
    "\xa0",
    "\u2028",
    "\u3000",
    "ok",
    "#",
    "...",
    "…",
    "{}",
    "—",
    "-",
    "•",
    "A\u2028B\u2029C\x85D\x0bE\x0cF\x1cG\r\nH\rI",
    "word\xa0word\tword  word\u3000word.",
    "Don't stop. It's fine! I'm here? We're done.",
    "e.g. this. U.S. is big.  Really?! Yes.\tNo. Mr. Smith (see above).",
    "Hi.\tThere. Wait...  what?! Yes.\xa0No. A. B. C. dont gonna cannot :) <3 10km $20 C++ e-mail "
    "x86_64.",
    "https://www.example.com/a?b=c#d someone@example.com 10:30am 3.5% ½ № °C 'quoted' \"double\" "
    "«guillemets»",
]


def mixed_documents(count: int, seed: int) -> list[str]:
    """`count` varied documents, 60 web-like ones and the edge cases."""
    return varied_documents(seed, count) + held_out_documents(seed=seed, count=60) + EDGE_CASES


def datatrove_run(
    names: list[str], docs: list[str], params: Mapping[str, Mapping[str, Any]] | None = None
) -> list[tuple[str | None, str]]:
    """Per document, what datatrove's filters (built with `params`, chained) make of it: `(None,
    the text they keep)` (C4 drops lines), or `(the first removing filter's name and reason, the
    input text)`."""
    filters = [(name, CLASSES[name](**(params or {}).get(name, {}))) for name in names]
    out = []
    for text in docs:
        document = Document(text=text, id="")
        for name, rule in filters:
            kept, why = get_filter_result(rule.filter(document))
            if not kept:
                out.append((f"filter:{name}:{why}" if why else f"filter:{name}", text))
                break
        else:
            out.append((None, document.text))
    return out
