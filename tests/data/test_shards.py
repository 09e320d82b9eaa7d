"""Token shards (``data.stream=true``, ``poslab prepare``): prepared once, read back as windows of the corpus,
resumed at the exact window, and refused in one line when they are not what the run needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from poslab.cli import main
from poslab.config.composition import compose
from poslab.data import shards
from poslab.data.shards import MANIFEST, check_shards, prepare_shards, streamed_loader, token_dtype
from poslab.errors import DataError
from poslab.modalities.text.data import TextDataModule, line_pieces
from poslab.run.train import train
from tests.run.test_resume import interrupted_and_resumed

STREAM = ["data.stream=true", "data.context=16"]


@pytest.fixture
def streamed(tiny_text, tmp_path) -> list[str]:
    return [*tiny_text, *STREAM, f"data.root={tmp_path / 'data'}"]


def setup(overrides: list[str]) -> TextDataModule:
    datamodule = TextDataModule(compose(overrides).data)
    datamodule.setup("fit")
    return datamodule


def test_the_narrowest_dtype_holds_the_vocabulary():
    assert token_dtype(256) == token_dtype(65536) == torch.uint16 and token_dtype(65537) == torch.int32


def test_documents_end_at_line_ends_and_join_back_to_the_text():
    text = "ab\ncdef\ng\n" * 50 + "tail"
    pieces = line_pieces(text, 7)
    assert "".join(pieces) == text and all(p.endswith("\n") for p in pieces[:-1]) and len(pieces) > 10


def test_streamed_windows_are_windows_of_the_tokenized_training_split_and_prepared_once(streamed, monkeypatch):
    datamodule = setup(streamed)
    folder = Path(datamodule.shards)
    manifest = json.loads((folder / MANIFEST).read_text())
    source = datamodule.vocab.encode(Path(compose(streamed).data.path).read_text())
    assert manifest["dtype"] == "uint16" and manifest["vocab_size"] == len(datamodule.vocab)
    assert manifest["tokenizer"] == "char" and manifest["tokens"] > 0.8 * len(source)  # 90 % of it is training
    train_split = source[: manifest["tokens"]].tolist()  # the training split is the text's beginning
    batch = next(iter(datamodule.train_dataloader()))
    assert batch.shape == (8, 17) and batch.dtype == torch.uint16
    text = "".join(map(chr, train_split))
    for window in batch.tolist():  # each window: a contiguous run of the training tokens
        assert "".join(map(chr, window)) in text
    monkeypatch.setattr("litdata.optimize", lambda **_: pytest.fail("prepared again"))
    assert setup(streamed).shards == str(folder)


def test_a_streamed_run_killed_mid_training_resumes_at_the_exact_window(streamed, monkeypatch):
    """The loader fetches ahead of the step it trains; the resumed run still continues where training was."""
    whole, resumed, _ = interrupted_and_resumed([*streamed, "trainer.max_steps=8"], monkeypatch, step=3)
    timed = {k: v for k, v in resumed["metrics"].items() if k.startswith("perf/")}
    assert resumed["metrics"] == whole["metrics"] | timed
    assert whole["metrics"]["test/loss"] > 0


def test_a_streamed_run_trains_and_tests(streamed):
    summary = train(compose([*streamed, "trainer.max_steps=4"]))
    assert summary["metrics"]["test/loss"] > 0 and summary["config"]["data"]["stream"] is True


def test_shards_of_another_tokenizer_are_refused_in_one_line(streamed, tmp_path):
    folder = tmp_path / "mine"
    setup([*streamed, f"data.shards={folder}"])
    with pytest.raises(DataError, match=rf"^the token shards in {folder} hold tokenizer='char', this run needs 'bpe'"):
        setup([*streamed, f"data.shards={folder}", "data.tokenizer=bpe", "data.vocab_size=300"])


def test_a_truncated_or_missing_shard_names_the_file(streamed):
    datamodule = setup(streamed)
    folder = Path(datamodule.shards)
    expected = {k: v for k, v in json.loads((folder / MANIFEST).read_text()).items() if k == "tokenizer"}
    chunk = next(folder.glob("chunk-*.bin"))
    chunk.write_bytes(chunk.read_bytes()[:-10])
    with pytest.raises(DataError, match=rf"^token shard {chunk} is corrupt or truncated \(\d[\d,]* bytes, its index"):
        check_shards(folder, expected)
    chunk.unlink()
    with pytest.raises(DataError, match=r"\(missing, its index says"):
        check_shards(folder, expected)


def test_a_manifest_that_does_not_match_its_shards_or_its_dtype_is_one_line(streamed):
    folder = Path(setup(streamed).shards)
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "tokens": manifest["tokens"] + 1}))
    with pytest.raises(DataError, match="counts .* tokens, its manifest .*: they are not the same preparation"):
        check_shards(folder, {})
    (folder / MANIFEST).write_text(json.dumps({**manifest, "vocab_size": 70_000}))
    with pytest.raises(DataError, match="are uint16, not what a vocabulary of 70,000 takes"):
        check_shards(folder, {})
    (folder / MANIFEST).write_text("{")
    with pytest.raises(DataError, match=f"^{folder / MANIFEST} is unreadable"):
        check_shards(folder, {})


def test_an_interrupted_preparation_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    def killed(**kwargs):
        Path(kwargs["output_dir"]).mkdir(parents=True)
        Path(kwargs["output_dir"], "chunk-0-0.bin").write_bytes(b"\0" * 10)  # what it had written
        raise KeyboardInterrupt

    monkeypatch.setattr("litdata.optimize", killed)
    with pytest.raises(KeyboardInterrupt):
        prepare_shards(["some text"] * 3, lambda t: [1, 2], tmp_path / "shards", {"vocab_size": 300}, echo=print)
    assert list(tmp_path.iterdir()) == []


def test_a_disk_that_fills_while_preparing_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def full(**kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("litdata.optimize", full)
    with pytest.raises(DataError, match=r"^could not write the token shards into .*: \[Errno 28\] No space left"):
        prepare_shards(["text"], lambda t: [1], tmp_path / "shards", {"vocab_size": 300})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("documents", "message"),
    [([], "the source holds no documents"), (["", ""], "the source's documents hold no tokens")],
)
def test_an_empty_source_is_one_line_and_leaves_nothing(tmp_path, documents, message):
    with pytest.raises(DataError, match=f"^nothing to prepare into .*: {message}"):
        prepare_shards(documents, lambda t: [ord(c) for c in t], tmp_path / "shards", {"vocab_size": 300})
    assert list(tmp_path.iterdir()) == []


def test_poslab_prepare_prints_tokens_per_second_and_a_second_call_finds_them(streamed, capsys):
    assert main(["prepare", *streamed]) == 0
    out = capsys.readouterr().out
    assert "poslab prepare: " in out and " tokens/s) -> " in out
    assert main(["prepare", *streamed]) == 0 and "are prepared" in capsys.readouterr().out
    assert main(["prepare", "modality=vision"]) == 2
    assert "its data streams no shards" in capsys.readouterr().err


def test_a_window_longer_than_the_shards_is_one_line(tmp_path):
    prepare_shards(["abc"], lambda t: [ord(c) for c in t], tmp_path / "s", {"vocab_size": 300}, echo=print)
    with pytest.raises(DataError, match="hold less than one window of 17 tokens"):
        streamed_loader(tmp_path / "s", 17, 2, seed=0)


def test_each_preparation_worker_tokenizes_its_documents(tmp_path):
    """Two workers, several documents: every document's tokens are in the shards, once."""
    docs = [f"doc{i} " * 20 for i in range(6)]
    written = prepare_shards(docs, lambda t: [ord(c) for c in t], tmp_path / "s", {"vocab_size": 300}, workers=2)
    assert written["tokens"] == sum(map(len, docs)) and written["documents"] == 6
    assert shards.read_manifest(tmp_path / "s")["tokens"] == written["tokens"]


