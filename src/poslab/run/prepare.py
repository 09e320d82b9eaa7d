"""``poslab prepare``: a run's data made ready on its own (a corpus tokenized into streamed shards), so a
cluster job starts training at once and several runs share one preparation."""

from __future__ import annotations

from omegaconf import DictConfig, open_dict

from poslab.errors import ConfigError
from poslab.modalities.registry import get_modality


def prepare(cfg: DictConfig) -> str:
    """Download what the data needs and prepare its shards (``data.stream``, set here); returns their folder."""
    if "stream" not in cfg.data:
        raise ConfigError(f"modality={cfg.modality}: its data streams no shards; poslab prepare has nothing to do")
    with open_dict(cfg):
        cfg.data.stream = True
    datamodule = get_modality(cfg.modality).datamodule_for(cfg)
    datamodule.progress = True
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule.shards
