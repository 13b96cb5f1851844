"""Mixtures of prepared directories: data specs, token shares, per-source counts, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.load import (
    LoaderConfig,
    LoaderError,
    make_dataset,
    make_iterator,
    open_prepared,
)
from pipeline.load.batches import main as batches_main
from pipeline.load.data_spec import DataSource, parse_data_spec
from pipeline.load.rows import SOURCE_TOKENS
from support.batches import BOOKS_FIRST, assert_same, mixture, owners, real, take
from support.synthetic import EOT_ID


def config(data, **overrides) -> LoaderConfig:
    base = dict(seq_len=32, global_batch_size=4, shard_index=0, shard_count=1)
    return LoaderConfig(data, **{**base, **overrides})


@pytest.mark.integration
@pytest.mark.parametrize("packing", ["concat", "document"])
def test_an_epoch_realizes_the_token_shares_and_counts_them_per_batch(sources, packing):
    cfg = config(mixture(sources), packing=packing, num_epochs=1)
    assert cfg.source_names == ("web", "books")
    batches = list(make_dataset(cfg))
    for batch in batches:
        assert batch[SOURCE_TOKENS].dtype == np.int64 and batch[SOURCE_TOKENS].shape == (2,)
        np.testing.assert_array_equal(batch[SOURCE_TOKENS], np.bincount(owners(batch), minlength=2))
    totals = np.sum([b[SOURCE_TOKENS] for b in batches], axis=0)
    shares = totals / totals.sum()
    # Records of books hold ~2.6x the tokens of web's: record shares of 0.7/0.3 would give books
    # ~0.5.
    assert abs(shares[0] - 0.7) < 0.01 and abs(shares[1] - 0.3) < 0.01, shares
    # One epoch: the source that runs out first (books) is read once, all of it but the dropped
    # tail, and no token of either source twice.
    targets = np.concatenate([b["targets"][real(b)] for b in batches])
    words = targets[targets != EOT_ID]
    assert len(np.unique(words)) == len(words)
    # Concat packing: a window's first token is an input only.
    seen = np.union1d(words, np.concatenate([b["inputs"][real(b)] for b in batches]))
    books = open_prepared(sources["books"]).totals["train"]
    assert books.tokens - books.documents - 900 - 4 * 33 < np.count_nonzero(seen >= BOOKS_FIRST)


@pytest.mark.integration
def test_restore_mid_mixture_continues_exactly_with_any_worker_count(sources):
    cfg = config(mixture(sources), packing="document")
    it = make_iterator(cfg)
    states, reference = [], []
    for _ in range(30):
        states.append(json.loads(json.dumps(it.get_state())))
        reference.append(next(it))
    it.close()
    restored = make_iterator(cfg)
    for point in (17, 3, 29):
        restored.set_state(states[point])
        assert_same(take(restored, 30 - point), reference[point:])
    restored.close()
    two = make_iterator(config(mixture(sources), packing="document", worker_count=2))
    try:
        two.set_state(states[11])
        assert_same(take(two, 19), reference[11:])
    finally:
        two.close()


def test_stages_change_the_realized_shares_at_their_step_and_resume_exactly(sources, tmp_path):
    spec = tmp_path / "staged.json"
    spec.write_text(
        json.dumps(
            {
                "web": {"path": sources["web"], "weight": 0.8, "stages": {"40": 0.2}},
                "books": {"path": sources["books"], "weight": 0.2, "stages": {"40": 0.8}},
            }
        )
    )
    data = parse_data_spec(str(spec))
    assert (
        data[0].stages == ((40, 0.2),)
        and data[0].weight_at(39) == 0.8
        and data[0].weight_at(40) == 0.2
    )
    cfg = config(data, packing="document", global_batch_size=8)
    states, batches = [], []
    it = make_iterator(cfg)
    for _ in range(80):
        states.append(json.loads(json.dumps(it.get_state())))
        batches.append(next(it))
    it.close()
    for stage, weights in ((range(2, 40), (0.8, 0.2)), (range(42, 80), (0.2, 0.8))):
        tokens = np.sum([batches[i][SOURCE_TOKENS] for i in stage], axis=0)
        np.testing.assert_allclose(tokens / tokens.sum(), weights, atol=0.03)
    restored = make_iterator(cfg)
    restored.set_state(states[50])  # mid-stage
    assert_same(take(restored, 10), batches[50:60])
    restored.close()


def test_a_mixture_of_one_is_the_plain_directory(sources):
    plain = take(make_iterator(config(sources["web"], packing="document")), 5)
    assert SOURCE_TOKENS not in plain[0]
    assert_same(
        take(make_iterator(config(parse_data_spec(sources["web"]), packing="document")), 5), plain
    )


def test_weights_change_the_mixture(sources):
    heavy = np.sum(
        [b[SOURCE_TOKENS] for b in take(make_iterator(config(mixture(sources, 0.2, 0.8))), 200)],
        axis=0,
    )
    assert 0.75 < heavy[1] / heavy.sum() < 0.85


def test_sources_that_do_not_share_a_tokenizer_are_refused(sources):
    spec = parse_data_spec(f"books=1:{sources['books']},other=1:{sources['other']}")
    with pytest.raises(
        LoaderError, match="do not share one tokenizer: 'books' was prepared with .* 'other' with"
    ):
        make_dataset(config(spec))


def test_a_source_without_the_split_is_named(sources):
    with pytest.raises(LoaderError, match=f"{sources['books']} has no 'validation' split"):
        make_dataset(config(mixture(sources), split="validation"))


def test_data_specs_parse_to_named_weighted_sources(tmp_path):
    assert parse_data_spec("data/stories/") == (DataSource("stories", "data/stories/", 1.0),)
    assert parse_data_spec("runs/my data") == (DataSource("my_data", "runs/my data", 1.0),)
    web, books = parse_data_spec(" web=4:data/web , books=1:gs://bucket/books ")
    assert web == DataSource("web", "data/web", 0.8) and books == DataSource(
        "books", "gs://bucket/books", 0.2
    )
    spec = tmp_path / "conf" / "mix.json"
    spec.parent.mkdir()
    spec.write_text(
        json.dumps(
            {"web": {"path": "../web", "weight": 3}, "books": {"path": "/abs/books", "weight": 1}}
        )
    )
    assert parse_data_spec(str(spec)) == (
        DataSource("web", str(tmp_path / "conf" / "../web"), 0.75),
        DataSource("books", "/abs/books", 0.25),
    )


@pytest.mark.parametrize(
    "spec,message",
    [
        ("", "empty data spec"),
        ("web=0.8", "expected NAME=WEIGHT:PATH"),
        ("web=0.8:", "expected NAME=WEIGHT:PATH"),
        ("=1:data/web", "expected NAME=WEIGHT:PATH"),
        ("web=0.8:a,stories0.2:b", "bad data spec entry 'stories0.2:b'"),
        ("web=lots:data/web", "weight 'lots' of source 'web' is not a number"),
        ("web=0:data/web", "must be a positive number"),
        ("web=-1:data/web,b=1:x", "must be a positive number"),
        ("web=nan:data/web", "must be a positive number"),
        ("web=1:a,web=2:b", "names 'web' more than once"),
        ("my web=1:data/web", "source name 'my web' is not usable"),
    ],
)
def test_bad_data_specs_are_refused(spec, message):
    with pytest.raises(LoaderError, match=message):
        parse_data_spec(spec)


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON"),
        ("[]", "must hold a non-empty JSON object"),
        ('{"web": {"path": "w"}}', "source 'web' must be"),
        ('{"web": {"path": "w", "weight": 1, "extra": 2}}', "source 'web' must be"),
        ('{"web": {"path": "w", "weight": "heavy"}}', "weight of source 'web' must be a number"),
        (
            '{"web": {"path": "w", "weight": 1, "stages": {"soon": 2}}}',
            "stages of source 'web' must be",
        ),
        (
            '{"web": {"path": "w", "weight": 1, "stages": {"0": 2}}}',
            "must start at distinct positive steps",
        ),
        ('{"web": {"path": "w", "weight": 1, "stages": {"9": 0}}}', "must be a positive number"),
    ],
)
def test_bad_data_spec_files_are_refused(tmp_path, content, message):
    path = tmp_path / "mix.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(LoaderError, match=message):
        parse_data_spec(str(path))


def test_loader_config_refuses_bad_data():
    with pytest.raises(LoaderError, match="tuple of DataSource"):
        LoaderConfig(["data/web"])
    with pytest.raises(LoaderError, match="names 'a' more than once"):
        LoaderConfig((DataSource("a", "x"), DataSource("a", "y")))


def test_batches_writes_and_prints_the_realized_mixture(sources, tmp_path, capsys):
    out = str(tmp_path / "m.npz")
    spec = f"web=0.7:{sources['web']},books=0.3:{sources['books']}"
    assert (
        batches_main(
            [spec, "--seq-len", "32", "--batch-size", "4", "--take", "epoch", "--out", out]
        )
        == 0
    )
    counts = np.load(out)[SOURCE_TOKENS]
    totals = counts.sum(axis=0)
    printed = capsys.readouterr().out
    assert counts.shape[1] == 2 and f"web {totals[0] / totals.sum():.4f} (weight 0.7000)" in printed
    assert f"books {totals[1] / totals.sum():.4f} (weight 0.3000)" in printed
