"""What workers get: the sdist Beam ships, the pins the launcher stages, and runs from an install.

The editable install of the dev environment hides packaging mistakes (a module or an asset left out
of the sdist works here and fails on Dataflow), so the slow tests install the sdist into a clean
environment and run prepare from it, in-process and through Beam's portable runner with an external
worker pool, and compare the bytes with a run from the source tree.
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
from typing import TYPE_CHECKING

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.stager import (
    REQUIREMENTS_FILE,
    WORKFLOW_TARBALL_FILE,
    Stager,
)
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pipeline.prepare.execution import worker_environment
from pipeline.prepare.execution.worker_environment import (
    package_versions,
    staging_options,
    version_mismatch,
    worker_requirements,
)
from pipeline.prepare.planning import make_plan, worker_extras
from schemas import formats
from schemas.prepare_config import PrepareConfig
from support.runs import REPO, run_outputs

if TYPE_CHECKING:
    from support.worker_venv import WorkerVenv


# What a prepare worker imports (setup.py's base), and what only other roles need.
PREPARE_PACKAGES = {
    "apache-beam",
    "array-record",
    "tiktoken",
    "tokenizers",
    "pyarrow",
    "zstandard",
    "numpy",
    "jsonschema",
}
NOT_FOR_WORKERS = {
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "matplotlib",
    "grain",
    "datasets",
    "pandas",
}
DATAFLOW = ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/tmp"]
DASK = "--runner=apache_beam.runners.dask.dask_runner.DaskRunner"
# Several units and both splits from a 300-story corpus.
PREPARE_ARGS = ["--unit-bytes", "16384", "--validation-fraction", "0.1"]
RUN_TIMEOUT_S = 300


def _pins(lines: list[str]) -> dict[str, str]:
    return dict(line.split("==") for line in lines)


# --- the sdist ---


@pytest.mark.integration
def test_sdist_holds_every_module_and_asset(worker_sdist):
    with tarfile.open(worker_sdist) as tar:
        shipped = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    with tarfile.open(worker_sdist) as tar:
        requires = (
            tar.extractfile(next(n for n in tar.getnames() if n.endswith("egg-info/requires.txt")))
            .read()
            .decode()
        )
    assert "[filters]\ndatatrove>=" in requires, "the filters extra ships with the sdist"
    patterns = [
        "pipeline/**/*.py",
        "schemas/*.py",
        "model/**/*.py",
        "train/**/*.py",
        "schemas/*.json",
    ]
    found = [
        path
        for pattern in patterns
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True)
    ]
    expected = {os.path.relpath(path, REPO) for path in found}
    expected |= {
        "pipeline/assets/r50k_base.tiktoken",
        "pipeline/assets/r50k_base.LICENSE",
        "setup.py",
    }
    assert len(expected) > 40
    assert sorted(expected - shipped) == []


# --- pins and versions ---


def test_worker_requirements_pin_the_base_and_what_it_needs_at_the_installed_versions():
    pins = _pins(worker_requirements())
    assert PREPARE_PACKAGES <= set(pins)
    assert not NOT_FOR_WORKERS & set(pins)
    assert "tokshards" not in pins, "the workers build tokshards from the staged sdist"
    for name, version in pins.items():
        assert importlib.metadata.version(name) == version
    # Closed: what each pinned package requires is pinned, but for Beam's own dependencies,
    # which come with its container (grpcio and protobuf are reached through nothing else).
    for name in set(pins) - {"apache-beam"}:
        for line in importlib.metadata.requires(name) or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                assert canonicalize_name(requirement.name) in pins, (
                    f"{name} needs {requirement.name}"
                )
    assert not {"grpcio", "protobuf"} & set(pins)


def test_worker_requirements_add_an_extra_only_when_asked():
    base, hf = _pins(worker_requirements()), _pins(worker_requirements(["hf"]))
    assert set(base) < set(hf)
    assert {"datasets", "pandas"} <= set(hf) - set(base)
    assert "huggingface-hub" in base, "tokenizers (a base requirement) brings the hub client"
    assert not {"jax", "grain"} & set(hf)
    with pytest.raises(ValueError, match=r"unknown extras \['trian'\].*declares \[.*'train'"):
        worker_requirements(["trian"])


def test_a_filtered_run_ships_and_records_datatrove_spacy_and_fasttext(tmp_path):
    base, filters = _pins(worker_requirements()), _pins(worker_requirements(["filters"]))
    for name in ("datatrove", "spacy", "thinc", "loguru", "fasttext-predict"):
        assert filters[name] == importlib.metadata.version(name) and name not in base
    assert not NOT_FOR_WORKERS & set(filters)
    versions = package_versions(("filters",))
    assert (
        versions["datatrove"] == importlib.metadata.version("datatrove")
        and "datatrove" not in package_versions()
    )
    corpus = tmp_path / "a.txt"
    corpus.write_text("one document\n")
    config = PrepareConfig(filters=["c4"])
    assert worker_extras(make_plan([str(corpus)], config)) == ("filters",)
    assert worker_extras(make_plan([str(corpus)], PrepareConfig())) == ()
    added = staging_options(DATAFLOW, str(tmp_path), ["filters"])
    staged = open(tmp_path / worker_environment.REQUIREMENTS_NAME).read().splitlines()[1:]
    assert f"--requirements_file={tmp_path / worker_environment.REQUIREMENTS_NAME}" in added
    assert (
        f"datatrove=={versions['datatrove']}" in staged and f"spacy=={versions['spacy']}" in staged
    )


def test_package_versions_are_the_installed_ones():
    versions = package_versions()
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    for name in (
        "tokshards",
        "apache-beam",
        "array-record",
        "tiktoken",
        "tokenizers",
        "numpy",
        "pyarrow",
        "zstandard",
    ):
        assert versions[name] == importlib.metadata.version(name)
    # The Hugging Face client's only for a run that reads hub files.
    assert "datasets" not in versions
    assert package_versions(("hf",))["huggingface-hub"] == importlib.metadata.version(
        "huggingface-hub"
    )


LAUNCHER = {"python": "3.11.7", "tiktoken": "0.14.0", "numpy": "2.4.6", "datasets": "5.2.0"}


@pytest.mark.parametrize(
    "worker, expected",
    [
        (LAUNCHER, None),
        ({**LAUNCHER, "python": "3.11.9"}, None),  # a container's patch release
        (
            {k: v for k, v in LAUNCHER.items() if k != "datasets"},
            "datasets missing (expected 5.2.0)",
        ),
        ({**LAUNCHER, "tiktoken": "0.9.0"}, "tiktoken 0.9.0 (expected 0.14.0)"),
        ({**LAUNCHER, "python": "3.12.1"}, "python 3.12.1 (expected 3.11.7)"),
        ({**LAUNCHER, "datasets": "4.0.0"}, "datasets 4.0.0 (expected 5.2.0)"),
        (
            {**LAUNCHER, "tiktoken": "0.9.0", "numpy": "not installed"},
            "tiktoken 0.9.0 (expected 0.14.0), numpy not installed (expected 2.4.6)",
        ),
        ({k: v for k, v in LAUNCHER.items() if k != "numpy"}, "numpy missing (expected 2.4.6)"),
    ],
)
def test_version_mismatch(worker, expected):
    assert version_mismatch(LAUNCHER, worker) == expected


# --- staging ---


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--runner=DirectRunner"],
        ["--runner=FnApiRunner"],
        ["--runner=PrismRunner"],
        ["--runner=PortableRunner", "--environment_type=LOOPBACK"],
        [*DATAFLOW, "--sdk_container_image=gcr.io/p/prepare:1"],
        [DASK, "--dask_client_address=127.0.0.1:8786"],
    ],
)
def test_nothing_is_staged_for_workers_in_the_launchers_processes_dask_or_a_custom_container(
    args, tmp_path
):
    assert staging_options(args, str(tmp_path)) == []
    assert os.listdir(tmp_path) == []


def test_a_remote_run_stages_this_checkout_and_the_pins_without_a_requirements_cache(tmp_path):
    added = staging_options(DATAFLOW, str(tmp_path), ["hf"])
    requirements = str(tmp_path / worker_environment.REQUIREMENTS_NAME)
    setup_file = os.path.join(REPO, "setup.py")
    assert added == [
        f"--setup_file={setup_file}",
        f"--requirements_file={requirements}",
        "--requirements_cache=skip",
    ]
    lines = open(requirements).read().splitlines()
    assert lines[0].startswith("#") and lines[1:] == worker_requirements(["hf"])
    assert staging_options(DATAFLOW + added, str(tmp_path / "again")) == [], (
        "what is set is left alone"
    )


@pytest.mark.parametrize(
    "user, added_flags",
    [
        (["--setup_file=/src/setup.py"], ["--requirements_file", "--requirements_cache"]),
        (["--requirements_file=/r.txt"], ["--setup_file"]),
        (["--requirements_cache=/cache"], ["--setup_file", "--requirements_file"]),
    ],
)
def test_options_the_user_set_are_left_alone(user, added_flags, tmp_path):
    added = staging_options(DATAFLOW + user, str(tmp_path))
    assert [a.split("=")[0] for a in added] == added_flags


def test_the_requirements_command_prints_the_staged_file(capsys):
    assert worker_environment.main(["--extra", "hf"]) == 0
    assert capsys.readouterr().out == worker_environment.requirements_text(["hf"])


@pytest.mark.integration
def test_beams_stager_builds_the_sdist_and_downloads_nothing_with_the_staged_options(tmp_path):
    work, staging = tmp_path / "work", tmp_path / "staging"
    work.mkdir()
    staging.mkdir()
    added = staging_options(["--runner=PortableRunner", "--job_endpoint=localhost:1"], str(work))
    resources = Stager.create_job_resources(
        PipelineOptions(added), str(staging), log_submission_env_dependencies=False
    )
    staged = {name: src for src, name, _ in Stager.extract_staging_tuple_iter(resources)}
    # Only the sdist and the pins: no wheel was downloaded to be uploaded.
    assert sorted(staged) == sorted([WORKFLOW_TARBALL_FILE, REQUIREMENTS_FILE])
    assert open(staged[REQUIREMENTS_FILE]).read().splitlines()[1:] == worker_requirements()


# --- runs from the installed sdist ---


@pytest.fixture(scope="module")
def corpus(worker_venv, tmp_path_factory) -> str:
    """Written by the installed package's own `corpus` command."""
    path = str(tmp_path_factory.mktemp("corpus") / "stories.txt")
    command = ["-m", "pipeline", "corpus", "--output", path, "--stories", "300"]
    result = worker_venv.run(command, cwd=os.path.dirname(path), timeout=60)
    assert result.returncode == 0, result.stderr
    return path


