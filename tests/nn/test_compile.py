"""``model.compile=true``: the hooks of every encoder and every modality's backbone compile whole.

``fullgraph=True`` turns a graph break (a host read, an untraceable call) into
an error, and the ``eager`` backend checks what dynamo traces without paying
for code generation. Parametrized over the registry: a new encoder is checked
with no edit here.
"""

from __future__ import annotations

import pytest
import torch

from poslab.config.composition import compose
from poslab.data import build_datamodule
from poslab.encoders import available_encoders, encoder_class
from poslab.encoders.registry import fits
from poslab.modalities import available_modalities
from poslab.positions import Positions
from poslab.tasks import build_task
from tests.conftest import flex_ready_validation, tiny_overrides
from tests.encoders.test_registry import build, sample_positions

LENGTH = 16


def whole(fn):
    """``fn`` compiled as one graph (a graph break raises)."""
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="eager")


def stated_positions() -> Positions:
    """What a data module hands over, with the facts it states."""
    return sample_positions(LENGTH, facts=True)


@pytest.mark.parametrize("name", available_encoders())
def test_every_hook_compiles_without_a_graph_break(name):
    """Each overridden hook traces as one graph and computes what it computes eagerly."""
    enc = build(name).eval()
    pos = stated_positions()
    x = torch.randn(2, LENGTH, 32)
    q = torch.randn(2, 2, LENGTH, 16)
    calls = {
        "encode_input": (lambda x, p: enc.encode_input(x, p), (x, pos)),
        "rotate": (lambda q, p: (enc.rotate(q, p), enc.rotate_query(q, p), enc.rotate_key(q, p)), (q, pos)),
        "content_bias": (lambda q, k: enc.content_bias(q, k, q @ k.transpose(-1, -2)), (q, q.flip(-2))),
        "attention_bias": (lambda p: enc.attention_bias(p, p), (pos,)),
        "relative_bias": (lambda o: enc.relative_bias(o), (torch.arange(-3.0, 4.0),)),
        "input_bias": (lambda x: enc.input_bias(x, 0), (x,)),
        "attention_logits": (lambda q, k, x: enc.attention_logits(q, k, x, 0), (q, q.flip(-2), x)),
        "attention_weights": (lambda q, k: enc.attention_weights((q @ k.transpose(-1, -2)).tril()), (q, q.flip(-2))),
    }
    hooks = encoder_class(name).hooks()
    for hook in hooks:
        fn, args = calls[hook]
        torch.testing.assert_close(whole(fn)(*args), fn(*args), msg=f"{name}.{hook}")


def test_a_graph_break_is_caught():
    """The check above can fail: a hook with a call dynamo cannot trace breaks the graph and raises.
    (Host reads such as ``.item()`` are caught on the meta device, see ``test_devices.py``.)"""

    def breaks(x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return x + 1

    with pytest.raises(torch._dynamo.exc.Unsupported):
        whole(breaks)(torch.arange(4))


MODALITIES = available_modalities()  # every modality the registry holds: a fork's too


def _first_modality(name: str) -> str:
    return next(m for m in MODALITIES if fits(encoder_class(name), m))


@pytest.mark.parametrize("encoder", available_encoders())
def test_the_backbone_compiles_whole_in_a_training_step(encoder, request):
    """A training step of a modality the encoder fits, with the backbone compiled as one graph."""
    modality = _first_modality(encoder)
    cfg = compose([*tiny_overrides(request, modality), f"encoder={encoder}"])
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    task = build_task(cfg, datamodule)
    batch = datamodule.as_batch(next(iter(datamodule.train_dataloader())))
    torch.manual_seed(0)  # the same dropout draws in both steps
    eager = loss_of(task.training_step(batch, 0))
    torch._dynamo.reset()
    task.backbone.compile(fullgraph=True, backend="eager")
    torch.manual_seed(0)
    torch.testing.assert_close(loss_of(task.training_step(batch, 0)), eager)


@pytest.mark.parametrize("encoder", [n for n in available_encoders() if encoder_class(n).uses("attention_bias")])
def test_a_compiled_backbone_traces_the_cuda_route_whole(encoder, request, monkeypatch):
    """On CUDA a compiled backbone traces FlexAttention (and its score_mod and block mask) into its graph: with
    attention routed as there, the backbone compiles as one graph and gives the eager CPU route's outputs
    (a validation step: FlexAttention has no backward on the CPU)."""
    from poslab.nn import attention
    from poslab.nn.kernels import flex

    if not flex.AVAILABLE:
        pytest.skip("this torch has no FlexAttention")
    task, batch, outputs = flex_ready_validation(request, _first_modality(encoder), encoder)
    routes = []

    def as_on_cuda(q, k, bias, causal, dropout):  # kernel_for's CUDA branch, traceable
        route = "sdpa" if bias is None else "flex" if bias.additive and dropout == 0.0 else "sdpa_mask"
        routes.append(route)
        return route

    with torch.no_grad():
        task.validation_step(batch, 0)
        monkeypatch.setattr(attention, "kernel_for", as_on_cuda)
        torch._dynamo.reset()
        task.backbone.compile(fullgraph=True, backend="eager")
        try:
            task.validation_step(batch, 0)
        finally:
            torch._dynamo.reset()
    assert "flex" in routes
    eager, compiled = outputs
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)


def loss_of(output) -> torch.Tensor:
    return output["loss"] if isinstance(output, dict) else output


def test_model_compile_trains_and_keeps_the_plain_checkpoint_keys(tiny):
    """``model.compile=true`` trains, and its checkpoint loads into an uncompiled model (same keys)."""
    from poslab.run.train import train

    summary = train(compose([*tiny, "model.compile=true"]))
    assert summary["config"]["model"]["compile"] is True
    state = torch.load(f"{summary['run_dir']}/{summary['checkpoints']['best']}", weights_only=True)["state_dict"]
    assert not [k for k in state if "_orig_mod" in k]
    datamodule = build_datamodule(compose(tiny))
    datamodule.prepare_data()
    datamodule.setup("fit")
    build_task(compose(tiny), datamodule).load_state_dict(state)
