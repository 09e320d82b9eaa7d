"""``lightning.Trainer``'s arguments as config keys, generated from its signature by
``python -m poslab.run.trainer_options``: do not edit."""

# ruff: noqa: E501
from typing import Any, Literal, Union  # noqa: F401

LIGHTNING = "2.6.6"
#: (key, config type, Lightning's default)
# fmt: off
ARGUMENTS = (
    ('accelerator', str, 'auto'),
    ('strategy', str, 'auto'),
    ('devices', Union[int, str, list[int]], 'auto'),
    ('num_nodes', int, 1),
    ('precision', Union[Literal[64, 32, 16, 'transformer-engine', 'transformer-engine-float16', '16-true', '16-mixed', 'bf16-true', 'bf16-mixed', '32-true', '64-true', '64', '32', '16', 'bf16'], None], None),
    ('fast_dev_run', Union[bool, int], False),
    ('max_epochs', Union[int, None], None),
    ('min_epochs', Union[int, None], None),
    ('max_steps', int, -1),
    ('min_steps', Union[int, None], None),
    ('max_time', Union[str, dict[str, int], None], None),
    ('limit_train_batches', Union[int, float, None], None),
    ('limit_val_batches', Union[int, float, None], None),
    ('limit_test_batches', Union[int, float, None], None),
    ('limit_predict_batches', Union[int, float, None], None),
    ('overfit_batches', Union[int, float], 0.0),
    ('val_check_interval', Union[int, float, str, dict[str, int], None], None),
    ('check_val_every_n_epoch', Union[int, None], 1),
    ('num_sanity_val_steps', Union[int, None], None),
    ('log_every_n_steps', Union[int, None], None),
    ('enable_progress_bar', Union[bool, None], None),
    ('enable_model_summary', Union[bool, None], None),
    ('accumulate_grad_batches', int, 1),
    ('gradient_clip_val', Union[int, float, None], None),
    ('gradient_clip_algorithm', Union[str, None], None),
    ('deterministic', Union[bool, Literal['warn'], None], None),
    ('benchmark', Union[bool, None], None),
    ('inference_mode', bool, True),
    ('use_distributed_sampler', bool, True),
    ('profiler', Union[str, None], None),
    ('detect_anomaly', bool, False),
    ('barebones', bool, False),
    ('sync_batchnorm', bool, False),
    ('reload_dataloaders_every_n_epochs', int, 0),
    ('enable_autolog_hparams', bool, True),
    ('model_registry', Union[str, None], None),
)
# fmt: on
