"""Model presets (``model=<preset>``), GPT-2's recipe, activation checkpointing and FSDP's wrapping: the sizes
the papers name, the initialisation they describe, the same gradients for less memory."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.fsdp.wrap import enable_wrap

from poslab.config.composition import compose
from poslab.config.options import pick_options
from poslab.encoders import build_encoder_in_context
from poslab.errors import ConfigError
from poslab.modalities.text.model import CausalLM
from poslab.nn.backbone import TransformerBlock
from poslab.positions import Positions
from poslab.run.train import train
from poslab.tasks.base import PositionTask

GPT2_VOCAB = 50257


def text_model(preset: str, vocab_size: int = GPT2_VOCAB, *overrides: str) -> CausalLM:
    cfg = compose(["modality=text", f"model={preset}", *overrides])
    model = cfg.model
    encoder = build_encoder_in_context(
        cfg.encoder.name, dim=model.dim, num_heads=model.num_heads, options={}, context={"depth": model.depth}
    )
    return CausalLM(encoder, vocab_size=vocab_size, **pick_options(CausalLM, cfg.model, CausalLM.SUPPLIED))


@pytest.mark.parametrize(
    ("preset", "parameters"),
    # Hugging Face's gpt2 / gpt2-medium (124,439,808 / 354,823,168) without their learned position tables
    # (1,024 x 768 / 1,024 x 1,024): RoPE has no parameters.
    [("gpt2-small", 124_439_808 - 1024 * 768), ("gpt2-medium", 354_823_168 - 1024 * 1024)],
)
def test_the_gpt2_presets_have_gpt2s_parameter_count_on_its_vocabulary(preset, parameters):
    with torch.device("meta"):
        model = text_model(preset)
    assert sum(p.numel() for p in model.parameters()) == parameters


def tslib_patchtst_parameters(d_model: int, d_ff: int, layers: int, lookback: int, horizon: int) -> int:
    """TSLib's PatchTST (models/PatchTST.py, layers/Transformer_EncDec.py, layers/Embed.py), layer by layer:
    the patch projection (16 -> d_model, no bias), per layer q/k/v/o and two 1x1 convolutions with biases and
    two LayerNorms, a final BatchNorm, and the flatten head over (lookback - 16) / 8 + 2 patches."""
    patches = (lookback - 16) // 8 + 2
    layer = 4 * (d_model * d_model + d_model) + (d_model * d_ff + d_ff) + (d_ff * d_model + d_model) + 4 * d_model
    return 16 * d_model + layers * layer + 2 * d_model + (d_model * patches * horizon + horizon)


@pytest.mark.parametrize(("data", "horizon"), [("etth1", 96), ("etth1", 720), ("etth2", 336), ("traffic", 192)])
def test_the_patchtst_preset_has_tslibs_parameters_at_each_files_settings(data, horizon):
    """experiment=tslib's forecaster is TSLib's PatchTST at that file's script settings (ETTh2: 3 layers, Traffic:
    2 layers with d_ff 512), less nothing and plus one bias: poslab's patch projection has one (d_model)."""
    from poslab.modalities.timeseries.model import Forecaster

    cfg = compose(["experiment=tslib", f"data={data}", f"data.horizon={horizon}", "encoder=sinusoidal"])
    model = cfg.model
    encoder = build_encoder_in_context("sinusoidal", dim=model.dim, num_heads=model.num_heads, options={}, context={})
    with torch.device("meta"):
        forecaster = Forecaster(
            encoder, lookback=96, horizon=horizon, **pick_options(Forecaster, model, Forecaster.SUPPLIED)
        )
    d_ff = {"traffic": 512}.get(data, 2048)
    layers = {"etth1": 1, "etth2": 3, "traffic": 2}[data]
    expected = tslib_patchtst_parameters(512, d_ff, layers, 96, horizon) + 512
    assert sum(p.numel() for p in forecaster.parameters()) == expected


