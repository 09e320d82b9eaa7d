"""The two BPE length-generalisation experiments: bpe_lengen (this machine) and gpt2_lengen (a GPU), composed
at their size and dry-run at toy size through every evaluation they ask for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poslab.config.composition import compose
from poslab.config.files import config_dir
from poslab.modalities.text.sources.streamed import sample_huggingface
from poslab.run.train import train
from poslab.study.compare import plan
from tests.track.test_wandb_summary import assert_all_scalars_in_wandb


def test_bpe_lengen_is_sized_for_this_machine():
    cfg = compose(["experiment=bpe_lengen"])
    assert (cfg.data.tokenizer, cfg.data.vocab_size, cfg.data.context) == ("bpe", 4096, 256)
    assert (cfg.model.dim, cfg.model.depth) == (256, 6)
    assert list(cfg.eval.multiples) == [1, 2, 4, 8] and max(cfg.eval.longdoc_lengths) == 8 * cfg.data.context
    labels = [label for label, _, _ in plan("text", None, 3, ["experiment=bpe_lengen"])]
    assert sorted(set(labels)) == ["alibi", "fire", "none", "rope", "rope/yarn"] and len(labels) == 15


def test_gpt2_lengen_is_gpt2_small_on_fineweb_edu_with_its_gpu_budget_written():
    cfg = compose(["experiment=gpt2_lengen"])
    assert (cfg.model.dim, cfg.model.depth, cfg.model.num_heads, cfg.model.tie_embeddings) == (768, 12, 12, True)
    assert (cfg.data.name, cfg.data.path) == ("huggingface", "HuggingFaceFW/fineweb-edu:sample-10BT")
    assert (cfg.data.tokenizer, cfg.data.stream, cfg.data.context) == ("tiktoken:gpt2", True, 1024)
    assert cfg.trainer.precision == "bf16-mixed" and max(cfg.eval.passkey_lengths) == 16384
    assert "H100-hours" in (config_dir() / "experiment" / "gpt2_lengen.yaml").read_text()


def toy(experiment: str, tmp_path, *extra: str) -> list[str]:
    """The experiment shrunk to seconds: a 1 x 32 model, context 16, two steps, every evaluation kept."""
    return [
        f"experiment={experiment}", "logger=none", f"run.root={tmp_path / 'runs'}", "trainer=cpu", "model=default",
        "model.dim=32", "model.depth=1", "model.num_heads=2", "data.vocab_size=300", "data.context=16",
        "data.batch_size=4", "data.eval_batch_size=4", "data.eval_tokens=64", "trainer.max_steps=2",
        "trainer.val_check_interval=2", "trainer.limit_val_batches=1", "trainer.accumulate_grad_batches=1",
        "trainer.enable_progress_bar=false", "eval.multiples=[1,2]", "eval.longdoc_lengths=[16,32]",
        "eval.longdoc_tokens=64", "eval.passkey_lengths=[320]", "eval.passkey_depths=2", "eval.passkey_trials=1",
        *extra,
    ]  # fmt: skip


def ran(summary) -> dict:
    """The metrics of the run's ``summary.json`` (what a comparison reads)."""
    return json.loads((Path(summary.run_dir) / "summary.json").read_text())["metrics"]


@pytest.mark.slow
def test_bpe_lengen_dry_runs_every_evaluation_at_toy_size(tmp_path):
    rope_yarn = ["encoder=rope", "encoder.scaling.type=yarn", "encoder.scaling.factor=2.0"]  # its rope/yarn row
    summary = train(compose(toy("bpe_lengen", tmp_path, *rope_yarn)))
    metrics = ran(summary)
    for key in ("lengen/loss@2x", "lengen/loss@2x/yarn", "longdoc/ppl@32", "passkey/acc@320", "perf/tokens_per_s"):
        assert key in metrics, key


@pytest.mark.slow
def test_gpt2_lengen_dry_runs_on_a_local_folder_in_fineweb_edus_layout(tmp_path):
    """Everything but the model's size, the GPU, the Hub and GPT-2's tokenizer (both need the network)."""
    root = tmp_path / "data"
    root.mkdir()
    local = [o for o in sample_huggingface(root) if o.startswith("data.path=")]
    overrides = toy("gpt2_lengen", tmp_path, "encoder=alibi", f"data.root={root}", *local, "data.tokenizer=bpe",
                    "data.workers=1", "data.eval_tokens=32", "logger=wandb", "logger.mode=offline")  # fmt: skip
    summary = train(compose(overrides))
    assert {"longdoc/ppl@16", "longdoc/ppl@32", "passkey/acc@320", "test/bpt"} <= set(ran(summary))
    assert_all_scalars_in_wandb(summary)  # what every experiment's tiny run checks (tests/track)