def byte_ids(text: str) -> list[int]:
    return list(text.encode())


@pytest.mark.timeout(120)
def test_a_preparation_after_training_work_finishes_and_leaves_the_start_method_as_it_was(tmp_path):
    """Forked workers after the parent's OpenMP pool is up (a training step has run): they must not hang."""
    import multiprocessing

    import litdata  # noqa: F401  (reading its loader's default fixes the platform's start method)

    torch.mm(torch.randn(1024, 1024), torch.randn(1024, 1024))
    before = multiprocessing.get_start_method(allow_none=True)
    docs = ["to be or not to be\n" * 20_000] * 4
    written = prepare_shards(docs, byte_ids, tmp_path / "s", {"vocab_size": 256}, workers=2, echo=print)
    assert written["tokens"] == sum(map(len, docs)) and multiprocessing.get_start_method(allow_none=True) == before


def test_each_ddp_rank_streams_its_own_windows(tmp_path):
    """litdata splits the shards between ranks (it reads the process group when the loader is built, as in a DDP
    run): the two ranks' windows of an epoch are disjoint and together nearly all of them (drop_last)."""
    from litdata.utilities.env import _DistributedEnv

    docs = [" ".join(f"w{i}" for i in range(j, j + 4000)) for j in range(0, 40_000, 4000)]
    prepare_shards(docs, byte_ids, tmp_path / "s", {"vocab_size": 256}, chunk_bytes=8_000, echo=print)
    everything = streamed_loader(tmp_path / "s", 9, 4, seed=0).dataset
    seen = []
    for rank in (0, 1):
        loader = streamed_loader(tmp_path / "s", 9, 4, seed=0)
        loader.dataset.distributed_env = _DistributedEnv(world_size=2, global_rank=rank, num_nodes=1)
        batches = iter(loader)
        count = len(loader.dataset) // 4
        seen.append({tuple(w) for _ in range(count) for w in next(batches).tolist()})
    assert not seen[0] & seen[1]
    assert len(seen[0] | seen[1]) >= 0.9 * len(everything)


