"""poslab's data, model and measurements under your own ``lightning.Trainer``.

    python examples/library/own_trainer.py encoder=rope2d trainer.max_epochs=2

The arguments are ``poslab train``'s overrides. What it writes is a run directory that ``poslab report`` reads.
"""

import sys
import time

import lightning as L

from poslab.run.library import build, finish, reporting_callbacks

started = time.perf_counter()
cfg, datamodule, task = build(sys.argv[1:])
run_dir = f"{cfg.run.root}/{cfg.modality}/own-{cfg.encoder.name}-s{cfg.seed}"
trainer = L.Trainer(
    max_epochs=cfg.trainer.get("max_epochs"),
    max_steps=cfg.trainer.get("max_steps", -1),
    limit_train_batches=cfg.trainer.get("limit_train_batches"),
    accelerator="auto",
    logger=L.pytorch.loggers.CSVLogger(run_dir, name="csv"),
    callbacks=reporting_callbacks(),
    default_root_dir=run_dir,
    enable_progress_bar=False,
)
trainer.fit(task, datamodule=datamodule)
trainer.test(task, datamodule=datamodule)
summary = finish(trainer, task, cfg, run_dir, started)
print(f"{run_dir}/summary.json:", {k: round(v, 4) for k, v in summary["metrics"].items() if k.startswith("test/")})
