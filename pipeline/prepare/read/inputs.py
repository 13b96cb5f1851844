"""Which files a run reads: literal paths first, then globs, and Hugging Face datasets as files.

A path that exists is taken literally, so a name holding glob characters (`a[1].txt`) means that
file; only a path that does not exist is expanded as a glob. A Hugging Face dataset (a hub id, or a
local directory) becomes the list of its data files, pinned: a hub id to the commit it resolves to
now, so that workers read exactly what the launcher planned.
"""

from __future__ import annotations

import dataclasses
import json
import os

from pipeline.dataset import storage
from pipeline.prepare.read import SOURCES, SourceError, format_of_name, hub
from schemas.prepare_config import PrepareConfig

_SAVED_DATASET = "state.json"
_SAVED_DATASET_DICT = "dataset_dict.json"


@dataclasses.dataclass(frozen=True)
class ResolvedInputs:
    files: tuple[tuple[str, str], ...]  # (path, format), in the order given, globs sorted
    hub_revisions: dict[str, str]  # hub id -> the commit it was pinned to


def resolve_inputs(
    specs: list[str], config: PrepareConfig, hub_revisions: dict[str, str]
) -> ResolvedInputs:
    """`hub_revisions` pins hub ids to a revision (an unfinished run's, or the user's); others take
    their default branch."""
    files: list[tuple[str, str]] = []
    revisions: dict[str, str] = {}
    for spec in specs:
        local = storage.is_local(spec)
        if config.format == "hf" or (local and os.path.isdir(spec)):
            dataset_files, revision = _dataset_files(spec, config, hub_revisions.get(spec))
            files += dataset_files
            if revision is not None:
                revisions[spec] = revision
            continue
        if storage.exists(spec):
            paths = [os.path.abspath(spec) if local else spec]
        else:
            paths = [os.path.abspath(p) if local else p for p in storage.glob(spec)]
            if not paths:
                raise SourceError(f"no input matches {spec!r}")
        files += [(path, _format(path, config)) for path in paths]
    seen = set()
    for path, _ in files:
        if path in seen:
            raise SourceError(f"input {path!r} is given twice; its documents would be duplicated")
        seen.add(path)
    return ResolvedInputs(tuple(files), revisions)


def _format(path: str, config: PrepareConfig) -> str:
    fmt = config.format or format_of_name(path)
    if fmt is None:
        raise SourceError(
            f"cannot tell the format of {path!r} from its name; pass --format "
            f"({', '.join(SOURCES)})"
        )
    return fmt


def _dataset_files(
    spec: str, config: PrepareConfig, revision: str | None
) -> tuple[list[tuple[str, str]], str | None]:
    """A Hugging Face dataset's data files for the configured split, and its pinned revision."""
    try:
        if storage.is_local(spec) and os.path.isdir(spec):
            directory = os.path.abspath(spec)
            saved = _saved_dataset_files(directory, config.hf_split)
            if saved is not None:
                return saved, None
            return hub.resolve_local_dataset(
                directory, name=config.hf_name, split=config.hf_split
            ), None
        resolved = hub.resolve_hub_dataset(
            spec, name=config.hf_name, split=config.hf_split, revision=revision
        )
    except hub.HubError as e:
        raise SourceError(str(e)) from None
    return [(f.url, f.format) for f in resolved.files], resolved.revision


def _saved_dataset_files(directory: str, split: str) -> list[tuple[str, str]] | None:
    """The Arrow files of a `datasets.save_to_disk` directory, or None if it is not one."""
    if os.path.exists(os.path.join(directory, _SAVED_DATASET_DICT)):
        with open(os.path.join(directory, _SAVED_DATASET_DICT)) as f:
            splits = json.load(f)["splits"]
        if split not in splits:
            raise SourceError(
                f"{directory}: no split {split!r} (splits: {sorted(splits)}); pass --hf-split"
            )
        directory = os.path.join(directory, split)
    if not os.path.exists(os.path.join(directory, _SAVED_DATASET)):
        return None
    with open(os.path.join(directory, _SAVED_DATASET)) as f:
        names = [entry["filename"] for entry in json.load(f)["_data_files"]]
    return [(os.path.join(directory, name), "arrow") for name in names]
