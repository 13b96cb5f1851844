"""Property tests in two tiers: a few examples answer in the unit tier, the full count runs in the
slow tier that CI adds, so the unit tier stays under a minute without testing less in CI."""

from __future__ import annotations

import pytest


def tiered(fast: int, full: int) -> list:
    """`max_examples` values to parametrize by: `fast` in the unit tier, `full` marked slow."""
    return [
        pytest.param(fast, id=f"{fast}-examples"),
        pytest.param(full, id=f"{full}-examples", marks=pytest.mark.slow),
    ]
