"""The global index on lengths alone (no files): positions, mixture stages, and what a step
costs."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.load.best_fit_rows import BestFitRows
from pipeline.load.global_index import PACKINGS, FirstFitRows, Planner, Position, Stage
from pipeline.load.lengths import SplitLengths, document_lengths


def lengths_of(records: list[list[int]]) -> SplitLengths:
    """A split whose record `i` holds documents of lengths `records[i]`."""
    docs = np.array([d for r in records for d in r], np.uint32)
    firsts = np.concatenate(([0], np.cumsum([len(r) for r in records]))).astype(np.int64)
    return SplitLengths((docs,), (firsts,), np.array([0, len(records)], np.int64))


def random_split(seed: int, records: int) -> SplitLengths:
    rng = np.random.default_rng(seed)
    return lengths_of(
        [[int(n) for n in rng.integers(1, 300, rng.integers(1, 5))] for _ in range(records)]
    )


def walk(planner: Planner, position: Position, steps: int) -> tuple[list, Position]:
    plans = []
    for _ in range(steps):
        plan, position = planner.plan(position)
        plans.append(plan)
    return plans, position


def test_document_lengths_split_records_at_end_of_text():
    tokens = np.array([5, 1, 7, 8, 1, 9, 1, 4, 4])  # records [5 1 7 8 1] [9 1] [4 4], end-of-text 1
    docs, counts = document_lengths(tokens, np.array([5, 7, 9]), eot_id=1)
    np.testing.assert_array_equal(docs, [2, 3, 2, 2])
    np.testing.assert_array_equal(counts, [2, 1, 1])


@pytest.mark.parametrize("packing", PACKINGS)
def test_a_plan_resumes_from_its_position_as_a_list(packing):
    planner = Planner(
        [random_split(0, 50), random_split(1, 20)],
        stages=[Stage(0, (0.6, 0.4))],
        seed=3,
        seq_len=64,
        rows=4,
        packing=packing,
    )
    plans, _ = walk(planner, Position.start(2), 30)
    _, middle = walk(planner, Position.start(2), 17)
    again, _ = walk(planner, Position.from_list(middle.to_list()), 13)
    for a, b in zip(plans[17:], again):
        for name in ("source", "record", "start", "length", "dest", "segment"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("packing", ["concat", "document"])
def test_realized_shares_follow_each_stage(packing):
    stages = [Stage(0, (0.8, 0.2)), Stage(40, (0.25, 0.75))]
    planner = Planner(
        [random_split(0, 300), random_split(1, 300)],
        stages=stages,
        seed=0,
        seq_len=128,
        rows=8,
        packing=packing,
    )
    plans, _ = walk(planner, Position.start(2), 80)
    for stage, window in ((stages[0], plans[2:40]), (stages[1], plans[42:80])):
        tokens = np.bincount(
            np.concatenate([p.source for p in window]),
            np.concatenate([p.length for p in window]),
            2,
        )
        np.testing.assert_allclose(tokens / tokens.sum(), stage.weights, atol=0.03)


def test_host_rows_are_the_clipped_pieces_of_the_global_plan():
    planner = Planner(
        [random_split(0, 40)],
        stages=[Stage(0, (1.0,))],
        seed=0,
        seq_len=16,
        rows=6,
        packing="concat",
    )
    plan, _ = planner.plan(Position.start(1))
    parts = [plan.rows(first, first + 2, rows=6, width=planner.width) for first in (0, 2, 4)]
    assert sum(int(p.length.sum()) for p in parts) == int(plan.length.sum()) == 6 * 17
    for p in parts:
        assert p.dest.min() == 0 and int((p.dest + p.length).max()) == 2 * 17


@pytest.mark.parametrize("packing", PACKINGS)
def test_advance_moves_as_plan_does(packing):
    # seq_len 64 under documents of up to 300 tokens: records with and without documents to cut.
    stages = [Stage(0, (0.6, 0.4)), Stage(9, (0.2, 0.8))]
    planner = Planner(
        [random_split(0, 50), random_split(1, 20)],
        stages=stages,
        seed=3,
        seq_len=64,
        rows=4,
        packing=packing,
    )
    position = Position.start(2)
    for _ in range(40):
        plan, after = planner.plan(position)
        assert planner.advance(position) == after
        # Pieces fill each row (concat: the whole batch) from its start, one after another, without
        # overlap; concat leaves no room.
        span = 4 * planner.width if packing == "concat" else planner.width
        for part in range(4 * planner.width // span):
            mine = plan.dest // span == part
            order = np.argsort(plan.dest[mine])
            ends = np.cumsum(plan.length[mine][order])
            np.testing.assert_array_equal(
                plan.dest[mine][order] - part * span, ends - plan.length[mine][order]
            )
            assert ends[-1] <= span and (packing != "concat" or ends[-1] == span)
        position = after


@pytest.mark.parametrize("rows", [1, 3, 16, 100])
def test_document_rows_place_each_piece_in_the_first_row_with_room(rows):
    # The max tree against a plain scan of the rows, on random lengths up to the row width.
    rng = np.random.default_rng(rows)
    width = 64
    lengths = [int(n) for n in rng.integers(1, width + 1, 40 * rows)]
    tree = FirstFitRows(rows, width)
    out: list[int] = []
    stop = tree.place(lengths, 0, len(lengths), out, 7, 9)
    room, expected = [width] * rows, []
    for n in lengths:
        row = next((r for r in range(rows) if room[r] >= n), None)
        if row is None:
            break
        expected.append(
            (row * width + width - room[row], sum(1 for d, _ in expected if d // width == row) + 1)
        )
        room[row] -= n
    assert stop == len(expected) < len(lengths)
    assert out[0::5] == [7] * stop and out[1::5] == [9] * stop and out[2::5] == list(range(stop))
    assert [(dest, segment) for dest, segment in zip(out[3::5], out[4::5])] == expected


@pytest.mark.parametrize("seed, group_rows", [(0, 256), (1, 256), (2, 8), (3, 8), (4, 2)])
def test_best_fit_rows_are_the_best_fit_decreasing_packing_of_each_group(seed, group_rows):
    # Against a plain scan: a group's pieces (with those the group before left waiting) longest
    # first (the earlier draw on a tie), each into the row of its group with the least room that
    # holds it (of those, the one that came to that room last); a group ends where the pieces
    # shorter than a row reach `group_rows` rows, and its row less than half full waits for the
    # next group, unless it is the last.
    rng = np.random.default_rng(seed)
    width = 64
    lengths = [int(n) for n in rng.integers(1, width + 1, 300)]
    packed = BestFitRows(lengths, width, group_rows=group_rows)
    shared = np.where(np.array(lengths) < width, lengths, 0)
    group = ((np.cumsum(shared) - shared) // (group_rows * width)).tolist()
    assert (group_rows < 256) == (group[-1] > 2)
    rows = [[p] for p in range(len(lengths)) if lengths[p] == width]
    waiting: list[int] = []
    groups = sorted({g for p, g in enumerate(group) if lengths[p] < width})
    for g in groups:
        pieces = waiting + [p for p in range(len(lengths)) if group[p] == g and lengths[p] < width]
        room: list[int] = []
        since: list[int] = []
        mine: list[list[int]] = []
        for t, piece in enumerate(sorted(pieces, key=lambda p: (-lengths[p], p))):
            fits = [r for r in range(len(room)) if room[r] >= lengths[piece]]
            row = min(fits, key=lambda r: (room[r], -since[r]), default=None)
            if row is None:
                row = len(mine)
                mine.append([])
                room.append(width)
                since.append(t)
            mine[row].append(piece)
            room[row] -= lengths[piece]
            since[row] = t
        waiting = []
        half = [r for r in range(len(mine)) if 2 * room[r] > width]
        assert len(half) <= 1
        if half and g != groups[-1]:
            waiting = sorted(mine.pop(half[0]))
        rows += mine
    # The same rows, each in draw order, in the order of the last draw each holds.
    got = [packed.pieces[a:b].tolist() for a, b in zip(packed.first[:-1], packed.first[1:])]
    assert got == sorted((sorted(r) for r in rows), key=max)
    assert sorted(packed.pieces.tolist()) == list(range(len(lengths)))
    assert packed.tokens == [sum(lengths[p] for p in r) for r in got]
    assert max(packed.tokens) <= width
    # Each row's pieces lie one after another from its start, segment ids counting from 1.
    pieces, dest, segment = packed.placed(np.arange(len(packed)), np.arange(len(packed)) * width)
    for r, (a, b) in enumerate(zip(packed.first[:-1], packed.first[1:])):
        sizes = [lengths[p] for p in pieces[a:b]]
        assert dest[a:b].tolist() == (r * width + np.cumsum([0, *sizes[:-1]])).tolist()
        assert segment[a:b].tolist() == list(range(1, b - a + 1))


def test_best_fit_pads_less_than_first_fit_where_long_documents_end():
    # Records of one document of 2 to 40 rows: first fit pads each batch's rows of last pieces.
    rng = np.random.default_rng(0)
    split = lengths_of([[int(n)] for n in rng.integers(128, 2560, 400)])
    share = {}
    for packing in ("document", "document-first-fit"):
        planner = Planner(
            [split], stages=[Stage(0, (1.0,))], seed=0, seq_len=64, rows=16, packing=packing
        )
        plan, _ = planner.plan_steps(Position.start(1), 200)
        share[packing] = 1 - plan.length.sum() / (200 * 16 * 64)
    assert share["document"] < 0.005 < 0.01 < share["document-first-fit"]
