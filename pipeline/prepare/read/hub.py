"""Hugging Face Hub datasets, pinned: a hub id resolved once to a commit and its data files.

The launcher resolves the id with `datasets`' own rules (which config, which split, which files,
which builder), so a run reads exactly the files `load_dataset` would, and records the commit. The
workers then read those files at that commit, each only the range its unit names, through
`HfFileSystem`: no process loads a whole dataset, and a commit pushed during the run changes
nothing it reads.

The clients read `HF_ENDPOINT`, `HF_TOKEN` (gated and private repos) and `HF_HOME` from the
environment, on the launcher and on every worker. They are imported only when used (`datasets`
only on the launcher, to resolve), so this module imports without them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from schemas.errors import RunError
from schemas.prepare_config import FILE_FORMATS

if TYPE_CHECKING:
    from datasets import DatasetBuilder
    from huggingface_hub import DatasetInfo, HfFileSystem

# The `datasets` builders whose files the project reads: the format it reads them as, and the file
# name endings `datasets` picks that builder for. `datasets` reads every config of a repo with one
# builder, so a file with another ending would not be read as its name says. The files are the
# ones `load_dataset` reads; how they are cut into documents is the project's (a text file splits
# at separator lines, not into one row per line as `datasets` does).
_BUILDERS = {
    "parquet": ("parquet", (".parquet", ".geoparquet", ".gpq")),
    "json": ("jsonl", (".jsonl", ".json", ".ndjson")),
    "text": ("text", (".txt",)),
    "arrow": ("arrow", (".arrow",)),
}
# Compressions the readers undo; `datasets` would also open other compressions and archives.
_DECOMPRESSED = {"jsonl": (".gz", ".zst")}
# Ranged reads fetch this much beyond what was asked, so that small reads (a Parquet footer,
# a search for a line end) share a request; big reads (a unit's range) over-read by little.
_READAHEAD_BYTES = 256 * 2**10
_PINNED_URL = re.compile(
    r"hf://datasets/(?P<repo>[^/@]+/[^/@]+)@(?P<revision>[0-9a-f]{40})/(?P<path>.+)"
)


class HubError(RunError, ValueError):
    """A hub dataset that cannot be resolved or read as asked: the message names it and the fix."""


@dataclasses.dataclass(frozen=True)
class HubFile:
    """One data file of a resolved split: `url` is pinned to the commit it was resolved at, `path`
    is its path in the repo, `format` one of the project's file formats."""

    url: str
    path: str
    size: int
    format: str

    def __post_init__(self) -> None:
        match = _PINNED_URL.fullmatch(self.url)
        if match is None or match["path"] != self.path:
            raise ValueError(
                f"url must be hf://datasets/REPO@COMMIT_SHA/{self.path} (got {self.url=})"
            )
        if self.size < 0:
            raise ValueError(f"size must be non-negative (got {self.size=})")
        if self.format not in FILE_FORMATS:
            raise ValueError(f"format must be one of {FILE_FORMATS} (got {self.format=})")


@dataclasses.dataclass(frozen=True)
class ResolvedHubDataset:
    """A split of one config of a hub dataset, fixed at one commit: what a run plans and records."""

    repo_id: str
    revision: str
    config_name: str
    split: str
    files: tuple[HubFile, ...]

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[0-9a-f]{40}", self.revision):
            raise ValueError(f"revision must be a commit sha (got {self.revision=})")
        if not self.files:
            raise ValueError(f"a resolved split has at least one file (got {self.files=})")
        prefix = f"hf://datasets/{self.repo_id}@{self.revision}/"
        for file in self.files:
            if not file.url.startswith(prefix):
                raise ValueError(f"every file must be pinned to {prefix} (got {file.url=})")


def resolve_hub_dataset(
    repo_id: str, *, name: str | None = None, split: str = "train", revision: str | None = None
) -> ResolvedHubDataset:
    """The files of `split` in config `name` of `repo_id`, at `revision` (a branch, tag or sha;
    the default branch when None) pinned to its commit sha.

    Reads the repo's card and file listing, never its data files.
    """
    info = _dataset_info(repo_id, revision)
    where = f"Hugging Face dataset {repo_id!r} at {info.sha}"
    builder = _builder(repo_id, name, info.sha, gated=bool(info.gated), where=where)
    data_files = builder.config.data_files or {}
    if split not in data_files:
        raise HubError(
            f"{where}: config {builder.config.name!r} has no split {split!r} "
            f"(splits: {sorted(data_files)}); pass --hf-split"
        )
    fmt = _format_of(builder, where)
    prefix = f"hf://datasets/{repo_id}@{info.sha}/"
    files = []
    for url in data_files[split]:  # `datasets` refuses data files outside the repo
        _check_name(url, builder.name, where)
        files.append(HubFile(url=url, path=url[len(prefix) :], size=hub_file_size(url), format=fmt))
    return ResolvedHubDataset(repo_id, info.sha, builder.config.name, split, tuple(files))


def resolve_local_dataset(
    directory: str, *, name: str | None = None, split: str = "train"
) -> list[tuple[str, str]]:
    """(path, format) of the data files of `split` in a local directory laid out as a hub dataset
    (data files, maybe a card naming configs), by the same rules as a hub id."""
    where = f"dataset directory {directory}"
    builder = _builder(directory, name, None, gated=False, where=where)
    data_files = builder.config.data_files or {}
    if split not in data_files:
        raise HubError(
            f"{where}: no split {split!r} (splits: {sorted(data_files)}); pass --hf-split"
        )
    fmt = _format_of(builder, where)
    for path in data_files[split]:
        _check_name(path, builder.name, where)
    return [(path, fmt) for path in data_files[split]]


