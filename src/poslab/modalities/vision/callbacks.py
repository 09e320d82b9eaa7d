"""The vision run's end-of-run evaluation: accuracy at other image sizes, raw and rescaled coordinates."""

from __future__ import annotations

from omegaconf import OmegaConf

from poslab.evaluation.probes import Evaluation, Probe
from poslab.modalities.vision.data import VisionDataModule


class ResolutionReport(Evaluation):
    """Test accuracy at each of ``eval.image_sizes``, with raw patch indices and with coordinates rescaled
    to the training grid: one Lightning test pass each (``resolution/acc@<size>/<coords>``)."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.data_cfg = cfg.data
        self.sizes = list(cfg.eval.image_sizes)

    def probes(self, trainer, task):

        for size in self.sizes:
            for mode in ("raw", "rescaled"):
                dm = VisionDataModule(OmegaConf.merge(self.data_cfg, {"image_size": size, "coords": mode}),
                                      train_data=self.data_cfg)  # fmt: skip
                dm.setup()
                yield Probe(f"resolution/{{}}@{size}/{mode}", dm.test_dataloader(), task.answer_hits, dm.as_batch,
                            tag=(size, mode))  # fmt: skip

    def summarize(self, trainer, task, results) -> None:
        if not results:
            return
        rows, curve = [], {}
        for probe, result in results:
            (size, mode), acc = probe.tag, result.metrics.get(probe.key.format("acc"))
            rows.append([size, mode, acc])
            if acc is not None:
                curve.setdefault(size, {})[f"resolution/curve/acc/{mode}"] = acc
        self.add_table(trainer, "resolution/acc", ["image_size", "coords", "acc"], rows)
        self.add_notes(trainer, "resolution/notes", results, "acc")
        self.add_curve(trainer, "resolution/curve/image_size", curve)
