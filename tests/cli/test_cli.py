"""The `tokshards` command: its subcommands listed, every flag with help and its default, and the
project's own modules run whatever the working directory holds."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import subprocess
import sys

import pytest

from pipeline.cli import commands as cli
from schemas.prepare_config import PrepareConfig
from support.runs import REPO

# The console script pip installed beside this interpreter.
TOKSHARDS = os.path.join(os.path.dirname(sys.executable), "tokshards")


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    return [(name, c.function(c.parser)(f"tokshards {name}")) for name, c in cli.COMMANDS.items()]


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def test_the_help_lists_every_command_on_one_line_with_its_summary(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit:
        cli.main(["--help"])
    assert exit.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    for name, command in cli.COMMANDS.items():
        assert any(
            re.fullmatch(rf"\s+{name}\s+{re.escape(command.summary)}", line) for line in lines
        ), name


@pytest.mark.parametrize("name,parser", _parsers(), ids=list(cli.COMMANDS))
def test_every_option_has_help_and_shows_its_default(name, parser):
    assert parser.formatter_class is cli.HelpFormatter
    shown = cli.HelpFormatter(parser.prog)
    for action in _options(parser):
        assert action.help and action.help.strip(), (name, action.dest)
        if not action.required and action.option_strings:
            # Either the value argparse prints, or the help's own words on what leaving it out does.
            assert "default" in shown._get_help_string(action), (name, action.dest)


def test_the_help_shows_the_values_a_run_takes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["prepare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = PrepareConfig()
    for field in ("unit_bytes", "record_tokens", "validation_fraction", "text_field", "hf_split"):
        flag = "--" + field.replace("_", "-")
        value = re.escape(str(getattr(defaults, field)))
        assert re.search(rf"{flag} [A-Z_]+ (?:(?! --).)*\(default: {value}\)", text), flag


def test_train_help_names_the_sample_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert "tokshards sample --workdir" in capsys.readouterr().out


def test_an_unknown_command_is_refused_in_one_line_with_the_list_and_the_nearest(capsys):
    assert cli.main(["tokenize"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("tokshards: error: ")
    assert "invalid choice: 'tokenize'" in err and "'prepare'" in err and "'sample'" in err
    assert cli.main(["trian"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("did you mean 'train'?")


@dataclasses.dataclass(frozen=True)
class Shadowed:
    """A working directory holding modules named as this project's packages, each of which exits
    with status 3 when imported."""

    path: str

    def run(self, *args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return subprocess.run(
            list(args), cwd=self.path, env=env, capture_output=True, text=True, timeout=120
        )


@pytest.fixture
def shadowed(tmp_path) -> Shadowed:
    for name in ("train", "pipeline", "model", "schemas"):
        (tmp_path / f"{name}.py").write_text(
            f"import sys\nprint('the user\\'s {name}.py')\nsys.exit(3)\n"
        )
    return Shadowed(str(tmp_path))


@pytest.mark.integration
def test_the_console_script_runs_the_project_beside_modules_of_the_same_names(shadowed):
    assert os.path.exists(TOKSHARDS), (
        "install the project (pip install -e .) to get the tokshards script"
    )
    for argv, expected in [
        (["--help"], "commands:"),
        (["train", "--help"], "--learning-rate"),
        (["sample", "--help"], "--top-k"),
        (["verify", "--help"], "data_dir"),
    ]:
        result = shadowed.run(TOKSHARDS, *argv)
        assert result.returncode == 0, result.stdout + result.stderr
        assert expected in result.stdout and "the user's" not in result.stdout


@pytest.mark.integration
def test_python_m_train_imports_the_projects_packages_not_the_working_directorys(shadowed):
    # A `train.py` of the user's runs before any code of this project can (Python finds it first);
    # `python -P` leaves the working directory off sys.path.
    os.remove(os.path.join(shadowed.path, "train.py"))
    result = shadowed.run(sys.executable, "-m", "train", "--help")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--learning-rate" in result.stdout


@pytest.mark.integration
def test_python_m_pipeline_imports_the_projects_packages_not_the_working_directorys(shadowed):
    os.remove(os.path.join(shadowed.path, "pipeline.py"))
    result = shadowed.run(sys.executable, "-m", "pipeline", "verify", shadowed.path)
    assert result.returncode == 1, result.stdout + result.stderr  # no manifest there: a failed run
    assert "verify: error:" in result.stderr and "the user's" not in result.stdout


@pytest.mark.integration
def test_python_safe_path_runs_the_trainer_beside_a_users_train_py(shadowed):
    result = shadowed.run(sys.executable, "-P", "-m", "train", "--help")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--learning-rate" in result.stdout


def test_python_m_pipeline_lists_the_commands():
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0
    assert all(name in result.stdout for name in cli.COMMANDS)
    assert result.stdout.startswith("usage: python -m pipeline")


# An interrupt held back while a block runs is raised as it ends, once: a block after it (a
# checkpoint's save finished as the run winds down) does not raise it again.
_HELD_BACK = """
import os, signal
from pipeline.cli import interrupts

interrupts.install()
try:
    with interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        print("held")
except KeyboardInterrupt:
    print("raised as the block ended")
with interrupts.deferred():
    print("winding down")
print("received", interrupts.received())
"""


@pytest.mark.integration
def test_a_held_back_interrupt_is_raised_once_as_its_block_ends():
    result = subprocess.run(
        [sys.executable, "-c", _HELD_BACK],
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout.splitlines() == [
        "held",
        "raised as the block ended",
        "winding down",
        "received True",
    ]
