"""Opening prepared directories for the loader: each manifest checked, every shard present at its
size (hashed too on request), the sources of a mixture agreeing, the split there in each."""

from __future__ import annotations

from etils import epath

from pipeline.dataset.integrity import shard_problems
from pipeline.load.data_spec import DataSource
from pipeline.load.errors import LoaderError
from pipeline.load.mixture import check_compatible
from schemas import formats
from schemas.manifest import Manifest, ManifestError

# Token ids leave the loader as int32 (what embedding lookups take).
MAX_VOCAB = 2**31


def open_prepared(data_dir: str, *, verify: bool = False) -> Manifest:
    """The validated manifest of a prepared directory whose shards are all present.

    Sizes are always checked (one stat per shard) so that a truncated copy fails here, not in the
    middle of training; hashes only with `verify`, since that reads every byte.
    """
    root = epath.Path(data_dir)
    path = root / formats.MANIFEST_NAME
    if not path.exists():
        raise LoaderError(
            f"{data_dir} has no {formats.MANIFEST_NAME}; point the loader at the output directory "
            "of a finished `python -m pipeline prepare` run"
        )
    try:
        manifest = Manifest.from_json(path.read_text())
    except (ManifestError, ValueError) as e:
        raise LoaderError(f"{path}: {e}") from None
    if manifest.tokenizer.n_vocab > MAX_VOCAB:
        raise LoaderError(
            f"vocabulary of {manifest.tokenizer.n_vocab} ids does not fit int32 batches"
        )

    def size_of(relative: str) -> int | None:
        shard_path = root / relative
        return shard_path.stat().length if shard_path.exists() else None

    problem = next(
        shard_problems(
            manifest.shards,
            size_of=size_of,
            open_binary=lambda p: (root / p).open("rb"),
            hashes=verify,
        ),
        None,
    )
    if problem is not None:
        raise LoaderError(
            f"{problem} (listed in {path}): the copy is incomplete or the directory was modified; "
            "copy or prepare it again"
        )
    return manifest


def open_sources(sources: tuple[DataSource, ...], *, verify: bool = False) -> tuple[Manifest, ...]:
    """`open_prepared` for every source, in order, refusing sources that do not share one
    tokenizer."""
    manifests = tuple(open_prepared(s.path, verify=verify) for s in sources)
    check_compatible([s.name for s in sources], manifests)
    return manifests


def check_split(
    sources: tuple[DataSource, ...], manifests: tuple[Manifest, ...], split: str
) -> None:
    """Refuses a split that some source was prepared without."""
    for source, manifest in zip(sources, manifests):
        if not manifest.shards_of(split):
            present = sorted({s.split for s in manifest.shards})
            raise LoaderError(
                f"{source.path} has no {split!r} split (it has {present}); "
                "choose one of those or prepare with --validation-fraction"
            )
