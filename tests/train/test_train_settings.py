"""The trainer's settings against a saved run, without training: how the step computes and what the
run records are free on resume, a profile is for one start alone, and `--remat` alone is `full`."""

from __future__ import annotations

import pytest

from model.config import preset
from train import cli
from train.config import TrainConfig
from train.errors import TrainUsageError
from train.settings import resolve

SAVED = TrainConfig(
    data="-",
    workdir="w",
    model=preset("tiny"),
    steps=10,
    warmup_steps=1,
    remat="full",
    gradient_accumulation_steps=2,
    tensorboard=False,
    profile_steps=3,
    profile_skip_steps=2,
)


def test_how_the_step_computes_and_what_the_run_records_are_free_on_resume():
    given = {
        "workdir": "w",
        "remat": "dots",
        "gradient_accumulation_steps": 4,
        "tensorboard": True,
        "profile_steps": 1,
    }
    config, notes = resolve(given, SAVED)
    computation = (config.remat, config.gradient_accumulation_steps, config.tensorboard)
    assert computation == ("dots", 4, True)
    assert (config.profile_steps, config.profile_skip_steps) == (1, 1)
    assert notes == []


def test_a_resume_keeps_the_saved_computation_but_not_its_profile():
    config, _ = resolve({"workdir": "w"}, SAVED)
    computation = (config.remat, config.gradient_accumulation_steps, config.tensorboard)
    assert computation == ("full", 2, False)
    # A new start traces nothing unasked.
    assert (config.profile_steps, config.profile_skip_steps) == (0, 1)


def test_what_the_step_computes_must_match_on_resume():
    with pytest.raises(
        TrainUsageError, match=r"^--learning-rate 0.01 differs from the saved run's 0.001"
    ):
        resolve({"workdir": "w", "learning_rate": 0.01}, SAVED)


@pytest.mark.parametrize(
    "argv, remat",
    [([], None), (["--remat"], "full"), (["--remat", "dots"], "dots"), (["--remat=none"], "none")],
)
def test_remat_alone_is_full(argv, remat):
    assert cli.parser().parse_args(["--workdir", "w", *argv]).remat == remat
