"""The packages `prepare`'s workers run: the launcher's exact versions, shipped and then checked.

A worker that tokenizes with another tiktoken, or writes with another array-record, than the
launcher writes shards the manifest misdescribes. So a run whose workers are not the launcher's own
processes stages exact pins of the launcher's versions (`staging_options`), and each worker compares
its versions with the launcher's (`version_mismatch`) before it writes anything.

How Beam (2.77) installs what is staged, on each worker of its default container:
`--requirements_file` first (`pip install -r`), then the sdist that the launcher built from
`--setup_file`, whose `>=` ranges the pins already meet, so they change nothing. The launcher
downloads nothing: `--requirements_cache=skip` stops it from `pip download`ing every pinned
package for the workers' platform and uploading them all at every launch; the workers fetch the
pinned wheels from PyPI as they start. A custom container (`--sdk_container_image`) is built with
its packages (`python -m pipeline.prepare.execution.worker_environment > requirements.txt` writes
them), and nothing is staged for it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
from collections.abc import Mapping, Sequence

from apache_beam.options.pipeline_options import (
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)
from apache_beam.runners.portability.stager import SKIP_REQUIREMENTS_CACHE
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import pipeline

DISTRIBUTION = "tokshards"
REQUIREMENTS_NAME = "worker-requirements.txt"

# The packages whose versions decide what prepare writes: tokenizer, shard format, readers.
_OUTPUT_PACKAGES = (
    "tokshards",
    "apache-beam",
    "array-record",
    "tiktoken",
    "tokenizers",
    "numpy",
    "pyarrow",
    "zstandard",
    "xxhash",
)
# The packages an extra brings that decide what prepare writes when a run needs that extra (the
# Hugging Face client reads hub files). A run that does not need them records nothing of them, so
# its manifest does not depend on what else happens to be installed.
_EXTRA_OUTPUT_PACKAGES = {
    "hf": ("datasets", "huggingface-hub"),
    "filters": ("datatrove", "spacy", "fasttext-predict"),
    "sentencepiece": ("sentencepiece",),
}
# Beam's own dependencies come with the SDK container of the launcher's Beam version: pinning them
# would reinstall them, and unsettle the container's other packages, on every worker.
_PINNED_WITHOUT_DEPENDENCIES = ("apache-beam",)
# Runners that ship nothing to their workers (Beam's class names for them, lowercased, without
# "runner"): the local ones run the workers in the launcher's processes, on its interpreter (Prism's
# default environment is such a loopback too); Dask's workers import the package installed on each
# of its machines.
_SHIP_NOTHING = ("direct", "switchingdirect", "bundlebaseddirect", "fnapi", "prism", "dask")


def worker_requirements(extras: Sequence[str] = ()) -> list[str]:
    """`name==version` of every package a prepare worker needs, as installed here, sorted.

    The closure of tokshards' base requirements (and of the `extras` the run needs, such as
    `("hf",)`), following each package's own requirements; Beam's are left to its container.
    """
    pins: dict[str, str] = {}
    followed: set[tuple[str, str]] = set()
    pending = _own_requirements(extras)
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(
                f"{requirement.name} (needed by prepare's workers) is not installed here, so its "
                f"version cannot be pinned; install tokshards with its requirements: "
                f"pip install -e '.[{','.join(('gcp', *extras))}]'"
            ) from None
        pins[name] = f"{name}=={distribution.version}"
        if name in _PINNED_WITHOUT_DEPENDENCIES:
            continue
        for extra in ("", *sorted(requirement.extras)):
            if (name, extra) not in followed:
                followed.add((name, extra))
                pending += _requirements_for(distribution.requires, extra)
    return sorted(pins.values())


def _requirements_for(lines: list[str] | None, extra: str) -> list[Requirement]:
    """Those of `lines` (Requires-Dist) that apply here, with `extra` asked for."""
    requirements = [Requirement(line) for line in lines or ()]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": extra})]


def _own_requirements(extras: Sequence[str]) -> list[Requirement]:
    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            f"{DISTRIBUTION} is not installed in this environment ({sys.prefix}), so its "
            "requirements are unknown; install it from the checkout: pip install -e '.[gcp]'"
        ) from None
    declared = distribution.metadata.get_all("Provides-Extra") or []
    unknown = sorted(set(extras) - set(declared))
    if unknown:
        raise ValueError(
            f"unknown extras {unknown} (got {extras=}); {DISTRIBUTION} declares {sorted(declared)}"
        )
    return [r for extra in ("", *extras) for r in _requirements_for(distribution.requires, extra)]


def package_versions(extras: Sequence[str] = ()) -> dict[str, str]:
    """What the manifest records, and what a worker must share with the launcher, for a run that
    needs `extras` (`("hf",)` for one that reads Hugging Face hub files)."""
    names = [
        *_OUTPUT_PACKAGES,
        *(name for extra in extras for name in _EXTRA_OUTPUT_PACKAGES.get(extra, ())),
    ]
    return {
        "python": platform.python_version(),
        **{n: _installed_version(n) or "not installed" for n in names},
    }


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_differences(
    expected: Mapping[str, str], actual: Mapping[str, str]
) -> list[tuple[str, str, str]]:
    """`(name, expected, actual)` of each package whose versions differ ("none"/"missing" for one
    absent on a side).

    Python is compared by major.minor: runners pick the workers' Python by it, and patch releases
    differ between a launcher and a worker container without changing what prepare computes.
    """
    differences = []
    for name in [*expected, *(n for n in actual if n not in expected)]:
        want, have = expected.get(name), actual.get(name)
        if name == "python" and want and have:
            same = want.split(".")[:2] == have.split(".")[:2]
        else:
            same = want == have
        if not same:
            differences.append((name, want or "none", have or "missing"))
    return differences


def version_mismatch(expected: Mapping[str, str], actual: Mapping[str, str]) -> str | None:
    """The differences as one line (`tiktoken 0.9.0 (expected 0.14.0), ...`), or None."""
    differences = version_differences(expected, actual)
    return ", ".join(f"{name} {have} (expected {want})" for name, want, have in differences) or None


def staging_options(
    pipeline_args: Sequence[str], workdir: str, extras: Sequence[str] = ()
) -> list[str]:
    """The Beam options to add so that remote workers run this checkout at the launcher's versions.

    `--setup_file` (this checkout's), `--requirements_file` (written into `workdir`, which must
    outlive the submission) and `--requirements_cache=skip`, each only where the user set none.
    Nothing for workers that run in the launcher's processes, or in a custom container.
    """
    options = PipelineOptions(list(pipeline_args))
    workers = options.view_as(WorkerOptions)
    if (
        _ships_nothing(options)
        or workers.sdk_container_image
        or workers.worker_harness_container_image
    ):
        return []
    setup = options.view_as(SetupOptions)
    added = []
    if setup.setup_file is None:
        added.append(f"--setup_file={_checkout_setup_file()}")
    if setup.requirements_file is None:
        path = os.path.join(workdir, REQUIREMENTS_NAME)
        with open(path, "w") as f:
            f.write(requirements_text(extras))
        added.append(f"--requirements_file={path}")
        if setup.requirements_cache is None:
            added.append(f"--requirements_cache={SKIP_REQUIREMENTS_CACHE}")
    return added


def _ships_nothing(options: PipelineOptions) -> bool:
    environment = options.view_as(PortableOptions).environment_type
    if environment is not None:
        return environment.upper() == "LOOPBACK"
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    return runner.rsplit(".", 1)[-1].lower().removesuffix("runner") in _SHIP_NOTHING


def _checkout_setup_file() -> str:
    # The directory holding the `pipeline` package: a checkout's root, or site-packages.
    root = os.path.dirname(os.path.dirname(os.path.abspath(pipeline.__file__)))
    path = os.path.join(root, "setup.py")
    if not os.path.isfile(path):
        raise ValueError(
            f"no setup.py at {root}: tokshards runs from an installed package, not a checkout, so "
            "there is nothing to build for the workers; run from a checkout "
            "(pip install -e '.[gcp]'), or pass --setup_file=CHECKOUT/setup.py, or "
            "--sdk_container_image=IMAGE with tokshards in it"
        )
    return path


def requirements_text(extras: Sequence[str] = ()) -> str:
    """A pip requirements file of `worker_requirements`, saying where its versions come from."""
    header = (
        "# prepare workers: the versions installed on the launcher (Python "
        f"{platform.python_version()})\n"
    )
    return header + "".join(pin + "\n" for pin in worker_requirements(extras))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.prepare.execution.worker_environment",
        description="Print the pins of what prepare's workers need, at the versions installed "
        "here: the requirements of a custom worker container (--sdk_container_image).",
    )
    parser.add_argument(
        "--extra", action="append", default=[], help="an extra the runs need too (hf); repeatable"
    )
    args = parser.parse_args(argv)
    sys.stdout.write(requirements_text(args.extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