def _prepare(
    python: str, corpus: str, output: str, *beam_args: str, cwd: str, env: dict | None = None
) -> None:
    argv = [
        python,
        "-m",
        "pipeline",
        "prepare",
        "--input",
        corpus,
        "--output",
        output,
        *PREPARE_ARGS,
        *beam_args,
    ]
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert result.returncode == 0, result.stderr[-4000:]


def _evaluate(venv: WorkerVenv, module: str, expression: str, *, cwd: str):
    """The JSON value of `expression`, evaluated in `venv` from `cwd` after `import module`."""
    result = venv.run(
        ["-c", f"import json, {module}; print(json.dumps({expression}))"], cwd=cwd, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _module_origin(venv: WorkerVenv, cwd: str) -> str:
    return _evaluate(
        venv, "pipeline.prepare.tokenize.unit", "pipeline.prepare.tokenize.unit.__file__", cwd=cwd
    )


@pytest.mark.slow
def test_worker_install_is_the_base_at_the_launchers_versions(worker_venv, tmp_path):
    listing = "{d.metadata['Name']: d.version for d in importlib.metadata.distributions()}"
    installed = _evaluate(worker_venv, "importlib.metadata", listing, cwd=str(tmp_path))
    installed = {canonicalize_name(name): version for name, version in installed.items()}
    assert not NOT_FOR_WORKERS & set(installed)
    for name, version in _pins(worker_requirements()).items():
        assert installed.get(name) == version, name
    module = "pipeline.prepare.execution.worker_environment"
    worker_versions = _evaluate(
        worker_venv, module, f"{module}.package_versions()", cwd=str(tmp_path)
    )
    assert version_mismatch(package_versions(), worker_versions) is None


@pytest.mark.slow
def test_the_installed_console_script_runs_its_commands_beside_modules_of_the_same_names(
    worker_venv, tmp_path
):
    for name in ("train", "pipeline", "model", "schemas"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit(3)\n")
    tokshards = os.path.join(worker_venv.root, "bin", "tokshards")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [tokshards, *args],
            cwd=tmp_path,
            env=worker_venv.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    result = run("corpus", "--output", "stories.txt", "--stories", "20")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "stories.txt").read_text().count("<|endoftext|>") == 20
    # verify reads shards with the loader's lengths index, which the base install has.
    result = run("verify", str(tmp_path))
    assert result.returncode == 1, result.stderr
    assert (
        result.stderr
        == f"verify: error: {tmp_path} has no manifest.json; is it a prepared directory?\n"
    )
    # A worker's install has no JAX: train's help needs none (its settings are declared apart),
    # a run says which extra it needs, in one line.
    assert run("train", "--help").returncode == 0
    result = run("train", "--data", str(tmp_path), "--workdir", str(tmp_path / "run"))
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        1,
        [
            "train: error: jax is not installed; this command needs the 'train' extra: "
            "pip install 'tokshards[train]'"
        ],
    )


