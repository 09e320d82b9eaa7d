"""Runs anywhere: every tensor on the model's device, and no host synchronisation in a hook.

Without a GPU, the ``meta`` device stands in for one: an op that mixes a CPU
tensor with a meta tensor raises as it would with CUDA, and reading a value
(``.item()``, ``int(t)``, ``if t:``) raises because a meta tensor has none —
the host synchronisations a GPU would stall on. A copy of a host tensor to
the device (an ``arange`` made on the CPU, then moved) is recorded by a
dispatch mode: on a GPU it waits for the host too. Parametrized over the
registry, so a new encoder is checked with no edit here.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from poslab.config.composition import compose
from poslab.data import build_datamodule
from poslab.encoders import available_encoders, encoder_class
from poslab.evaluation.similarity import position_similarity
from poslab.modalities import available_modalities
from poslab.positions import Positions
from poslab.tasks import build_task
from tests.conftest import flex_ready_validation, tiny_overrides
from tests.encoders.test_registry import build, sample_positions

META = torch.device("meta")
LENGTH = 16


class _CopiesInDispatch(TorchDispatchMode):
    """A host tensor copied to another device (``.to(device)``, ``copy_``)."""

    def __init__(self, seen: list) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):
            source = args[0] if func is torch.ops.aten._to_copy.default else args[1]
            if isinstance(source, torch.Tensor) and source.device.type == "cpu" and out.device.type != "cpu":
                self.seen.append((func.__name__, tuple(source.shape)))
        return out


class _TensorsFromHostData(TorchFunctionMode):
    """A tensor made on a device from Python data (``torch.tensor``, ``new_tensor``): also a copy from the host,
    made before the dispatcher sees it."""

    def __init__(self, seen: list) -> None:
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name in ("tensor", "as_tensor", "new_tensor") and isinstance(out, torch.Tensor) and out.device.type != "cpu":
            self.seen.append((name, tuple(out.shape)))
        return out


class HostCopies:
    """Records every copy of host data to another device: on a GPU, each one waits for the host."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[int, ...]]] = []
        self._modes = (_TensorsFromHostData(self.seen), _CopiesInDispatch(self.seen))

    def __enter__(self) -> HostCopies:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


def meta_positions(facts: bool) -> Positions:
    """What a data module hands over, on the meta device; with or without its facts."""
    return sample_positions(LENGTH, facts=facts).to(META)


@pytest.mark.parametrize("facts", [True, False], ids=["with-facts", "bare"])
@pytest.mark.parametrize("name", available_encoders())
def test_every_hook_runs_on_the_meta_device(name, facts):
    """Each overridden hook and the similarity figure, given meta tensors, make meta tensors only."""
    enc = build(name).to(META)
    pos = meta_positions(facts)
    hooks = encoder_class(name).hooks()
    x = torch.empty(2, LENGTH, 32, device=META)
    q = torch.empty(2, 2, LENGTH, 16, device=META)
    if "encode_input" in hooks:
        assert enc.encode_input(x, pos).device == META
    if "rotate" in hooks:  # and the query / key forms an encoder may override instead (xPos)
        assert enc.rotate(q, pos).device == META
        assert enc.rotate_query(q, pos).device == META and enc.rotate_key(q, pos).device == META
    if "content_bias" in hooks:
        logits = torch.empty(2, 2, LENGTH, LENGTH, device=META)
        bias = enc.content_bias(q, q, logits)
        assert bias is None or (bias.device == META and bias.shape == logits.shape)
    if "attention_bias" in hooks:
        bias = enc.attention_bias(pos, pos)
        assert bias is None or bias.device == META
    if "relative_bias" in hooks:
        values = enc.relative_bias(torch.arange(-3.0, 4.0, device=META))
        assert values.device == META and values.shape == (2, 7)
    with HostCopies() as copies:  # a second call: the first may build what is kept per shape
        for hook in ("encode_input", "rotate", "rotate_query", "rotate_key"):
            if ("rotate" if hook.startswith("rotate") else hook) in hooks:
                getattr(enc, hook)(x if hook == "encode_input" else q, pos)
        if "attention_bias" in hooks:
            enc.attention_bias(pos, pos)
    assert not copies.seen, f"copied from the host in a hook: {copies.seen}"
    scores = position_similarity(enc, pos, LENGTH, device=META)
    assert scores.device == META and scores.shape == (LENGTH, LENGTH)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16-mixed", "16-mixed"])
