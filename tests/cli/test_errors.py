"""One kind of user-facing error: every project exception is a usage error (status 2) or a run
error (1), or a stop with a status of its own (a preemption, 143), caught once by the command runner
and told in one line, a setting's by its flag."""

from __future__ import annotations

import ast
import importlib
import os
import pickle
import subprocess
import sys

import pytest

from pipeline.cli import commands as cli
from pipeline.cli.arguments import CommandParser
from schemas.errors import RunError, SettingError, UsageError, UserError
from support.runs import REPO, run_command

# Control flow, not a failure: the loader's end of an epoch.
NOT_ERRORS = {"EndOfData"}
# Stops that are no failure, each a user error with a status of its own: a run preempted by SIGTERM.
STOPS = {"Preempted": 143}


def _exception_classes() -> list[tuple[str, str]]:
    """(module, class) for every exception class the project defines."""
    found = []
    for package in ("schemas", "pipeline", "train", "model"):
        for root, _, names in os.walk(os.path.join(REPO, package)):
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(root, name)
                module = (
                    os.path.relpath(path, REPO)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                )
                for node in ast.parse(open(path).read()).body:
                    if isinstance(node, ast.ClassDef) and any(
                        getattr(base, "id", getattr(base, "attr", "")).endswith(
                            ("Error", "Exception")
                        )
                        for base in node.bases
                    ):
                        found.append((module, node.name))
    return found


def test_every_project_exception_is_a_usage_or_a_run_error():
    classes = [
        (m, c) for m, c in _exception_classes() if c not in NOT_ERRORS and m != "schemas.errors"
    ]
    assert len(classes) >= 15
    for module, name in classes:
        cls = getattr(importlib.import_module(module), name)
        if name in STOPS:
            assert issubclass(cls, UserError) and (cls.exit_status, cls.failure) == (
                STOPS[name],
                False,
            ), name
            continue
        assert issubclass(cls, (UsageError, RunError)), f"{module}.{name}"


def test_a_setting_error_names_settings_as_the_code_does_or_by_their_flags():
    error = SettingError("validation_fraction", 1.5, "must be in [0, 1)")
    assert str(error) == "validation_fraction must be in [0, 1) (got validation_fraction=1.5)"
    assert (
        error.told({"validation_fraction": "--validation-fraction"})
        == "--validation-fraction must be in [0, 1), got 1.5"
    )
    both = SettingError("width", 100, "must be divisible by {num_heads}", num_heads=3)
    assert str(both) == "width must be divisible by num_heads (got width=100, num_heads=3)"
    assert (
        both.told({"width": "--width", "num_heads": "--heads"})
        == "--width must be divisible by --heads, got --width 100, --heads 3"
    )
    assert isinstance(both, ValueError) and both.exit_status == 2 and RunError("x").exit_status == 1
    assert str(pickle.loads(pickle.dumps(both))) == str(both)


def _one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# A bad value by command: as flags, as a config file's line, and the error line either gives.
BAD_VALUES = {
    "prepare": (
        ["--validation-fraction", "1.5"],
        "validation_fraction = 1.5",
        "--validation-fraction must be in [0, 1), got 1.5",
    ),
    "train": (["--steps", "0"], "steps = 0", "--steps must be at least 1, got 0"),
}


@pytest.mark.parametrize("command", BAD_VALUES)
@pytest.mark.parametrize("given", ["flag", "file"])
def test_a_bad_value_is_refused_in_one_line_with_status_2_from_a_flag_or_a_file(
    command, given, tmp_path, capsys, request
):
    flags, line, message = BAD_VALUES[command]
    out = str(tmp_path / "out")
    if command == "prepare":
        argv = ["--input", str(tmp_path / "in.txt"), "--output", out]
    else:
        argv = ["--data", request.getfixturevalue("token_dataset"), "--workdir", out]
    if given == "flag":
        argv += flags
    else:
        (tmp_path / "settings.toml").write_text(line + "\n")
        argv += ["--config", str(tmp_path / "settings.toml")]
    assert run_command(command, *argv) == 2
    assert _one_line(capsys) == f"{command}: error: {message}"
    assert not os.path.exists(out)