@pytest.mark.slow
def test_an_installed_launcher_needs_a_setup_file_or_a_container_only_for_runners_that_ship_it(
    worker_venv, tmp_path
):
    def staged(args: list[str]) -> subprocess.CompletedProcess:
        code = (
            "from pipeline.prepare.execution.worker_environment import staging_options as s; "
            f"print(s({args!r}, '.'))"
        )
        return worker_venv.run(["-c", code], cwd=str(tmp_path), timeout=60)

    result = staged(DATAFLOW)
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()[-1]
    assert (
        "no setup.py" in message
        and "--setup_file=" in message
        and "--sdk_container_image=" in message
    )
    # Dask's workers import the package installed on their machines: a plain install prepares on it.
    result = staged([DASK, "--dask_client_address=127.0.0.1:8786"])
    assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr


@pytest.mark.slow
def test_installed_sdist_prepares_the_same_bytes_as_the_source_tree(worker_venv, corpus, tmp_path):
    # Same interpreter and packages: only where `pipeline` comes from differs.
    outside = str(tmp_path)
    assert _module_origin(worker_venv, outside).startswith(worker_venv.root + os.sep)
    assert _module_origin(worker_venv, REPO).startswith(REPO + os.sep)
    _prepare(
        worker_venv.python, corpus, str(tmp_path / "installed"), cwd=outside, env=worker_venv.env()
    )
    _prepare(worker_venv.python, corpus, str(tmp_path / "source"), cwd=REPO, env=worker_venv.env())
    installed, source = (
        run_outputs(str(tmp_path / "installed")),
        run_outputs(str(tmp_path / "source")),
    )
    assert sorted(installed) == sorted(source)
    assert installed == source
    manifest = json.loads(installed[formats.MANIFEST_NAME])
    assert manifest["num_units"] > 3 and {s["split"] for s in manifest["shards"]} == {
        "train",
        "validation",
    }


