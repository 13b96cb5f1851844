"""The loader's packers against Grain's, where the two mean the same batches.

Concat packing cuts the windows Grain's concat-then-split cuts from the same stream; document
packing places the same segments in the same rows, in the same order, as Grain's first fit with one
bin per row. Grain's packers are kept out of training (pipeline/load/packing.py says why), and so
serve as an independent oracle here.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_loader_packing import EOT, chunks_of, sample_records

from pipeline.load.grain_packing import grain_concat_then_split, grain_first_fit
from pipeline.load.packing import ConcatPackIterDataset, DocumentPackIterDataset


def assert_prefix(ours: list[dict], theirs: list[dict]) -> None:
    """Ours drop an incomplete last batch where Grain's may pad it: compare ours with Grain's first."""
    assert len(ours) > 5 and len(theirs) - len(ours) in (0, 1)
    for a, b in zip(ours, theirs):
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("rows,seq_len,per_chunk", [(3, 7, 1), (2, 33, 5), (4, 64, 100)])
def test_concat_packing_cuts_the_windows_of_grains_concat_then_split(rows, seq_len, per_chunk):
    chunks = chunks_of(sample_records(4, count=300), per_chunk)
    ours = list(ConcatPackIterDataset(chunks, rows=rows, seq_len=seq_len))
    assert_prefix(ours, list(grain_concat_then_split(chunks, rows=rows, seq_len=seq_len)))


@pytest.mark.parametrize("rows,seq_len,per_chunk", [(1, 16, 3), (4, 16, 1), (3, 40, 4), (8, 64, 100)])
def test_document_packing_places_segments_as_grains_first_fit(rows, seq_len, per_chunk):
    chunks = chunks_of(sample_records(5, count=300), per_chunk)
    ours = list(DocumentPackIterDataset(chunks, rows=rows, seq_len=seq_len, eot_id=EOT))
    assert_prefix(ours, list(grain_first_fit(chunks, rows=rows, seq_len=seq_len, eot_id=EOT)))
