"""spaCy imported for its tokenizer alone, without the array backends it would never use here.

spaCy imports thinc, and thinc imports torch and cupy wherever they are installed, to offer them as
backends: torch's import alone takes two to three seconds, longer than spaCy's own, and each run
with word filters paid it before its first unit. The filters use spaCy's tokenizer only, which
needs neither, so spaCy is imported with them hidden: a `None` in `sys.modules` makes their import
raise ImportError, as if they were not installed, which thinc expects and handles. They are hidden
only for that import, and only where this process has not imported them already.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType

UNUSED_BACKENDS = ("torch", "cupy")


@functools.cache
def import_spacy() -> ModuleType:
    hidden = [name for name in UNUSED_BACKENDS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import spacy
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return spacy