# One shell run in a new user and network namespace, where the only network is a loopback
# interface: Beam's worker pool (and the runner's own gRPC servers) bind every interface, and there
# that means the loopback alone. The pool starts SDK workers with `python` from PATH, from its own
# directory outside the checkout, so they run the installed sdist; the launcher runs from the
# checkout, as for Dataflow: it builds the sdist, stages the pins, plans and writes the manifest.
_POOL_SCRIPT = """
set -e
ip link set lo up
(cd "$POOL_DIR" && PATH="$VENV_BIN:$PATH" exec "$VENV_BIN/python" \\
    -m apache_beam.runners.worker.worker_pool_main \\
    --service_port=50000 > "$POOL_DIR/worker_pool.log" 2>&1) &
pool=$!
trap 'kill -INT $pool 2>/dev/null; sleep 1; kill -KILL $pool 2>/dev/null || true' EXIT
"$LAUNCHER" -c 'import socket, time
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", 50000), timeout=1).close()
        break
    except OSError:
        time.sleep(0.2)
else:
    raise SystemExit("the worker pool did not listen within a minute")'
cd "$REPO" && "$LAUNCHER" -m pipeline prepare "$@"
"""


@pytest.mark.slow
def test_portable_runner_on_an_external_worker_pool_writes_the_direct_runners_bytes(
    worker_venv, corpus, tmp_path
):
    portable = str(tmp_path / "portable")
    external = [
        "--runner=PortableRunner",
        "--job_endpoint=embed",
        "--environment_type=EXTERNAL",
        "--environment_config=127.0.0.1:50000",
    ]
    env = dict(
        os.environ,
        POOL_DIR=str(tmp_path),
        VENV_BIN=os.path.dirname(worker_venv.python),
        LAUNCHER=sys.executable,
        REPO=REPO,
    )
    result = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--net",
            "sh",
            "-c",
            _POOL_SCRIPT,
            "pool",
            "--input",
            corpus,
            "--output",
            portable,
            *PREPARE_ARGS,
            *external,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    _prepare(sys.executable, corpus, str(tmp_path / "direct"), cwd=REPO)
    assert "Starting worker" in open(tmp_path / "worker_pool.log").read(), (
        "the pool ran no SDK worker"
    )
    assert run_outputs(portable) == run_outputs(str(tmp_path / "direct"))