def open_hub_file(url: str) -> BinaryIO:
    """A seekable binary reader of a pinned file that fetches only the ranges read (HTTP
    `Range`)."""
    with _pinned(url) as fs:
        return fs.open(url, "rb", block_size=_READAHEAD_BYTES, cache_type="readahead")


def hub_file_size(url: str) -> int:
    with _pinned(url) as fs:
        return fs.size(url)


def pinned_revision(url: str) -> str:
    """The commit a pinned url names; HubError for an unpinned one."""
    match = _PINNED_URL.fullmatch(url)
    if match is None:
        raise HubError(
            f"{url!r} is not pinned to a commit; read the urls resolve_hub_dataset gives"
        )
    return match["revision"]


@contextlib.contextmanager
def _pinned(url: str) -> Iterator[HfFileSystem]:
    """The filesystem to reach a pinned url through; a file that is gone is a HubError."""
    from huggingface_hub import HfFileSystem

    pinned_revision(url)
    try:
        yield HfFileSystem()
    except FileNotFoundError as e:
        raise HubError(
            f"{url}: not on the Hub ({e}); was the commit squashed or the repo deleted?"
        ) from None


def _dataset_info(repo_id: str, revision: str | None) -> DatasetInfo:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return HfApi().dataset_info(repo_id, revision=revision)
    except HFValidationError as e:
        raise HubError(
            f"{repo_id!r} is not a Hugging Face dataset id ({e}); pass NAMESPACE/NAME"
        ) from None
    except RevisionNotFoundError:
        raise HubError(
            f"Hugging Face dataset {repo_id!r} has no revision {revision!r}; pass a branch, tag or "
            "commit sha"
        ) from None
    except RepositoryNotFoundError:
        raise HubError(
            f"Hugging Face dataset {repo_id!r} does not exist or is private; check the id, "
            "or set HF_TOKEN to a token that can read it"
        ) from None
    except _network_errors() as e:
        raise _unreachable(repo_id, e) from None


def _builder(
    repo_id: str, name: str | None, sha: str | None, *, gated: bool, where: str
) -> DatasetBuilder:
    import datasets
    from huggingface_hub import constants

    try:
        return datasets.load_dataset_builder(repo_id, name, revision=sha)
    except datasets.exceptions.DatasetNotFoundError as e:
        if gated:
            raise HubError(
                f"{where}: the dataset is gated; accept its conditions at "
                f"{constants.ENDPOINT}/datasets/{repo_id} and set HF_TOKEN to a token of that "
                "account"
            ) from None
        raise HubError(f"{where}: {e}; set HF_TOKEN to a token that can read it") from None
    except _network_errors() as e:
        raise _unreachable(repo_id, e) from None
    except ValueError as e:
        configs = datasets.get_dataset_config_names(repo_id, revision=sha)
        if name is not None and name not in configs:
            raise HubError(
                f"{where}: no config {name!r} (configs: {configs}); pass --hf-name"
            ) from None
        if name is None and len(configs) > 1:
            raise HubError(f"{where}: several configs ({configs}); pass --hf-name") from None
        raise HubError(f"{where}: `datasets` cannot resolve its data files: {e}") from None
    except (FileNotFoundError, RuntimeError) as e:  # no data files, or a loading script
        raise HubError(f"{where}: `datasets` cannot resolve its data files: {e}") from None


def _format_of(builder: DatasetBuilder, where: str) -> str:
    if builder.name not in _BUILDERS:
        raise HubError(
            f"{where}: its files are read by the {builder.name!r} builder; "
            f"only {sorted(_BUILDERS)} data files are supported"
        )
    fmt = _BUILDERS[builder.name][0]
    # Reader options in the dataset card that would change which rows `load_dataset` yields.
    changed = {
        option: getattr(builder.config, option)
        for option in ("field", "filters")
        if getattr(builder.config, option, None) is not None
    }
    if changed:
        raise HubError(
            f"{where}: config {builder.config.name!r} sets {changed}, which is not supported"
        )
    return fmt


def _check_name(url: str, builder_name: str, where: str) -> None:
    fmt, endings = _BUILDERS[builder_name]
    compressions = _DECOMPRESSED.get(fmt, ())
    name = next((url[: -len(c)] for c in compressions if url.endswith(c)), url)
    if not name.lower().endswith(endings):
        raise HubError(
            f"{where}: `datasets` reads all the repo's data files with the {builder_name!r} "
            f"builder, but {url} is not named {'/'.join(endings)}"
            + (f" (plain or compressed as {'/'.join(compressions)})" if compressions else "")
        )


def _network_errors() -> tuple[type[Exception], ...]:
    from huggingface_hub.errors import OfflineModeIsEnabled
    from huggingface_hub.utils import (
        httpx,  # the HTTP client huggingface_hub raises errors of
    )

    return (OfflineModeIsEnabled, httpx.TransportError)


def _unreachable(repo_id: str, error: Exception) -> HubError:
    from huggingface_hub import constants

    return HubError(
        f"cannot reach the Hugging Face Hub at {constants.ENDPOINT} for {repo_id!r} "
        f"({type(error).__name__}: {error}); check the network and HF_ENDPOINT, and unset "
        "HF_HUB_OFFLINE"
    )
