"""The vision run's end-of-test extras: accuracy at other image sizes, raw and rescaled coordinates."""

from __future__ import annotations

from poslab.callbacks import Reporter


class ResolutionReport(Reporter):
    """After testing a vision model: test accuracy at other image sizes, raw and rescaled coordinates."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.data_cfg = cfg.data
        self.sizes = list(cfg.eval.image_sizes)
        self.notes: list[list[str]] = []

    def after_test(self, trainer, pl_module) -> None:
        if not self.sizes:
            return
        from omegaconf import OmegaConf

        from poslab.errors import PoslabError
        from poslab.modalities.vision.data import VisionDataModule

        rows = []
        for size in self.sizes:
            for mode in ("raw", "rescaled"):
                key = f"resolution/acc@{size}/{mode}"
                data = OmegaConf.merge(self.data_cfg, {"image_size": size, "coords": mode})
                dm = VisionDataModule(data, train_data=self.data_cfg)
                dm.setup()
                try:
                    accuracy = pl_module.accuracy_on(dm.as_batch(b) for b in dm.test_dataloader())
                except PoslabError as exc:  # a learned table has no rows for raw indices past it
                    self.notes.append([key, str(exc)])
                    rows.append([size, mode, None])
                    continue
                self.report["metrics"][key] = accuracy
                rows.append([size, mode, accuracy])
        self.add_table(trainer, "resolution/acc", ["image_size", "coords", "acc"], rows)
        if self.notes:
            self.add_table(trainer, "resolution/notes", ["metric", "why it is missing"], self.notes)