def test_gpt2s_initialisation_scales_the_residual_projections_and_ties_the_head():
    """Radford et al. (2019), sec. 2.3: residual layers' weights scaled by 1/sqrt(N), N = 2 x 6 layers."""
    torch.manual_seed(0)
    model = text_model("gpt2-mini", 4096)
    assert model.head.weight is model.embed.weight
    residual = torch.cat([p.weight.flatten() for b in model.backbone.blocks for p in b.residual_outputs()])
    other = torch.cat([b.attn.qkv.weight.flatten() for b in model.backbone.blocks])
    assert residual.std().item() == pytest.approx(0.02 / math.sqrt(12), rel=0.02)
    assert other.std().item() == pytest.approx(0.02, rel=0.02)
    assert model.embed.weight.std().item() == pytest.approx(0.02, rel=0.02)
    plain = text_model("default", 4096)
    assert plain.head.weight is not plain.embed.weight
    assert plain.backbone.blocks[0].attn.proj.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_a_preset_sets_what_it_names_and_keeps_the_modalitys_other_keys():
    default, mini = compose(["modality=text"]), compose(["modality=text", "model=gpt2-mini", "model.dropout=0.1"])
    assert compose(["modality=text", "model=default"]) == default
    assert (mini.model.dim, mini.model.depth, mini.model.num_heads, mini.model.dropout) == (256, 6, 8, 0.1)
    assert mini.model.compile == default.model.compile and mini.optim == default.optim


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=gpt3"], "unknown model 'gpt3'; valid: default, gpt2-medium, gpt2-mini, gpt2-small"),
        (["modality=vision", "model=gpt2-small"], "model=gpt2-small does not fit modality=vision: unknown config key"),
    ],
)
def test_a_preset_that_is_not_there_or_does_not_fit_is_one_line(overrides, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        compose(["modality=text", *overrides])


def test_a_preset_too_big_for_the_machine_is_refused_before_anything_is_allocated(tiny_text, monkeypatch):
    """gpt2-medium's 302M parameters on the character vocabulary need 4.5 GiB of training state; 1 GiB is
    available: one line, counted on the meta device, and no run directory."""
    monkeypatch.setattr("poslab.run.memory.available_bytes", lambda accelerator: 2**30)
    allocated = []
    monkeypatch.setattr(CausalLM, "cuda", lambda *a: allocated.append(a))
    cfg = compose([*(o for o in tiny_text if not o.startswith("model.")), "model=gpt2-medium"])
    with pytest.raises(ConfigError, match=r"^the model does not fit in this machine's memory: 302,\d{3},\d{3} param"):
        train(cfg)
    assert not Path(cfg.run.root).exists()


def test_activation_checkpointing_recomputes_each_block_and_keeps_the_gradients():
    """With dropout: the recomputed pass draws the masks of the first (RNG state replayed)."""
    torch.manual_seed(0)
    model = text_model("gpt2-mini", 64, "model.depth=2", "model.dim=32", "model.num_heads=2", "model.dropout=0.2")
    tokens, pos = torch.randint(0, 64, (2, 12)), Positions.consecutive(12)
    calls = []
    for block in model.backbone.blocks:
        block.register_forward_pre_hook(lambda *_: calls.append(1))
    grads = []
    for checkpointing in (False, True):
        model.zero_grad()
        model.backbone.activation_checkpointing = checkpointing
        torch.manual_seed(1)
        calls.clear()
        model(tokens, pos).logsumexp(-1).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        assert len(calls) == 2 * (1 + checkpointing)  # each block once more, in the backward pass
    for plain, recomputed in zip(*grads, strict=True):
        torch.testing.assert_close(recomputed, plain, rtol=0, atol=1e-6)


class Wrapped(nn.Module):
    """A stand-in for FSDP's wrapper class (``enable_wrap`` takes any)."""

    def __init__(self, module: nn.Module, **kwargs) -> None:
        super().__init__()
        self.module = module


def test_under_fsdp_each_block_is_its_own_unit_and_elsewhere_nothing_changes(tiny_text):
    cfg = compose([*tiny_text, "model.depth=2"])
    task = PositionTask(cfg)
    task.model = text_model("default", 64, "model.depth=2", "model.dim=32", "model.num_heads=2")
    task.configure_model()  # no FSDP: the blocks stay as they are
    assert all(isinstance(b, TransformerBlock) for b in task.backbone.blocks)
    with enable_wrap(wrapper_cls=Wrapped):
        task.configure_model()
        task.configure_model()  # a test after the fit configures the model again: wrapped once
    assert all(isinstance(b, Wrapped) and isinstance(b.module, TransformerBlock) for b in task.backbone.blocks)


def test_the_fsdp_preset_shards_on_gpus_and_lightning_refuses_it_on_the_cpu(tiny_text, capsys):
    """Lightning's FSDP strategy takes CUDA devices only (its accelerator connector raises for the CPU), so
    no CPU process runs it: the preset composes to Lightning's strategy, and on the CPU it is one line."""
    from poslab.cli import main

    cfg = compose(["modality=text", "trainer=fsdp"])
    assert (cfg.trainer.strategy, cfg.trainer.accelerator, cfg.trainer.precision) == ("fsdp", "gpu", "bf16-mixed")
    cpu = ["trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true"]
    assert main(["train", *tiny_text, *cpu]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "strategy `fsdp` requires a GPU accelerator" in err


def deit_parameters(width: int, classes: int = 1000, depth: int = 12, patch: int = 16, size: int = 224) -> int:
    """timm's DeiT (``deit_*_patch16_224``), layer by layer: the patch convolution, the class token and its
    position table of (size / patch)² + 1 rows, per block two LayerNorms, q/k/v and the output projection and
    the MLP (4x) with biases, the final LayerNorm and the head."""
    tokens = (size // patch) ** 2 + 1
    block = 4 * width + (3 * width * width + 3 * width) + (width * width + width) + (8 * width * width + 5 * width)
    return (
        3 * patch * patch * width + width + width + tokens * width + depth * block + 2 * width + classes * (width + 1)
    )


@pytest.mark.parametrize(
    ("preset", "width", "paper"), [("vit-tiny", 192, 5), ("vit-small", 384, 22), ("vit-base", 768, 86)]
)
def test_the_vit_presets_are_deits_sizes(preset, width, paper):
    """DeiT's Table 1 (5M, 22M, 86M): with ``learned2d`` at 224 px in 16-px patches and 1,000 classes, the ViT has
    DeiT's parameters less its class token's row of the position table (poslab's class token takes none)."""
    from poslab.modalities.vision.model import ViT

    cfg = compose(["modality=vision", f"model={preset}", "encoder=learned2d", "data.patch_size=16"])
    encoder = build_encoder_in_context(
        "learned2d", dim=cfg.model.dim, num_heads=cfg.model.num_heads, options={}, context={"grid_size": (14, 14)}
    )
    with torch.device("meta"):
        vit = ViT(encoder, in_chans=3, num_classes=1000, patch_size=16, **pick_options(ViT, cfg.model, ViT.SUPPLIED))
    assert sum(p.numel() for p in vit.parameters()) == deit_parameters(width) - width
    assert int(deit_parameters(width) / 1e6) == paper
    assert deit_parameters(192) == 5_717_416  # timm's deit_tiny_patch16_224
    rates = [getattr(block.drop_path, "p", 0.0) for block in vit.backbone.blocks]  # the first: no drop path
    assert rates == pytest.approx([0.1 * i / 11 for i in range(12)])  # DeiT's linear rule, 0 ... 0.1
    with pytest.raises(ConfigError, match=f"model={preset} does not fit modality=text"):
        compose(["modality=text", f"model={preset}"])


def test_stochastic_depth_skips_a_samples_branch_or_scales_it_by_one_over_the_keep_rate():
    """Huang et al. 2016 as DeiT trains: in training each sample's attention branch is dropped (p = 0.5 here) or
    kept at 1 / (1 - p) = 2x; in evaluation it is the block without stochastic depth."""
    from poslab.encoders import build_encoder

    torch.manual_seed(0)
    block = TransformerBlock(8, 2, drop_path=0.5)
    nn.init.zeros_(block.mlp[3].weight), nn.init.zeros_(block.mlp[3].bias)  # the MLP branch adds nothing
    encoder, pos = build_encoder("none", dim=8, num_heads=2), Positions(steps=torch.arange(4))
    x = torch.randn(400, 4, 8)
    with torch.no_grad():
        branch = block.attn(block.norm1(x), encoder, pos)
        block.eval()
        torch.testing.assert_close(block(x, encoder, pos) - x, branch)
        block.train()
        added = block(x, encoder, pos) - x
    kept = added.flatten(1).abs().amax(dim=1) > 0
    torch.testing.assert_close(added, 2 * branch * kept[:, None, None])  # per sample: the whole branch, or none
    assert 0.4 < kept.float().mean().item() < 0.6