@pytest.mark.parametrize("name", available_encoders())
def test_every_hook_under_mixed_precision_autocast_stays_finite_and_near_float32(name, dtype):
    """trainer.precision=bf16-mixed (trainer=gpu) and 16-mixed (trainer=gpu16, GPUs without bf16) run the
    hooks under autocast: what each returns stays finite and within the half type's rounding of its float32
    result (an op without an autocast rule, such as matrix_exp, fed a half type by an autocast einsum,
    returns NaNs; fp16 overflows past 65,504). On the CPU's autocast, which casts as CUDA's does."""
    torch.manual_seed(0)
    enc = build(name)
    pos = sample_positions(LENGTH, facts=True)
    hooks = encoder_class(name).hooks()
    x, q = torch.randn(2, LENGTH, 32), torch.randn(2, 2, LENGTH, 16)
    logits = torch.randn(2, 2, LENGTH, LENGTH)

    def results() -> dict[str, torch.Tensor]:
        out = {}
        if "encode_input" in hooks:
            out["encode_input"] = enc.encode_input(x, pos)
        if "rotate" in hooks:
            out |= {h: getattr(enc, h)(q, pos) for h in ("rotate_query", "rotate_key")}
        if "attention_bias" in hooks:
            out["attention_bias"] = enc.attention_bias(pos, pos)
        if "content_bias" in hooks:
            out["content_bias"] = enc.content_bias(q, q, logits)
        return {k: v for k, v in out.items() if v is not None}

    with torch.no_grad():
        full = results()
        with torch.autocast("cpu", dtype=dtype):
            mixed = results()
    for hook, value in mixed.items():
        assert torch.isfinite(value).all(), f"{name}.{hook} under {dtype} autocast"
        torch.testing.assert_close(value.float(), full[hook].float(), atol=5e-2, rtol=5e-2, msg=f"{name}.{hook}")


def test_on_cuda_the_step_timer_reads_device_events_once_at_the_end(monkeypatch):
    """The host runs ahead of a GPU, so host times per step would mostly measure queueing: each step is timed
    by two events on the device's stream, read once the device has passed them and, for the last ones, waited
    for once when training ends. With a stand-in for CUDA
    events on a device clock where a step takes 40 ms and the gap between steps 5 ms."""
    from types import SimpleNamespace

    from poslab.run.callbacks import StepTimer

    device_ms, waits = [0.0], []

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing

        def record(self) -> None:
            self.at = device_ms[0]

        def synchronize(self) -> None:
            waits.append(self.at)

        def query(self) -> bool:  # reached by the device: here, once two more steps have been queued
            return device_ms[0] - self.at > 2 * 45.0

        def elapsed_time(self, end) -> float:
            return end.at - self.at

    monkeypatch.setattr(torch.cuda, "Event", Event)
    timer, module = StepTimer(), SimpleNamespace(device=torch.device("cuda"), backbone=torch.nn.Identity())
    for step in range(12):
        timer.on_train_batch_start(None, module, None, step)
        device_ms[0] += 40.0
        timer.on_train_batch_end(None, module, None, None, step)
        device_ms[0] += 5.0
        assert len(timer._events) <= 3  # steps the device has passed are read as training goes
    assert waits == []  # no wait for the device during training
    timer.on_train_end(None, module)
    assert waits == [12 * 45.0 - 5.0] and timer.report["metrics"]["perf/train_step_ms"] == pytest.approx(40.0)


def test_the_meta_device_catches_a_host_read_and_a_cpu_tensor():
    """The two faults the test above relies on: reading a value, and mixing in a CPU tensor."""
    t = torch.arange(4, device=META)
    with pytest.raises((RuntimeError, NotImplementedError)):
        int(t.max())
    with pytest.raises((RuntimeError, NotImplementedError)):
        t + torch.arange(4)


MODALITIES = available_modalities()  # every modality the registry holds: a fork's too


def _cases() -> list[tuple[str, str]]:
    return [(m, e) for m in MODALITIES for e in available_encoders(m)]


@pytest.mark.parametrize(("modality", "encoder"), _cases())
def test_a_training_step_of_every_modality_runs_on_the_meta_device(modality, encoder, request):
    """The model, its batch and its positions on meta: a training step's loss is a meta tensor."""
    cfg = compose([*tiny_overrides(request, modality), f"encoder={encoder}"])
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    task = build_task(cfg, datamodule).to(META)
    raw = next(iter(datamodule.train_dataloader()))
    batch = datamodule.as_batch(tree_map(lambda t: t.to(META) if isinstance(t, torch.Tensor) else t, raw))
    task.training_step(batch, 0)  # the first step may build what is kept per shape
    with HostCopies() as copies:
        loss = task.training_step(batch, 1)
    loss = loss["loss"] if isinstance(loss, dict) else loss
    assert loss.device == META
    assert not copies.seen, f"copied from the host in a training step: {copies.seen}"


