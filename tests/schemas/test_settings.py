"""Settings declared once: every flag of prepare and train has its help, a config-file key (its
name, with dashes or underscores) and a place in what the run saves, or is a launch option that
says why it has none; the checks and the manifest's schema derive from the same declarations."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from model.config import GPTConfig
from pipeline.cli import config_file
from pipeline.prepare import command_line
from schemas import formats
from schemas.errors import SettingError
from schemas.manifest_schema import JSON_SCHEMA
from schemas.prepare_config import PrepareConfig
from schemas.settings import check, declared, flags, from_saved, identity, json_schema, setting
from train import cli as train_cli
from train.config import TrainConfig
from train.settings import ModelFlags


def _declaration(cls: type, name: str):
    return dict((f.name, s) for f, s in declared(cls)).get(name)


def _prepare_place(name: str) -> str:
    if _declaration(PrepareConfig, name):
        return "the manifest's config"
    return _declaration(command_line.LaunchOptions, name).launch


def _train_place(name: str) -> str:
    if _declaration(TrainConfig, name):
        return "config.json"
    if model := _declaration(ModelFlags, name):
        assert model.saved_as.removeprefix("model.") in {
            f.name for f in dataclasses.fields(GPTConfig)
        }, name
        return f"config.json's {model.saved_as}"
    return _declaration(train_cli.LaunchOptions, name).launch


def _sample(action: argparse.Action) -> object:
    """A value the option takes, as a config file writes it."""
    if action.nargs == 0:
        return True
    if action.choices:
        return list(action.choices)[0]
    if action.type in (int, float):
        return 4096
    return "c4.min_doc_words=2" if action.dest == "filter_params" else "c4"


@pytest.mark.parametrize(
    "command, parser, place",
    [
        ("prepare", command_line.parser, _prepare_place),
        ("train", train_cli.parser, _train_place),
    ],
)
def test_every_flag_has_help_a_config_key_and_a_place_in_what_the_run_saves(
    tmp_path, command, parser, place
):
    options = [a for a in parser()._actions if a.option_strings and a.dest != "help"]
    assert len(options) > 20
    for action in options:
        flag = action.option_strings[0]
        assert action.help and action.help.strip(), flag
        assert place(action.dest), (
            f"{command} {flag}: neither saved nor a launch option with a reason"
        )
        if action.dest == config_file.CONFIG:
            continue
        for key in (flag[2:], flag[2:].replace("-", "_")):
            path = tmp_path / "settings.toml"
            path.write_text(f"{key} = {_sample(action)!r}\n".replace("True", "true"))
            assert action.dest in config_file.read(str(path), parser()), (command, key)


def test_the_saved_field_names_do_not_change():
    # The keys of earlier runs' manifest.json config and config.json: they must read back.
    assert [f.name for f in dataclasses.fields(PrepareConfig)] == [
        "tokenizer",
        "format",
        "text_field",
        "id_field",
        "separator",
        "validation_fraction",
        "seed",
        "unit_bytes",
        "record_tokens",
        "max_document_bytes",
        "skip_bad_files",
        "hf_split",
        "hf_name",
        "bos_token",
        "eos_token",
        "dedup",
        "decontaminate",
        "decontaminate_ngram",
        "decontaminate_max_matches",
        "near_ngram",
        "near_bands",
        "near_rows",
        "filters",
        "filter_params",
        "filter_max_document_bytes",
        "filter_impl",
        "language_model",
    ]
    assert [f.name for f in dataclasses.fields(TrainConfig)] == [
        "data",
        "workdir",
        "model",
        "preset",
        "steps",
        "batch_size",
        "seq_len",
        "seed",
        "packing",
        "mesh",
        "learning_rate",
        "min_learning_rate",
        "warmup_steps",
        "decay_steps",
        "weight_decay",
        "grad_clip",
        "beta2",
        "checkpoint_every",
        "keep_checkpoints",
        "eval_every",
        "eval_batches",
        "log_every",
        "loader_workers",
        "gradient_accumulation_steps",
        "remat",
        "tensorboard",
        "profile_steps",
        "profile_skip_steps",
    ]


def test_the_manifest_schema_config_is_derived_from_the_declarations():
    config = JSON_SCHEMA["properties"]["config"]
    assert list(config["properties"]) == [f.name for f in dataclasses.fields(PrepareConfig)]
    # What version 3 manifests hold is required; what came with version 5 takes its default when
    # missing.
    assert "decontaminate_ngram" in config["required"] and "near_bands" not in config["required"]
    assert config["properties"]["validation_fraction"] == {
        "type": "number",
        "minimum": 0,
        "exclusiveMaximum": 1,
    }
    assert config["properties"]["format"] == {
        "enum": ["text", "jsonl", "parquet", "arrow", "hf", None]
    }
    assert config["properties"]["filters"]["items"] == {
        "enum": list(_declaration(PrepareConfig, "filters").choices)
    }
    assert formats.READABLE_MANIFEST_VERSIONS[0] == 3


@dataclasses.dataclass(frozen=True)
class _Example:
    """Settings of every kind, for the derivations."""

    count: int = setting(2, "how many", minimum=1, since=7)
    share: float = setting(0.5, "a fraction", minimum=0, below=1)
    mode: str | None = setting(None, "a mode", choices=("a", "b"), flag="--kind")
    names: list[str] = setting(help="some names", default_factory=list, choices=("x", "y"))

    def __post_init__(self) -> None:
        check(self)


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(count=0), "count must be at least 1 (got count=0)"),
        (dict(share=1.0), "share must be in [0, 1) (got share=1.0)"),
        (dict(mode="c"), "mode must be one of ('a', 'b') (got mode='c')"),
        (dict(names=["x", "z"]), "names must each be one of ('x', 'y') (got names=['x', 'z'])"),
    ],
)
def test_declared_limits_and_choices_are_checked(values, message):
    with pytest.raises(SettingError) as error:
        _Example(**values)
    assert str(error.value) == message
    assert _Example(mode=None, names=["y"]).count == 2


def test_the_schema_and_flags_of_declared_settings():
    schema = json_schema(_Example, oldest_version=5)
    assert schema["required"] == ["share", "mode", "names"]
    assert schema["properties"] == {
        "count": {"type": "integer", "minimum": 1},
        "share": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
        "mode": {"enum": ["a", "b", None]},
        "names": {"type": "array", "items": {"enum": ["x", "y"]}},
    }
    assert flags(_Example) == {
        "count": "--count",
        "share": "--share",
        "mode": "--kind",
        "names": "--names",
    }


@dataclasses.dataclass(frozen=True)
class _Later:
    """A setting whose default changed what is made, added after the saved forms without it."""

    items: list[str] = setting(help="what runs", default_factory=list)
    how: str = setting(
        "new",
        "how they run",
        choices=("new", "old"),
        since=7,
        older="old",
        matters=lambda later: bool(later.items),
    )


def test_a_setting_added_later_reads_back_and_compares_as_what_it_stood_for():
    # A saved form from before the setting existed was made with its `older` value, not its default.
    assert from_saved(_Later, {"items": ["a"]}) == _Later(["a"], "old")
    assert from_saved(_Later, {"items": ["a"], "how": "new"}).how == "new"
    # An identity leaves it out where it says what its absence said, or decides nothing: a form
    # recorded before it existed still matches.
    assert identity(_Later(["a"], "old")) == {"items": ["a"]}
    assert identity(_Later([], "new")) == {"items": []}
    assert identity(_Later(["a"], "new")) == {"items": ["a"], "how": "new"}
    with pytest.raises(ValueError, match="since"):
        setting("x", "a setting", older="y")


def test_train_options_default_to_none_so_a_resume_tells_given_from_left_out():
    args = train_cli.parser().parse_args(["--workdir", "w", "--no-bf16", "--layers", "2"])
    given = {k: v for k, v in vars(args).items() if v is not None}
    assert given == {"workdir": "w", "bf16": False, "num_layers": 2}
