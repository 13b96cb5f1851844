"""`--config FILE.toml` for prepare and train: a file gives the run, and saves the config, that the
same flags give; flags override it; a key or value its command does not take is refused in one
line."""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

from pipeline.cli import config_file
from pipeline.cli.arguments import FlagError
from pipeline.prepare import command_line, launcher
from pipeline.prepare.launcher import parse_args
from schemas import formats
from support.corpora import sample_documents, write_jsonl, write_text
from support.runs import IN_PROCESS, REPO, run_command, run_prepare
from train import cli as train_cli

SIZE = ["--width", "32", "--layers", "1", "--heads", "2", "--seq-len", "32", "--batch-size", "4"]


def _toml(path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture
def corpora(tmp_path) -> list[str]:
    docs = sample_documents(120, seed=4)
    return [
        write_text(str(tmp_path / "a.txt"), docs[:60]),
        write_jsonl(str(tmp_path / "b.jsonl"), docs[60:]),
    ]


@pytest.mark.integration
def test_prepare_from_a_file_writes_and_saves_what_the_same_flags_do(corpora, tmp_path):
    flags = [
        "--unit-bytes",
        "4096",
        "--validation-fraction",
        "0.2",
        "--record-tokens",
        "256",
        "--dedup",
        "exact",
        "--seed",
        "7",
        "--skip-bad-files",
        "--text-field",
        "text",
    ]
    by_flags = str(tmp_path / "by_flags")
    run_prepare(corpora, by_flags, *flags)
    config = _toml(
        tmp_path / "prepare.toml",
        textwrap.dedent(f"""
        input = {json.dumps(corpora)}
        output = "{tmp_path / "by_file"}"
        unit_bytes = 4096
        validation-fraction = 0.2
        record_tokens = 256
        dedup = "exact"
        seed = 7
        skip-bad-files = true
        text_field = "text"
    """),
    )
    launcher.run(["--config", config, *IN_PROCESS])

    def saved(output: str) -> tuple[dict, dict]:
        with open(os.path.join(output, formats.MANIFEST_NAME)) as f:
            manifest = json.load(f)
        return manifest["config"], manifest["shards"]

    assert saved(str(tmp_path / "by_file")) == saved(by_flags)
    assert saved(by_flags)[0]["unit_bytes"] == 4096 and saved(by_flags)[0]["dedup"] == "exact"


def test_prepare_flags_override_the_file(tmp_path):
    config = _toml(
        tmp_path / "prepare.toml",
        """
input = ["a.txt", "b.txt"]
output = "out"
unit_bytes = 4096
dedup = "exact"
skip_bad_files = true
""",
    )
    args, beam = parse_args(
        [
            "--config",
            config,
            "--input",
            "c.txt",
            "--unit-bytes",
            "512",
            "--no-skip-bad-files",
            "--direct_num_workers=2",
        ]
    )
    # A repeatable flag replaces the file's list; a switch turns off; the rest is the file's or the
    # default.
    assert (args.input, args.unit_bytes, args.skip_bad_files) == (["c.txt"], 512, False)
    assert (args.output, args.dedup, args.record_tokens) == (
        "out",
        "exact",
        parse_args(["--input", "x", "--output", "y"])[0].record_tokens,
    )
    assert beam == ["--direct_num_workers=2"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("unit_byts = 3", "unknown key 'unit_byts' (did you mean 'unit_bytes'?)"),
        (
            "tokenize = 'gpt2'\nlearning_rate = 1e-3",
            "unknown key 'tokenize' (did you mean 'tokenizer'?)",
        ),
        ("config = 'other.toml'", "unknown key 'config'"),
        ("unit_bytes = 'many'", "unit_bytes = 'many': invalid int value: 'many'"),
        ("unit_bytes = 1.5", "unit_bytes = 1.5: invalid int value: '1.5'"),
        ("dedup = 'maybe'", "dedup = 'maybe': invalid choice: 'maybe'"),
        ("skip_bad_files = 'yes'", "skip_bad_files = 'yes': expected true or false"),
        ("record_tokens = true", "record_tokens = True: expected a string or a number"),
        ("unit_bytes = ", "not TOML"),
        # One setting in both spellings: which one was meant is not for the reader to guess.
        (
            "unit-bytes = 1048576\nunit_bytes = 2097152",
            "'unit-bytes' and 'unit_bytes' are the same setting; keep one of them",
        ),
        (
            "filter_impl = 'fast'\nfilter-impl = 'datatrove'",
            "'filter_impl' and 'filter-impl' are the same setting; keep one of them",
        ),
    ],
)
def test_prepare_refuses_a_bad_file_in_one_line_naming_the_key(tmp_path, capsys, text, message):
    config = _toml(tmp_path / "bad.toml", text)
    assert (
        run_command(
            "prepare", "--config", config, "--input", "a.txt", "--output", str(tmp_path / "out")
        )
        == 2
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith(f"prepare: error: {config}: ")
        and message in lines[0]
    ), lines
    assert not os.path.exists(tmp_path / "out")


def test_prepare_without_its_required_settings_names_them(tmp_path, capsys):
    config = _toml(tmp_path / "prepare.toml", 'output = "out"\n')
    with pytest.raises(FlagError, match="the following arguments are required: --input"):
        parse_args(["--config", config])


