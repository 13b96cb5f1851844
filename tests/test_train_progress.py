"""What training shows while it runs: plain progress lines off a terminal, and sampling's context."""

from __future__ import annotations

import io

import jax

import train.sample as sample_module
from train.metrics import PlainProgress
from train.sample import generate


def test_plain_progress_writes_a_line_every_tenth_of_the_steps_or_30_seconds():
    now = [0.0]
    stream = io.StringIO()
    progress = PlainProgress(start=0, total=100, stream=stream, clock=lambda: now[0])
    for step in range(1, 101):
        now[0] += 0.1 if step <= 40 else 5.0
        progress.set_postfix({"loss": f"{step:.1f}"})
        progress.step(step)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines[0] == "step 10/100 | loss 10.0" and lines[-1] == "step 100/100 | loss 100.0"
    steps = [int(line.split()[1].split("/")[0]) for line in lines]
    assert steps[:4] == [10, 20, 30, 40]  # a tenth of the steps each, before 30 seconds pass
    assert steps[4:] == [*range(46, 100, 6), 100]  # then every 30 seconds (6 steps), and the last


def test_sampling_windows_are_the_trained_context(monkeypatch):
    windows = []

    def next_logits(model, window, position):
        windows.append((window.shape, int(position)))
        return jax.numpy.zeros(100)

    monkeypatch.setattr(sample_module, "_next_logits", next_logits)
    prompt = list(range(2, 22))
    generate(None, prompt, max_tokens=3, key=jax.random.key(0), temperature=0.0, top_k=None, vocab_size=100,
             stop_token=None, context=8)
    # A model trained on 8-token rows sees the last 8 tokens, in an 8-wide window, whatever its max_seq_len.
    assert windows == [((1, 8), 7)] * 3
