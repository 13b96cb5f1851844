"""How often the fast filters decide as datatrove's classes do, on held-out text no rule was tuned
on: at least 99.5% of documents for each filter and for the chain, the same kept text wherever both
keep a document, and the exact mode (`--filter-impl datatrove`) equal to datatrove on every one.

The reference is datatrove's classes chained as its pipeline chains them. The documents are
tests/support/varied_text.py's (a seed used nowhere else: prose, menus, repeated lines and
paragraphs, code, bullet lists, URLs, numbers, non-English, very short and very long documents, odd
whitespace), tests/support/web_text.py's, and a few made by hand. `pytest -n 0 -s` prints the
figures docs/filters.md quotes.
"""

from __future__ import annotations

import pytest

from pipeline.prepare.clean.quality.quality_filters import quality_filters
from schemas.prepare_config import FILTER_NAMES
from support.filter_reference import EDGE_CASES, datatrove_run
from support.varied_text import varied_documents
from support.web_text import held_out_documents

pytestmark = pytest.mark.slow

RUNS = [[name] for name in FILTER_NAMES] + [list(FILTER_NAMES)]
MIN_AGREEMENT = 0.995


@pytest.fixture(scope="module")
def documents() -> list[str]:
    docs = varied_documents(seed=2024, count=1500) + held_out_documents(seed=7, count=440)
    # A text datatrove's spaCy refuses (a lone surrogate) has no reference decision.
    return [d for d in docs + EDGE_CASES if not any("\ud800" <= c <= "\udfff" for c in d)]


@pytest.mark.parametrize("names", RUNS, ids=["+".join(n) for n in RUNS])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # datatrove's np.mean of no words
def test_the_fast_filters_decide_as_datatrove(names, documents):
    expected = datatrove_run(names, documents)
    fast = quality_filters(names, {}, "fast").judge_many(documents)
    same = sum(a[0] == b[0] for a, b in zip(fast, expected))
    kept = [(a[1], b[1]) for a, b in zip(fast, expected) if a[0] is None and b[0] is None]
    print(
        f"\n{'+'.join(names)}: same decision and reason on {same}/{len(documents)} documents "
        f"({100 * same / len(documents):.2f}%), kept text equal on "
        f"{sum(a == b for a, b in kept)}/{len(kept)}"
    )
    assert same >= MIN_AGREEMENT * len(documents)
    assert all(a == b for a, b in kept)
    assert 0 < len(kept) < len(documents) - 100, "the documents must test the rules both ways"
    assert quality_filters(names, {}, "datatrove").judge_many(documents) == expected
