"""A prepare worker's environment, made as a Dataflow worker's is, for tests that run code in it.

The sdist is the one Beam's own stager builds from setup.py for `--setup_file`; it is built into a
wheel and installed, without a package index, into a new virtual environment that sees none of the
dev one but the distributions its base requirements need (those and theirs, at the dev environment's
versions, which constraints.txt pins): what a worker installs for it, no more. Commands run from
outside the checkout, so no module can come from the source tree. conftest.py registers the
fixtures, so every module shares one sdist and one environment.
"""

from __future__ import annotations

import dataclasses
import email.parser
import glob
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETUP_FILE = os.path.join(REPO, "setup.py")
INSTALL_TIMEOUT_S = 600


def build_sdist(dest: str) -> str:
    """The tarball Beam's stager builds for `--setup_file` and each worker pip-installs.

    Built by the stager itself (`python -m build --no-isolation --sdist`, or `setup.py sdist` where
    `build` is not installed), so the test sees what workers get, whatever Beam's version does.
    """
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.stager import WORKFLOW_TARBALL_FILE, Stager

    options = PipelineOptions([f"--setup_file={SETUP_FILE}", "--requirements_cache=skip"])
    resources = Stager.create_job_resources(options, dest, log_submission_env_dependencies=False)
    staged = {name: src for src, name, _ in Stager.extract_staging_tuple_iter(resources)}
    return staged[WORKFLOW_TARBALL_FILE]


@dataclasses.dataclass(frozen=True)
class WorkerVenv:
    root: str

    def __post_init__(self):
        if os.path.commonpath([self.root, REPO]) == REPO:
            raise ValueError(
                f"the worker environment must be outside the checkout {REPO} (got {self.root=})"
            )

    @property
    def python(self) -> str:
        return os.path.join(self.root, "bin", "python")

    def env(self) -> dict[str, str]:
        """As if activated: `python` on PATH is this one, as Beam's worker pool expects."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["VIRTUAL_ENV"] = self.root
        env["PATH"] = os.path.join(self.root, "bin") + os.pathsep + env.get("PATH", "")
        return env

    def run(self, args: list[str], *, cwd: str, timeout: float) -> subprocess.CompletedProcess:
        """`python ARGS` in this environment; from `cwd`, which is on sys.path for `-m` and `-c`."""
        return subprocess.run(
            [self.python, *args],
            cwd=cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def create_worker_venv(root: str, sdist: str) -> WorkerVenv:
    """A venv without pip (the dev one's pip installs into it) holding the sdist, built into a wheel
    here, and links to the files of its base requirements (`required_distributions`) on its path:
    nothing is fetched."""
    _run([sys.executable, "-m", "venv", "--without-pip", root], timeout=60)
    venv = WorkerVenv(root)
    wheels = os.path.join(root, "wheels")
    pip = [sys.executable, "-m", "pip"]
    _run(
        [
            *pip,
            "wheel",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            wheels,
            sdist,
        ],
        timeout=INSTALL_TIMEOUT_S,
    )
    (wheel,) = glob.glob(os.path.join(wheels, "*.whl"))
    requirements = os.path.join(root, "requirements")
    for distribution in required_distributions(wheel):
        link_files(distribution, requirements)
    site_packages = sysconfig.get_path("purelib", vars={"base": root, "platbase": root})
    with open(os.path.join(site_packages, "requirements.pth"), "w") as f:
        f.write(
            f"import site; site.addsitedir({requirements!r})\n"
        )  # its .pth files too, as an install's
    _run(
        [
            *pip,
            "--python",
            venv.python,
            "install",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--quiet",
            wheel,
        ],
        timeout=INSTALL_TIMEOUT_S,
    )
    return venv


def required_distributions(wheel: str) -> list[importlib.metadata.Distribution]:
    """The dev environment's distributions that the wheel's base requirements need, and theirs: the
    closure a resolver installs, at the versions installed here, markers evaluated for this
    Python."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    wanted = [(Requirement(line), "") for line in metadata.get_all("Requires-Dist") or []]
    found: dict[str, importlib.metadata.Distribution] = {}
    extras: dict[str, set[str]] = {}
    while wanted:
        requirement, extra = wanted.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        key = canonicalize_name(requirement.name)
        if key in found and requirement.extras <= extras[key]:
            continue
        try:
            found[key] = importlib.metadata.distribution(key)
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(
                f"{requirement} is needed by the worker install but not installed here; "
                "run `make venv`"
            ) from None
        extras[key] = extras.get(key, set()) | requirement.extras
        for line in found[key].requires or []:
            wanted += [(Requirement(line), e) for e in ("", *extras[key])]
    return list(found.values())


def link_files(distribution: importlib.metadata.Distribution, directory: str) -> None:
    """Links every file `distribution` installed in its site-packages into `directory`, at the same
    place (scripts and other files outside it stay out)."""
    for file in distribution.files or ():
        source = distribution.locate_file(file)
        if ".." in file.parts or not os.path.exists(source):
            continue
        target = os.path.join(directory, *file.parts)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(source, target)


def _run(command: list[str], *, timeout: float) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-4000:]}"
        )


@pytest.fixture(scope="session")
def worker_sdist(tmp_path_factory) -> str:
    return build_sdist(str(tmp_path_factory.mktemp("sdist")))


@pytest.fixture(scope="session")
def worker_venv(tmp_path_factory, worker_sdist) -> WorkerVenv:
    return create_worker_venv(str(tmp_path_factory.mktemp("worker") / "venv"), worker_sdist)
