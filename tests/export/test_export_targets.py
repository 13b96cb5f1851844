"""The export's formats without data: the command is listed, and each format's dtype for a
vocabulary is its reader's (Megatron-Core's `DType.optimal_dtype`, llm.c's two headers, datatrove's
token size), or a one-line refusal."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.cli import commands
from pipeline.export.targets import TARGETS
from schemas.errors import SettingError


def test_the_help_lists_export(capsys):
    with pytest.raises(SystemExit):
        commands.main(["--help"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:1] == ["export"] and "Megatron-LM" in line for line in lines)


@pytest.mark.parametrize(
    "fmt,n_vocab,dtype",
    [
        ("megatron", 50257, "<u2"),
        ("megatron", 65499, "<u2"),
        ("megatron", 65500, "<i4"),  # optimal_dtype: uint16 only below 65,500
        ("megatron", 128256, "<i4"),
        ("nanogpt", 50257, "<u2"),
        ("nanogpt", 2**16, "<u2"),
        ("llmc", 2**16, "<u2"),
        ("llmc", 2**16 + 1, "<u4"),
        ("datatrove", 2**16, "<u2"),
        ("datatrove", 151665, "<u4"),
    ],
)
def test_each_format_holds_a_vocabulary_in_its_readers_dtype(fmt, n_vocab, dtype):
    assert TARGETS[fmt].dtype(n_vocab, tokens=1000) == np.dtype(dtype)


@pytest.mark.parametrize(
    "fmt,n_vocab,tokens",
    [("nanogpt", 2**16 + 1, 1000), ("llmc", 50257, 2**31), ("megatron", 2**31 + 1, 1000)],
)
def test_what_a_format_cannot_hold_is_a_setting_error(fmt, n_vocab, tokens):
    with pytest.raises(SettingError, match=f"^format {fmt} "):
        TARGETS[fmt].dtype(n_vocab, tokens=tokens)
