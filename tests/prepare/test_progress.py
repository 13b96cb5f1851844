"""Progress lines: live on a terminal; in a log, one per 30 seconds or per tenth of the units."""

from __future__ import annotations

import io

from pipeline.prepare.execution.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_a_line_per_half_minute_or_tenth_of_the_units():
    clock, stream, state = Clock(), io.StringIO(), {"done": 0}
    progress = Progress(
        lambda: (state["done"], 1000 * state["done"]), 100, stream=stream, clock=clock
    )
    # An hour at one unit a minute, ticked every second: 120 half-minutes, 10 tenths.
    for second in range(3600):
        clock.now = float(second)
        state["done"] = second // 60
        progress.tick()
    progress.finish()
    lines = stream.getvalue().splitlines()
    assert 120 <= len(lines) <= 131, len(lines)
    assert lines[-1].startswith("units 59/100")
    # Work that moves fast logs by tenths: 100 units in 10 seconds give about 10 lines, not 10 per
    # second.
    clock, stream, state = Clock(), io.StringIO(), {"done": 0}
    progress = Progress(lambda: (state["done"], 0), 100, stream=stream, clock=clock, interval=0.1)
    for tenth in range(100):
        clock.now = tenth / 10
        state["done"] = tenth + 1
        progress.tick()
    assert 9 <= len(stream.getvalue().splitlines()) <= 11


def test_a_terminal_line_is_refreshed_in_place():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    clock, stream = Clock(), Terminal()
    progress = Progress(lambda: (3, 3000), 10, stream=stream, clock=clock)
    for second in range(5):
        clock.now = float(second + 1)
        progress.tick()
    progress.finish()
    text = stream.getvalue()
    assert text.count("\r") == 6 and text.count("\n") == 1
    assert "units 3/10" in text and "ETA" in text
