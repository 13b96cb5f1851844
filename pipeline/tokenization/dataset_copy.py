"""The tokenizer a prepared directory keeps, so that `inspect`, `train` and `sample` need nothing
else.

prepare saves the tokenizer it encoded with into `tokenizer/` of its output, the way a training run
saves its own (`Tokenizer.save`): a `tokenizer.json` with its config, a SentencePiece
`tokenizer.model`, or a tiktoken spec file with its rank file; a hub model's files come from the
cache its pinned commit was read into. The
manifest's `tokenizer_copy` names the file that loads it and every file's SHA-256. A tiktoken
encoding given by name (`gpt2`, shipped with the package) loads from its name and has no copy.

Readers pass what reads the directory's files (Beam's filesystems on the prepare side, etils on the
loader's), so a directory on an object store works as a local one does; there the copy is fetched
once per process into a temporary directory that lives as long as the process.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable

from pipeline.tokenization.boundaries import TokenizerError
from pipeline.tokenization.specs import Tokenizer, is_path_spec, load_tokenizer
from schemas import formats
from schemas.manifest import Manifest, TokenizerCopy

ReadFile = Callable[
    [str], bytes
]  # a path in the directory -> its bytes; FileNotFoundError if absent


def save_copy(tokenizer: Tokenizer, write: Callable[[str, bytes], None]) -> TokenizerCopy | None:
    """Writes the tokenizer's files through `write(relative_path, data)`, which must publish each
    whole or not at all; None for an encoding that loads by its name."""
    with tempfile.TemporaryDirectory(prefix="tokenizer-") as scratch:
        load_as = tokenizer.save(scratch)
        if os.path.dirname(load_as) != scratch:
            return None
        files = {}
        for name in sorted(os.listdir(scratch)):
            with open(os.path.join(scratch, name), "rb") as f:
                data = f.read()
            relative = f"{formats.TOKENIZER_COPY_DIR}/{name}"
            write(relative, data)
            files[relative] = hashlib.sha256(data).hexdigest()
    return TokenizerCopy(
        load_as=f"{formats.TOKENIZER_COPY_DIR}/{os.path.basename(load_as)}", files=files
    )


def checked_file(data_dir: str, relative: str, sha256: str, read: ReadFile) -> bytes:
    """A file of the copy, checked against the manifest's hash of it; a TokenizerError naming it
    where it is missing or holds other bytes."""
    try:
        data = read(os.path.join(data_dir, relative))
    except FileNotFoundError:
        raise TokenizerError(
            f"{os.path.join(data_dir, relative)} is missing: {data_dir} lacks the tokenizer "
            "files it was prepared with; copy the whole directory, or prepare it again"
        ) from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise TokenizerError(
            f"{os.path.join(data_dir, relative)} is not the tokenizer file prepare wrote (its "
            "SHA-256 differs from the manifest's); restore it, or prepare the directory again"
        )
    return data


def _checked(data_dir: str, copy: TokenizerCopy, read: ReadFile) -> dict[str, bytes]:
    return {
        relative: checked_file(data_dir, relative, sha256, read)
        for relative, sha256 in copy.files.items()
    }


# Remote directories' copies fetched by this process, by directory and copy; each is removed when
# the process ends.
_FETCHED: dict[tuple, tempfile.TemporaryDirectory] = {}


def _fetched(data_dir: str, copy: TokenizerCopy, read: ReadFile) -> str:
    """A local directory holding a remote directory's copy."""
    key = (data_dir, copy.load_as, tuple(sorted(copy.files.items())))
    if key not in _FETCHED:
        scratch = tempfile.TemporaryDirectory(prefix="tokenizer-")
        for relative, data in _checked(data_dir, copy, read).items():
            path = os.path.join(scratch.name, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        _FETCHED[key] = scratch
    return _FETCHED[key].name


def copy_spec(data_dir: str, manifest: Manifest, read: ReadFile) -> str:
    """The spec that loads the directory's tokenizer here: its copy, checked against the manifest's
    hashes, or the encoding's name. A directory prepared before copies were kept names the file it
    was prepared from, which must still be where it was."""
    copy = manifest.tokenizer_copy
    if copy is None:
        spec = manifest.config.tokenizer
        if is_path_spec(spec) and not os.path.exists(spec):
            raise TokenizerError(
                f"{data_dir} holds no copy of its tokenizer (prepared by an earlier version) and "
                f"the file it was prepared with, {spec}, is gone; put it back there, or prepare "
                "the directory again"
            )
        return spec
    if "://" not in data_dir:
        _checked(data_dir, copy, read)
        return os.path.join(data_dir, copy.load_as)
    return os.path.join(_fetched(data_dir, copy, read), copy.load_as)


def load_copy(data_dir: str, manifest: Manifest, read: ReadFile) -> Tokenizer:
    """The directory's tokenizer with the boundary rule it was prepared with, checked to give the
    manifest's ids."""
    config = manifest.config
    tokenizer = load_tokenizer(
        copy_spec(data_dir, manifest, read), bos_token=config.bos_token, eos_token=config.eos_token
    )
    if tokenizer.info.vocab_sha256 != manifest.tokenizer.vocab_sha256:
        raise TokenizerError(
            f"the tokenizer of {data_dir} now has identity {tokenizer.info.vocab_sha256[:12]}, not "
            f"the manifest's {manifest.tokenizer.vocab_sha256[:12]}; prepare the directory again"
        )
    return tokenizer
