"""`python -m pipeline batches`, and the loader end to end on the output of the real `prepare`."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.cli.arguments import FlagError
from pipeline.load import PACKINGS, LoaderConfig, make_dataset
from pipeline.load.batches import main
from support.runs import run_command
from support.synthetic import unique_documents, write_prepared


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    rng = np.random.default_rng(5)
    out = str(tmp_path_factory.mktemp("prepared"))
    docs = {
        "train": unique_documents([int(n) for n in rng.integers(1, 150, 200)]),
        "validation": unique_documents(
            [int(n) for n in rng.integers(1, 150, 40)], first_id=100_000
        ),
    }
    write_prepared(out, docs, record_tokens=128, num_shards=2)
    return out


def loader_batches(data_dir: str, take: int | None, **kw) -> list[dict[str, np.ndarray]]:
    ds = make_dataset(LoaderConfig(data_dir, num_epochs=None if take else 1, **kw))
    if take is None:
        return list(ds)
    it = iter(ds)
    return [next(it) for _ in range(take)]


@pytest.mark.parametrize("packing", PACKINGS)
def test_batches_writes_what_host_i_of_n_trains_on(prepared, tmp_path, packing):
    out = str(tmp_path / "b.npz")
    argv = [
        prepared,
        "--seq-len",
        "16",
        "--batch-size",
        "6",
        "--shard-index",
        "1",
        "--shard-count",
        "3",
    ]
    assert main([*argv, "--seed", "4", "--packing", packing, "--take", "5", "--out", out]) == 0
    arrays = np.load(out)
    names = {"inputs", "targets"} | ({"segment_ids", "positions"} if packing != "concat" else set())
    assert set(arrays.files) == names
    expected = loader_batches(
        prepared,
        5,
        seq_len=16,
        global_batch_size=6,
        seed=4,
        packing=packing,
        shard_index=1,
        shard_count=3,
    )
    for name in names:
        assert arrays[name].shape == (5, 2, 16) and arrays[name].dtype == np.int32
        np.testing.assert_array_equal(arrays[name], np.stack([b[name] for b in expected]))


def test_batches_reports_the_padding_share_at_a_seq_len(prepared, tmp_path, capsys):
    out = str(tmp_path / "b.npz")
    argv = [prepared, "--seq-len", "64", "--batch-size", "4", "--take", "epoch", "--out", out]
    assert main([*argv, "--packing", "document"]) == 0
    segment_ids = np.load(out)["segment_ids"]
    padding = np.count_nonzero(segment_ids == 0) / segment_ids.size
    assert 0 < padding < 0.05
    assert f"batches: padding: {padding:.2%} of target positions" in capsys.readouterr().out
    assert main([*argv, "--packing", "concat"]) == 0
    assert "padding" not in capsys.readouterr().out


def test_batches_take_epoch_writes_exactly_one_epoch(prepared, tmp_path):
    out = str(tmp_path / "e.npz")
    assert (
        main(
            [
                prepared,
                "--split",
                "validation",
                "--seq-len",
                "8",
                "--batch-size",
                "2",
                "--take",
                "epoch",
                "--out",
                out,
            ]
        )
        == 0
    )
    inputs = np.load(out)["inputs"]
    expected = loader_batches(
        prepared,
        None,
        split="validation",
        seq_len=8,
        global_batch_size=2,
        shard_count=1,
        shard_index=0,
    )
    assert inputs.shape == (len(expected), 2, 8)
    np.testing.assert_array_equal(inputs, np.stack([b["inputs"] for b in expected]))
    # Validation ids start at 100000: no train token in it.
    assert (inputs[inputs > 1] >= 100_000).all()


@pytest.mark.parametrize(
    "args,status,message",
    [
        (["--batch-size", "5", "--shard-count", "2"], 1, "not divisible by the 2 parts"),
        (["--seq-len", "0"], 2, "--seq-len must be at least 1, got 0"),
        (["--split", "test"], 2, "--split must be one of ('train', 'validation'), got 'test'"),
    ],
)
def test_batches_reports_expected_failures_in_one_line(
    prepared, tmp_path, capsys, args, status, message
):
    argv = [
        prepared,
        "--seq-len",
        "8",
        "--batch-size",
        "4",
        "--take",
        "2",
        "--out",
        str(tmp_path / "x.npz"),
    ]
    assert run_command("batches", *argv, *args) == status
    err = capsys.readouterr().err
    assert message in err and err.startswith("batches: error:") and err.count("\n") == 1
    assert not (tmp_path / "x.npz").exists()


def test_batches_on_a_directory_that_is_not_prepared(tmp_path, capsys):
    assert (
        run_command(
            "batches",
            str(tmp_path),
            "--seq-len",
            "8",
            "--batch-size",
            "4",
            "--take",
            "1",
            "--out",
            str(tmp_path / "x.npz"),
        )
        == 1
    )
    assert "no manifest.json" in capsys.readouterr().err


def test_batches_refuses_a_bad_take(prepared, tmp_path, capsys):
    with pytest.raises(FlagError, match="'epoch'") as e:
        main(
            [
                prepared,
                "--seq-len",
                "8",
                "--batch-size",
                "4",
                "--take",
                "0",
                "--out",
                str(tmp_path / "x.npz"),
            ]
        )
    assert e.value.exit_status == 2


@pytest.mark.slow
def test_loader_reads_what_prepare_wrote(tmp_path, encoding):
    from pipeline.corpus import write_corpus
    from support.runs import decoded_documents, read_split, run_prepare

    corpus = str(tmp_path / "stories.txt")
    write_corpus(corpus, 3000, seed=2)
    out = str(tmp_path / "prepared")
    run_prepare(
        [corpus],
        out,
        "--unit-bytes",
        "65536",
        "--validation-fraction",
        "0.1",
        "--record-tokens",
        "512",
    )
    tokens = np.concatenate(read_split(out))
    for packing in ("concat", "document"):
        batches = loader_batches(
            out,
            None,
            seq_len=128,
            global_batch_size=4,
            packing=packing,
            shard_index=0,
            shard_count=1,
            worker_count=2,
        )
        targets = np.concatenate([b["targets"].reshape(-1) for b in batches])
        if packing == "document":
            targets = np.concatenate([b["targets"][b["segment_ids"] > 0] for b in batches])
        # Every batch token is a token of the split, each at most as often as the split holds it.
        counts = np.bincount(tokens, minlength=encoding.n_vocab)
        assert (np.bincount(targets, minlength=encoding.n_vocab) <= counts).all()
        assert len(targets) > 0.85 * len(tokens)
    assert decoded_documents(out, encoding, "validation")