def _train_config(args: list[str]):
    parsed, _ = config_file.parse(lambda: train_cli.parser("tokshards train"), args)
    return train_cli._config(parsed)


# Keys are the flags' names, with dashes or underscores.
TRAIN_TOML = """
steps = 2
width = 32
layers = 1
heads = 2
seq-len = 32
batch_size = 4
learning-rate = 3e-3
beta2 = 0.99
packing = "document"
bf16 = false
"""
TRAIN_FLAGS = [
    "--steps",
    "2",
    *SIZE,
    "--learning-rate",
    "3e-3",
    "--beta2",
    "0.99",
    "--packing",
    "document",
    "--no-bf16",
]


@pytest.mark.integration
def test_train_from_a_file_resolves_the_config_the_same_flags_resolve(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    config = _toml(
        tmp_path / "train.toml", f'data = "{stories_dataset}"\nworkdir = "{workdir}"\n' + TRAIN_TOML
    )
    by_file = _train_config(["--config", config])
    assert by_file == _train_config(["--data", stories_dataset, "--workdir", workdir, *TRAIN_FLAGS])
    assert by_file != _train_config(["--data", stories_dataset, "--workdir", workdir])


@pytest.mark.slow
def test_train_from_a_file_saves_the_config_the_same_flags_save(stories_dataset, tmp_path, capsys):
    config = _toml(tmp_path / "train.toml", f'data = "{stories_dataset}"\n' + TRAIN_TOML)
    saved = {}
    for name, argv in [
        ("flags", ["--data", stories_dataset, *TRAIN_FLAGS]),
        ("file", ["--config", config]),
    ]:
        workdir = str(tmp_path / name)
        assert train_cli.main([*argv, "--workdir", workdir]) == 0, capsys.readouterr().err
        with open(os.path.join(workdir, "config.json")) as f:
            saved[name] = {k: v for k, v in json.load(f).items() if k != "workdir"}
    assert saved["file"] == saved["flags"]
    assert (
        saved["file"]["learning_rate"],
        saved["file"]["beta2"],
        saved["file"]["model"]["width"],
    ) == (3e-3, 0.99, 32)


@pytest.mark.integration
def test_train_flags_override_the_file(stories_dataset, tmp_path):
    config = _toml(
        tmp_path / "train.toml",
        f'data = "{stories_dataset}"\nworkdir = "{tmp_path / "run"}"\n' + TRAIN_TOML,
    )
    resolved, _ = _train_config(["--config", config, "--steps", "5", "--layers", "2", "--bf16"])
    assert (resolved.steps, resolved.model.num_layers, resolved.model.dtype) == (5, 2, "bfloat16")
    assert (resolved.learning_rate, resolved.model.width, resolved.packing) == (
        3e-3,
        32,
        "document",
    )


def test_train_refuses_an_unknown_key_in_one_line(tmp_path, capsys):
    config = _toml(tmp_path / "train.toml", "lr = 1e-3\n")
    assert run_command("train", "--config", config, "--workdir", str(tmp_path / "run")) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"train: error: {config}: unknown key 'lr'; the keys are: "
        + ", ".join(
            sorted(
                a.option_strings[0][2:]
                for a in train_cli.parser()._actions
                if a.dest not in ("help", "config")
            )
        )
    ]


@pytest.mark.parametrize(
    "key, suggested",
    [
        ("num_layers", "layers"),
        ("learning_rat", "learning_rate"),
        ("learning-rat", "learning-rate"),
        ("vocab", "vocab-size"),
    ],
)
def test_an_unknown_key_is_answered_with_the_flag_name_spelled_as_the_file_spells_it(
    tmp_path, capsys, key, suggested
):
    config = _toml(tmp_path / "train.toml", f"{key} = 1\n")
    assert run_command("train", "--config", config, "--workdir", str(tmp_path / "run")) == 2
    assert f"unknown key {key!r} (did you mean {suggested!r}?)" in capsys.readouterr().err


def test_the_config_files_in_docs_cli_md_are_read_as_written(tmp_path):
    with open(os.path.join(REPO, "docs", "cli.md")) as f:
        blocks = re.findall(r"```toml\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 2
    for block in blocks:
        parser = command_line.parser if "tokshards prepare" in block else train_cli.parser
        read = config_file.read(_toml(tmp_path / "example.toml", block), parser())
        assert len(read) == len(
            [line for line in block.splitlines() if "=" in line and not line.startswith("#")]
        )


@pytest.mark.parametrize(
    "text, flags",
    [
        ("remat = true", ["--remat"]),
        ("remat = false", ["--remat", "none"]),
        ("remat = 'dots'", ["--remat", "dots"]),
        ("bf16 = true", ["--bf16"]),
    ],
)
def test_train_takes_true_and_false_for_a_flag_given_alone_as_the_command_line_does(
    tmp_path, text, flags
):
    config = _toml(tmp_path / "train.toml", text)
    by_file, by_flags = (
        vars(config_file.parse(lambda: train_cli.parser(), ["--workdir", "w", *argv])[0])
        for argv in (["--config", config], flags)
    )
    assert {**by_file, "config": None} == by_flags
