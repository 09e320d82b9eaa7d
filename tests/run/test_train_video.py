"""A video run end to end: the classifier, the temporal and spatial probes, the report's figure."""

from __future__ import annotations

import pytest

from poslab.config.composition import compose
from poslab.run.train import train
from poslab.study.report import build_report


@pytest.mark.parametrize("encoder", ["rope3d", "learned3d"])
def test_a_video_run_probes_longer_clips_and_larger_canvases(tiny_video, encoder, tmp_path):
    summary = train(compose([*tiny_video, f"encoder={encoder}", "eval.frames=[8]", "eval.canvases=[32]"]))
    metrics = summary["metrics"]
    assert 0.0 <= metrics["test/acc"] <= 1.0
    assert {"temporal/acc@8f/rescaled", "spatial/acc@32px/rescaled"} <= set(metrics)
    if encoder == "rope3d":  # rotations take any position
        assert {"temporal/acc@8f/raw", "spatial/acc@32px/raw"} <= set(metrics)
    else:  # a learned table has no rows for raw indices past the training clip: a note, not a crash
        notes = dict(summary["tables"]["probe/notes"]["rows"])
        assert "temporal/acc@8f/raw" not in metrics and "data.coords=rescaled" in notes["temporal/acc@8f/raw"]
    assert "test/acc_per_class" in summary["tables"]
    report = build_report([summary["run_dir"]], tmp_path / "reports")
    assert "`temporal/acc@8f/rescaled`" in report.read_text() and list(report.parent.glob("*-probes.png"))