def test_a_run_that_fails_ends_with_status_1_in_one_line(tmp_path, capsys):
    missing = str(tmp_path / "missing.txt")
    assert run_command("prepare", "--input", missing, "--output", str(tmp_path / "out")) == 1
    assert _one_line(capsys).startswith(f"prepare: error: no input matches {missing!r}")
    assert (
        run_command(
            "train", "--data", str(tmp_path / "nothing"), "--workdir", str(tmp_path / "run")
        )
        == 1
    )
    assert _one_line(capsys).startswith("train: error: ")
    assert run_command("verify", str(tmp_path)) == 1
    assert _one_line(capsys).startswith("verify: error: ")


def test_an_unexpected_exception_keeps_its_traceback(monkeypatch):
    from pipeline.dataset import verify

    monkeypatch.setattr(verify, "read_manifest", lambda path: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run_command("verify", "somewhere")


# The flag errors a review tried, and one of each command's: each is one line with the command's
# own prefix and status 2, naming the nearest flag or choice where one is near.
FLAG_ERRORS = [
    ("prepare", ["--unit-bytes", "abc"], "argument --unit-bytes: invalid int value: 'abc'"),
    ("prepare", ["--seed", "1e3"], "argument --seed: invalid int value: '1e3'"),
    (
        "prepare",
        ["--filter-impl", "bogus"],
        "argument --filter-impl: invalid choice: 'bogus' (choose from 'fast', 'datatrove')",
    ),
    (
        "prepare",
        ["--dedup", "nea"],
        "argument --dedup: invalid choice: 'nea' (choose from 'none', 'exact', 'near'); did you "
        "mean 'near'?",
    ),
    ("prepare", ["--unit-byts", "4096"], "unknown flag --unit-byts (did you mean --unit-bytes?)"),
    ("train", ["--steps", "abc"], "argument --steps: invalid int value: 'abc'"),
    (
        "train",
        ["--learnig-rate", "1e-3"],
        "unknown flag --learnig-rate (did you mean --learning-rate?)",
    ),
    # A negative number is the flag's value, refused for its range.
    ("train", ["--learning-rate", "-1e-3"], "--learning-rate must be positive, got -0.001"),
    (
        "train",
        ["--remat", "ful"],
        "argument --remat: invalid choice: 'ful' (choose from 'none', 'full', 'dots'); did you "
        "mean 'full'?",
    ),
    ("verify", ["--bogus"], "unknown flag --bogus"),
    ("inspect", ["--documnts", "3"], "unknown flag --documnts (did you mean --documents?)"),
    ("batches", ["--seq-len", "abc"], "argument --seq-len: invalid int value: 'abc'"),
    ("corpus", ["--stories", "x"], "argument --stories: invalid int value: 'x'"),
    ("sample", ["--top-k", "1.5"], "argument --top-k: invalid int value: '1.5'"),
    (
        "export",
        ["--format", "megatrn"],
        "argument --format: invalid choice: 'megatrn' (choose from 'datatrove', 'llmc', "
        "'megatron', 'nanogpt'); did you mean 'megatron'?",
    ),
]
# Enough to run, but for the flag at fault.
BASE_ARGV = {
    "prepare": ["--input", "in.txt", "--output", "out"],
    "train": ["--data", "data", "--workdir", "run"],
    "verify": ["data"],
    "inspect": ["data"],
    "batches": ["data", "--batch-size", "1", "--take", "1", "--out", "x.npz"],
    "corpus": ["--output", "corpus.txt"],
    "sample": ["--workdir", "run"],
    "export": ["data", "--format", "nanogpt", "--output", "out"],
}


def test_every_command_and_flag_error_is_listed():
    assert {name for name, _, _ in FLAG_ERRORS} == set(BASE_ARGV) == set(cli.COMMANDS)


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_parses_with_the_project_parser(name):
    command = cli.COMMANDS[name]
    assert isinstance(command.function(command.parser)(f"tokshards {name}"), CommandParser)


# Values that cannot mean anything, refused with the range that can.
RANGES = [
    ("prepare", ["--seed", "-1"], "--seed must be in [0, 2**63), got -1"),
    (
        "prepare",
        ["--filter", ""],
        "argument --filter: names nothing (got ''); leave the flag out for none",
    ),
    (
        "prepare",
        ["--filter", "c4", "--filter-param", "c4.min_num_sentences=-2"],
        "--filter-param c4.min_num_sentences must be -1 (off) or at least 0, got -2",
    ),
    (
        "prepare",
        ["--filter", "gopher-quality", "--filter-param", "gopher-quality.max_avg_word_length=-3"],
        "--filter-param gopher-quality.max_avg_word_length must be at least 0, got -3",
    ),
    (
        "prepare",
        [
            "--filter",
            "gopher-repetition",
            "--filter-param",
            "gopher-repetition.top_n_grams=[[2,-0.2]]",
        ],
        "--filter-param gopher-repetition.top_n_grams must be at least 0, got [[2, -0.2]]",
    ),
    (
        "prepare",
        ["--filter", "gopher-qualty"],
        "--filter must each be one of ('gopher-quality', 'gopher-repetition', 'c4', 'fineweb', "
        "'language', 'fasttext', 'pii') ('gopher-qualty': did you mean 'gopher-quality'?), got "
        "['gopher-qualty']",
    ),
    ("prepare", ["--validation-fraction", "nan"], "--validation-fraction must be finite, got nan"),
    ("train", ["--seed", "-1"], "--seed must be in [0, 2**63), got -1"),
    ("train", ["--decay-steps", "0"], "--decay-steps must be at least 1, got 0"),
    ("train", ["--dropout", "1"], "--dropout must be in [0, 1), got 1.0"),
    ("train", ["--vocab-size", "0"], "--vocab-size must be at least 1, got 0"),
    ("sample", ["--max-tokens", "0"], "--max-tokens must be at least 1, got 0"),
    ("sample", ["--temperature", "-1"], "--temperature must be at least 0, got -1.0"),
    ("sample", ["--top-k", "-1"], "--top-k must be at least 0, got -1"),
    ("inspect", ["--documents", "-1"], "argument --documents: must be at least 0, got -1"),
]


# A bad value is refused before the run loads what it needs: no JAX, Flax, Orbax or Beam.
HEAVY = ("jax", "flax", "orbax", "apache_beam", "grain")
_LOADED_BY_A_REFUSAL = """
import sys
from pipeline.cli.commands import run_command
status = run_command(sys.argv[1], sys.argv[2:], sys.argv[1])
print(status, *sorted(name for name in {heavy} if name in sys.modules))
"""


@pytest.mark.integration
@pytest.mark.parametrize(
    "command, flags",
    [
        ("train", ["--data", "data", "--workdir", "run", "--steps", "0"]),
        ("train", ["--data", "data", "--workdir", "run", "--learning-rate", "-1e-3"]),
        ("prepare", ["--input", "in.txt", "--output", "out", "--unit-bytes", "0"]),
        ("prepare", ["--input", "in.txt", "--output", "out", "--filter-impl", "bogus"]),
        ("sample", ["--workdir", "run", "--max-tokens", "0"]),
    ],
)
def test_a_bad_value_is_refused_before_the_heavy_imports(command, flags, tmp_path):
    script = _LOADED_BY_A_REFUSAL.format(heavy=HEAVY)
    result = subprocess.run(
        [sys.executable, "-c", script, command, *flags],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": REPO},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.split() == ["2"], result.stdout + result.stderr
    assert result.stderr.startswith(f"{command}: error: ")


@pytest.mark.parametrize("command, flags, message", FLAG_ERRORS + RANGES)
def test_a_bad_flag_or_value_is_one_line_with_the_commands_prefix_and_status_2(
    command, flags, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert run_command(command, *BASE_ARGV[command], *flags) == 2
    assert _one_line(capsys) == f"{command}: error: {message}"
    assert os.listdir(tmp_path) == []
