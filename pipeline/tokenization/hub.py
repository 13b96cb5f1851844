"""Tokenizers of Hugging Face Hub models, pinned: `hf:ORG/NAME` or `hf:ORG/NAME@REVISION`.

The launcher resolves the revision (a branch, tag or sha; `main` when none is given) to its commit
once (`pin`), and the config records `hf:ORG/NAME@SHA`, so every process reads the same bytes and a
rerun reads what the first run read. Each process then fetches that commit's `tokenizer.json`, and
its `tokenizer_config.json` where the repo has one, or, in a repo with no `tokenizer.json` (a
SentencePiece model's), its `tokenizer.model`, into the Hugging Face cache (`HF_HOME`;
`HF_ENDPOINT` and `HF_TOKEN` apply as for hub datasets). The client, `huggingface_hub`, comes with
`tokenizers` in the base install.
"""

from __future__ import annotations

import re

from pipeline.hub_commits import commit_of, is_commit
from pipeline.tokenization.boundaries import TokenizerError
from pipeline.tokenization.sentencepiece_model import MODEL_FILE

PREFIX = "hf:"
_SPEC = re.compile(rf"{PREFIX}(?P<repo>[^/@\s]+/[^/@\s]+)(?:@(?P<revision>[^@\s]+))?")


def is_hub_spec(spec: str) -> bool:
    return spec.startswith(PREFIX)


def _parse(spec: str) -> tuple[str, str | None]:
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise TokenizerError(
            f"hub tokenizer {spec!r} is not {PREFIX}ORG/NAME or {PREFIX}ORG/NAME@REVISION"
        )
    return match["repo"], match["revision"]


def _client():
    try:
        import huggingface_hub
    except ImportError:
        raise TokenizerError(
            "hub tokenizers need the Hugging Face client: pip install huggingface_hub"
        ) from None
    return huggingface_hub


def pin(spec: str) -> str:
    """`spec` with its revision resolved to the commit it names now."""
    repo, revision = _parse(spec)
    _client()
    try:
        sha = commit_of(repo, revision)
    except Exception as e:  # the client's errors: not found, gated, unreachable
        raise TokenizerError(
            f"hub tokenizer {spec!r} cannot be resolved: {type(e).__name__}: {e}".split("\n")[0]
        ) from None
    return f"{PREFIX}{repo}@{sha}"


def download(spec: str) -> tuple[str, str]:
    """The local path of the pinned commit's tokenizer.json (its config beside it when the repo has
    one), or of its tokenizer.model where it has no tokenizer.json, and the repo id as the
    tokenizer's name."""
    repo, revision = _parse(spec)
    if not is_commit(revision):
        raise TokenizerError(
            f"hub tokenizer {spec!r} is not pinned to a commit; pin it with "
            "pipeline.tokenization.hub.pin"
        )
    hub = _client()
    from huggingface_hub.errors import EntryNotFoundError

    try:
        try:
            path = hub.hf_hub_download(repo, "tokenizer.json", revision=revision)
        except EntryNotFoundError:
            return hub.hf_hub_download(repo, MODEL_FILE, revision=revision), repo
        try:
            hub.hf_hub_download(repo, "tokenizer_config.json", revision=revision)
        except EntryNotFoundError:
            pass  # the rule then comes from tokenizer.json alone
    except EntryNotFoundError:
        raise TokenizerError(
            f"hub model {repo} has neither tokenizer.json nor {MODEL_FILE} at {revision}"
        ) from None
    except Exception as e:
        raise TokenizerError(
            f"hub tokenizer {spec!r} cannot be read: {type(e).__name__}: {e}".split("\n")[0]
        ) from None
    return path, repo