def _bias_cases() -> list[tuple[str, str]]:
    return [(m, e) for m, e in _cases() if encoder_class(e).uses("attention_bias")]


@pytest.mark.parametrize(("modality", "encoder"), _bias_cases())
def test_the_cuda_route_of_every_modality_gives_the_cpu_route_outputs(modality, encoder, request, monkeypatch):
    """A validation step with attention routed as on CUDA (FlexAttention where it applies, its eager form on the
    CPU, forward only) gives the backbone outputs of the CPU route: the score_mod (offsets, or a dense bias),
    block mask, structure masks and bidirectional attention of each modality, checked without a GPU."""
    from types import SimpleNamespace

    from poslab.nn import attention
    from poslab.nn.kernels import flex

    if not flex.AVAILABLE:
        pytest.skip("this torch has no FlexAttention")
    task, batch, outputs = flex_ready_validation(request, modality, encoder)
    routes = []
    on_the_cpu = attention.kernel_for

    def as_on_cuda(q, k, bias, causal, dropout):
        route = on_the_cpu(SimpleNamespace(device=torch.device("cuda"), dtype=q.dtype, shape=q.shape), k, bias,
                           causal, dropout)  # fmt: skip
        routes.append(route)
        return route

    with torch.no_grad():
        task.validation_step(batch, 0)
        monkeypatch.setattr(attention, "kernel_for", as_on_cuda)
        monkeypatch.setattr(flex, "_compiled", lambda: flex.flex_attention)  # eager: its forward runs on the CPU
        task.validation_step(batch, 0)
    assert "flex" in routes
    first, second = outputs
    torch.testing.assert_close(second, first, atol=1e-5, rtol=1e-5)


def test_range_checks_come_from_the_stated_facts_without_reading_the_device():
    """A learned table too short for the stated bound, or a 2D table smaller than the stated grid: a clear error
    raised on meta tensors, whose values cannot be read — so the facts alone decided it."""
    from poslab.encoders.learned import PositionOutOfRange
    from poslab.errors import PoslabError

    learned = build("learned").to(META)  # max_len 64
    x = torch.empty(1, 65, 32, device=META)
    with pytest.raises(PositionOutOfRange, match="position 64 is past encoder.max_len=64"):
        learned.encode_input(x, Positions(steps=torch.empty(65, device=META), steps_start=0, steps_end=65))
    table = build("learned2d").to(META)  # a 4x4 table
    coords = torch.empty(36, 2, device=META)
    with pytest.raises(PoslabError, match="reach row 5, col 5 but the table is 4x4"):
        table.encode_input(torch.empty(1, 36, 32, device=META), Positions(coords=coords, coords_grid=(6, 6)))


@pytest.mark.parametrize("encoder", ["rope2d", "sincos2d", "learned2d", "liere"])
def test_a_training_step_under_fp16_autocast_and_loss_scaling_stays_finite(tiny, encoder):
    """trainer=gpu16 (16-mixed): fp16 autocast with a gradient scaler. Lightning runs 16-mixed as bf16 on a CPU,
    so the step is taken here as Lightning's MixedPrecision takes it on a GPU: autocast, scaled backward,
    unscaled step."""
    from poslab.config.composition import compose
    from poslab.data import build_datamodule
    from poslab.tasks import build_task

    assert compose(["trainer=gpu16"]).trainer.precision == "16-mixed"
    cfg = compose([*tiny, f"encoder={encoder}"])
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    task = build_task(cfg, datamodule)
    batch = datamodule.as_batch(next(iter(datamodule.train_dataloader())), training=True)
    before = [p.detach().clone() for p in task.parameters()]
    optimizer, scaler = torch.optim.AdamW(task.parameters(), lr=1e-3), torch.amp.GradScaler("cpu")
    with torch.autocast("cpu", dtype=torch.float16):
        loss = task.training_step(batch, 0)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert torch.isfinite(loss) and scaler.get_scale() == 65536.0  # no overflow: the scale was not cut
    after = list(task.parameters())
    assert all(torch.isfinite(p).all() for p in after) and any(
        not p.equal(q) for p, q in zip(after, before, strict=True)
    )
