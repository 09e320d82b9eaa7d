"""The video run's end-of-run evaluation: accuracy on longer clips and larger canvases, raw and rescaled."""

from __future__ import annotations

from omegaconf import OmegaConf

from poslab.evaluation.probes import Evaluation, Probe
from poslab.modalities.video.data import VideoDataModule


class ExtrapolationProbe(Evaluation):
    """Test accuracy at ``eval.frames`` (temporal) and ``eval.canvases`` (spatial) with raw and rescaled
    positions; the test digits and their motions stay the same, only longer or on more room. One Lightning
    test pass each (``temporal/acc@16f/raw``, ``spatial/acc@64px/rescaled``)."""

    #: family -> (data key changed, axis of its curve)
    FAMILIES = {"temporal": ("frames", "temporal/curve/frames"), "spatial": ("canvas", "spatial/curve/canvas_px")}

    def __init__(self, cfg) -> None:
        super().__init__()
        self.data_cfg = cfg.data
        self.sizes = {"temporal": list(cfg.eval.frames), "spatial": list(cfg.eval.canvases)}

    def probes(self, trainer, task):

        for family, sizes in self.sizes.items():
            data_key, _ = self.FAMILIES[family]
            unit = "f" if family == "temporal" else "px"
            for n in sizes:
                for mode in ("raw", "rescaled"):
                    change = {data_key: n, "coords": mode}
                    dm = VideoDataModule(OmegaConf.merge(self.data_cfg, change), train_data=self.data_cfg)
                    dm.setup("test")
                    yield Probe(f"{family}/{{}}@{n}{unit}/{mode}", dm.test_dataloader(), task.answer_hits,
                                dm.as_batch, tag=(family, n, mode))  # fmt: skip

    def summarize(self, trainer, task, results) -> None:
        if not results:
            return
        rows = []
        curves: dict[str, dict[int, dict[str, float]]] = {}
        for probe, result in results:
            family, n, mode = probe.tag
            acc = result.metrics.get(probe.key.format("acc"))
            rows.append([family, f"{n}{'f' if family == 'temporal' else 'px'}", mode, acc])
            if acc is not None:
                curves.setdefault(family, {}).setdefault(n, {})[f"{family}/curve/acc/{mode}"] = acc
        self.add_table(trainer, "probe/acc", ["probe", "size", "coords", "acc"], rows)
        self.add_notes(trainer, "probe/notes", results, "acc")
        for family, points in curves.items():
            self.add_curve(trainer, self.FAMILIES[family][1], points)
