"""The video run's end-of-test extras: accuracy on longer clips and larger canvases, raw and rescaled."""

from __future__ import annotations

from poslab.callbacks import Reporter


class ExtrapolationProbe(Reporter):
    """Test accuracy at ``eval.frames`` (temporal) and ``eval.canvases`` (spatial) with raw and rescaled
    positions; the test digits and their motions stay the same, only longer or on more room."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.data_cfg = cfg.data
        self.probes = [("temporal", f"{n}f", {"frames": n}) for n in cfg.eval.frames]
        self.probes += [("spatial", f"{n}px", {"canvas": n}) for n in cfg.eval.canvases]
        self.notes: list[list[str]] = []

    def after_test(self, trainer, pl_module) -> None:
        if not self.probes:
            return
        from omegaconf import OmegaConf

        from poslab.errors import PoslabError
        from poslab.modalities.video.data import VideoDataModule

        rows = []
        for family, size, change in self.probes:
            for mode in ("raw", "rescaled"):
                key = f"{family}/acc@{size}/{mode}"
                dm = VideoDataModule(
                    OmegaConf.merge(self.data_cfg, {**change, "coords": mode}), train_data=self.data_cfg
                )
                dm.setup("test")
                try:
                    accuracy = pl_module.accuracy_on(dm.as_batch(b) for b in dm.test_dataloader())
                except PoslabError as exc:  # a learned table has no rows past the training clip
                    self.notes.append([key, str(exc)])
                    rows.append([family, size, mode, None])
                    continue
                self.report["metrics"][key] = accuracy
                rows.append([family, size, mode, accuracy])
        self.add_table(trainer, "probe/acc", ["probe", "size", "coords", "acc"], rows)
        if self.notes:
            self.add_table(trainer, "probe/notes", ["metric", "why it is missing"], self.notes)
