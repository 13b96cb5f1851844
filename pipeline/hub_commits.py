"""A Hugging Face Hub model repo's revision resolved to the commit it names now.

The launcher pins every hub file a run reads this way, hub tokenizers (`tokenization.hub`) and the
web filters' fastText models (`prepare.clean.web.fasttext_models`) alike, and the config records
the commit, so every process, and a rerun, reads the same bytes.
"""

from __future__ import annotations

import re

PINNED = re.compile(r"[0-9a-f]{40}")


def is_commit(revision: str | None) -> bool:
    return revision is not None and PINNED.fullmatch(revision) is not None


def commit_of(repo: str, revision: str | None) -> str:
    """The commit `revision` (a branch, tag or commit; `main` when None) of model repo `repo` names
    now; a commit names itself, without asking the Hub. Raises what the client raises (not found,
    gated, unreachable; ImportError without the client): each caller says it in its own error."""
    if is_commit(revision):
        return revision
    from huggingface_hub import HfApi

    return HfApi().model_info(repo, revision=revision).sha
