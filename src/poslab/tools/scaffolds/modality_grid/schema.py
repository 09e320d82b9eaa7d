"""The toy modality's config keys: each declared once, with its type, default and range.

The YAML sets only values that differ; ``poslab train modality=toy --options`` lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from poslab.config.options import options_schema
from poslab.config.ranges import AT_LEAST_1, Range
from poslab.config.schema import ModelConfig

from .model import ToyNet


@dataclass
class ToyData:
    name: Literal["grid_digits"] = "grid_digits"  # the data sources this modality reads (here: one it generates)
    rows: Annotated[int, Range(2)] = 4  # cells per column: the label compares the top-left and bottom-right
    cols: Annotated[int, Range(2)] = 4  # cells per row
    size: Annotated[int, AT_LEAST_1] = 512  # grids per split
    batch_size: Annotated[int, AT_LEAST_1] = 32


@dataclass
class ToyTask:
    name: Literal["order"] = "order"


#: ``model.*``: the network's keyword options (its sizes), typed and defaulted by its constructor.
ToyModel = options_schema("ToyModel", ToyNet, ToyNet.SUPPLIED, bases=(ModelConfig,))