class LoggedPart:
    """A part's reader that notes each reading in ``log`` (workers are forked: a file is what comes back) and
    fails the first time where ``fails`` names a flag file that is not there yet."""

    def __init__(self, number: int, log: Path, fails: Path | None = None) -> None:
        self.number, self.log, self.fails = number, log, fails

    def __call__(self):
        with self.log.open("a") as notes:
            notes.write(f"{self.number}\n")
        if self.fails is not None and not self.fails.exists():
            self.fails.touch()
            raise DataError(f"part {self.number}: the network went away")
        return iter([f"part {self.number} document {i} " * 5 for i in range(3)])


def test_a_preparation_in_parts_resumes_at_its_first_unfinished_round(tmp_path):
    """Four parts, one worker: four rounds. A failure in the third leaves the first two kept; the rerun reads only
    the third and fourth, and its shards hold what an uninterrupted preparation's do."""
    log = tmp_path / "read.log"
    parts = shards.Parts(LoggedPart(n, log, tmp_path / "failed-once" if n == 2 else None) for n in range(4))
    folder, manifest = tmp_path / "s", {"vocab_size": 300}
    with pytest.raises(DataError, match="^part 2: the network went away$"):
        prepare_shards(parts, byte_ids, folder, manifest, workers=1, echo=print)
    assert not folder.exists() and sorted(p.name for p in (tmp_path / "s.rounds").glob("round-*")) == [
        "round-00000", "round-00001", *(p.name for p in (tmp_path / "s.rounds").glob("round-00002.partial-*"))
    ]  # fmt: skip
    log.write_text("")
    written = prepare_shards(parts, byte_ids, folder, manifest, workers=1, echo=print)
    assert log.read_text().split() == ["2", "3"]
    clean = prepare_shards(shards.Parts(LoggedPart(n, log) for n in range(4)), byte_ids, tmp_path / "c", manifest)
    assert (written["tokens"], written["parts"]) == (clean["tokens"], 4)
    assert written["tokens"] == sum(len(byte_ids(f"part {n} document {i} " * 5)) for n in range(4) for i in range(3))
    assert not (tmp_path / "s.rounds").exists()  # kept only until the preparation completes
    assert next(iter(streamed_loader(folder, 8, 2, seed=0))).shape == (2, 8)  # merged rounds stream as one
