"""What training shows while it runs: plain progress lines with the ETA off a terminal, evaluations,
a missing validation split, and sampling's context."""

from __future__ import annotations

import dataclasses
import io
import re

import jax
import pytest

import train.sample as sample_module
from model.config import preset
from pipeline.cli.log_cadence import format_duration
from support.synthetic import small_prepared
from train.config import TrainConfig
from train.metrics import PlainProgress
from train.sample import generate
from train.trainer import train


def _fields(step: int) -> dict[str, str]:
    return {"loss": f"{100 - step:.3f}", "lr": "1.00e-03", "tokens/s": "2.00k"}


def test_plain_progress_writes_a_line_every_tenth_of_the_steps_or_30_seconds_with_the_eta():
    now = [0.0]
    stream = io.StringIO()
    progress = PlainProgress(start=0, total=100, stream=stream, clock=lambda: now[0])
    for step in range(1, 101):
        now[0] += 0.1 if step <= 40 else 5.0
        progress.row(step, _fields(step))
    assert "\r" not in stream.getvalue()
    lines = stream.getvalue().splitlines()
    steps = [int(line.split()[1].split("/")[0]) for line in lines]
    assert steps[:4] == [10, 20, 30, 40]  # a tenth of the steps each, before 30 seconds pass
    assert steps[4:] == [*range(46, 100, 6), 100]  # then every 30 seconds (6 steps), and the last
    # At step 10, 9 steps took 0.9 s since the first logged one: 90 steps to go take 9 s.
    assert (
        lines[0] == "step 10/100 | loss 90.000 | lr 1.00e-03 | tokens/s 2.00k | "
        "elapsed 0:00:01 | ETA 0:00:09"
    )
    # At step 46 the ETA follows the rate since the first logged step (which waited for compiling).
    elapsed, first_at = 4.0 + 6 * 5.0, 0.1
    rate = (elapsed - first_at) / 45
    assert lines[4].endswith(f"ETA {format_duration(rate * 54)}")
    assert lines[-1].endswith("ETA 0:00:00")


def test_an_evaluation_is_always_a_line_of_its_own():
    stream = io.StringIO()
    progress = PlainProgress(start=0, total=1000, stream=stream, clock=lambda: 0.0)
    progress.row(1, _fields(1))  # not due: a tenth of the steps is 100, and no time passes
    progress.row(2, _fields(2))
    progress.eval(2, {"eval_loss": "3.2500"})
    assert stream.getvalue().splitlines() == ["step 2/1000 | eval_loss 3.2500"]


def _run(data: str, workdir: str, **overrides):
    model = preset(
        "tiny", vocab_size=512, width=32, mlp_width=64, num_layers=1, num_heads=2, max_seq_len=32
    )
    config = TrainConfig(
        data=data,
        workdir=workdir,
        model=model,
        steps=8,
        batch_size=4,
        seq_len=32,
        warmup_steps=2,
        checkpoint_every=4,
        eval_every=4,
        eval_batches=1,
    )
    return train(dataclasses.replace(config, **overrides))


@pytest.mark.integration
def test_training_off_a_terminal_prints_steps_with_lr_and_eta_and_eval_lines(tmp_path, capsys):
    data = small_prepared(str(tmp_path / "data"))
    _run(data, str(tmp_path / "run"))
    lines = capsys.readouterr().err.splitlines()
    step = re.compile(
        r"step (\d+)/8 \| loss \d+\.\d{3} \| lr \d\.\d\de[-+]\d\d \| tokens/s \S+ \| "
        r"elapsed \d+:\d\d:\d\d \| ETA (\?|\d+:\d\d:\d\d)"
    )
    steps = [int(m[1]) for m in map(step.fullmatch, lines) if m]
    assert steps == list(range(1, 9))  # 8 steps: a tenth of them is one
    assert lines[lines.index(next(x for x in lines if x.startswith("step 8/8 | loss")))].endswith(
        "ETA 0:00:00"
    )
    evals = [x for x in lines if re.fullmatch(r"step [48]/8 \| eval_loss \d+\.\d{4}", x)]
    assert [x.split()[1] for x in evals] == ["4/8", "8/8"]
    assert not any("validation" in x for x in lines)


@pytest.mark.integration
def test_data_without_a_validation_split_is_said_once(tmp_path, capsys):
    data = small_prepared(str(tmp_path / "data"), ("train",))
    result = _run(data, str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert (
        err.count(
            "train: the data has no validation split (prepare --validation-fraction makes one): "
            "no evaluation\n"
        )
        == 1
    )
    assert "eval_loss" not in err and "eval_loss" not in result
    # Turning evaluation off says nothing.
    _run(data, str(tmp_path / "off"), eval_batches=0)
    assert "validation" not in capsys.readouterr().err


def test_sampling_windows_are_the_trained_context(monkeypatch):
    windows = []

    def next_logits(model, window, position):
        windows.append((window.shape, int(position)))
        return jax.numpy.zeros(100)

    monkeypatch.setattr(sample_module, "_next_logits", next_logits)
    prompt = list(range(2, 22))
    generate(
        None,
        prompt,
        max_tokens=3,
        key=jax.random.key(0),
        temperature=0.0,
        top_k=None,
        vocab_size=100,
        stop_token=None,
        context=8,
    )
    # A model trained on 8-token rows sees the last 8 tokens, in an 8-wide window, whatever its
    # max_seq_len.
    assert windows == [((1, 8), 7)] * 3
