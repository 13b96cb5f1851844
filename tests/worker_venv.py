"""A prepare worker's environment, made as a Dataflow worker's is, for tests that run code in it.

The sdist is the one Beam's own stager builds from setup.py for `--setup_file`; it is installed
with the base requirements only, pinned by constraints.txt, into a new virtual environment that
does not see the dev one, and commands run from outside the checkout, so no module can come from
the source tree. conftest.py registers the fixtures, so every module shares one sdist and one
environment.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.stager import WORKFLOW_TARBALL_FILE, Stager

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_FILE = os.path.join(REPO, "setup.py")
CONSTRAINTS = os.path.join(REPO, "constraints.txt")
INSTALL_TIMEOUT_S = 600


def build_sdist(dest: str) -> str:
    """The tarball Beam's stager builds for `--setup_file` and each worker pip-installs.

    Built by the stager itself (`python -m build --no-isolation --sdist`, or `setup.py sdist` where
    `build` is not installed), so the test sees what workers get, whatever Beam's version does.
    """
    options = PipelineOptions([f"--setup_file={SETUP_FILE}", "--requirements_cache=skip"])
    resources = Stager.create_job_resources(options, dest, log_submission_env_dependencies=False)
    staged = {name: src for src, name, _ in Stager.extract_staging_tuple_iter(resources)}
    return staged[WORKFLOW_TARBALL_FILE]


@dataclasses.dataclass(frozen=True)
class WorkerVenv:
    root: str

    def __post_init__(self):
        if os.path.commonpath([self.root, REPO]) == REPO:
            raise ValueError(f"the worker environment must be outside the checkout {REPO} (got {self.root=})")

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
            [self.python, *args], cwd=cwd, env=self.env(), capture_output=True, text=True, timeout=timeout
        )


def create_worker_venv(root: str, sdist: str) -> WorkerVenv:
    """A venv without pip (the dev one's pip installs into it) holding the sdist and its base requirements."""
    _run([sys.executable, "-m", "venv", "--without-pip", root], timeout=60)
    venv = WorkerVenv(root)
    pip = [sys.executable, "-m", "pip", "--python", venv.python, "install", "--no-compile", "--quiet"]
    _run([*pip, "--constraint", CONSTRAINTS, sdist], timeout=INSTALL_TIMEOUT_S)
    return venv


def _run(command: list[str], *, timeout: float) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-4000:]}")


@pytest.fixture(scope="session")
def worker_sdist(tmp_path_factory) -> str:
    return build_sdist(str(tmp_path_factory.mktemp("sdist")))


@pytest.fixture(scope="session")
def worker_venv(tmp_path_factory, worker_sdist) -> WorkerVenv:
    return create_worker_venv(str(tmp_path_factory.mktemp("worker") / "venv"), worker_sdist)
