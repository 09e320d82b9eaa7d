"""``optim.name`` among torch's optimisers, ``sched.name`` among four schedules; the defaults build the
AdamW + one-cycle pair exactly as written out here."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.cli import main
from poslab.config.composition import compose
from poslab.tasks.optimizers import configure, optimizers, parameter_groups


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))


def run_steps(optimizer, schedule, net, steps: int) -> list[float]:
    """``steps`` updates with the same seeded gradients; the learning rate each update used."""
    torch.manual_seed(1)
    lrs = []
    for _ in range(steps):
        for p in net.parameters():
            p.grad = torch.randn_like(p)
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return lrs


def test_the_default_is_adamw_with_one_cycle_as_before():
    cfg = compose([])
    ours, reference = model(), model()
    built = configure(ours, cfg.optim, cfg.sched, total_steps=12)
    optimizer = torch.optim.AdamW(
        [{"params": [reference[0].weight, reference[2].weight], "weight_decay": 0.05},
         {"params": [reference[0].bias, reference[1].weight, reference[1].bias, reference[2].bias],
          "weight_decay": 0.0}],
        lr=3e-3, betas=(0.9, 0.999),
    )  # fmt: skip
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=12, pct_start=0.125)
    assert type(built["optimizer"]) is torch.optim.AdamW
    assert type(built["lr_scheduler"]["scheduler"]) is torch.optim.lr_scheduler.OneCycleLR
    assert run_steps(built["optimizer"], built["lr_scheduler"]["scheduler"], ours, 12) == run_steps(
        optimizer, schedule, reference, 12
    )
    for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", list(optimizers()))
def test_every_offered_optimiser_takes_a_step_from_its_defaults(name):
    net = model()
    before = [p.detach().clone() for p in net.parameters()]
    built = configure(net, {"name": name, "lr": 1e-2, "weight_decay": 0.01, "warmup_fraction": 0.0}, {}, 4)
    assert type(built["optimizer"]).__name__.lower() == name
    run_steps(built["optimizer"], built["lr_scheduler"]["scheduler"], net, 2)
    assert all(torch.isfinite(p).all() for p in net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))


def test_sgd_from_config_keeps_the_decay_groups_and_leaves_out_adamws_betas():
    # sched.name=constant: one-cycle would cycle the momentum
    cfg = compose(
        ["modality=text", "optim.name=sgd", "optim.momentum=0.9", "optim.nesterov=true", "sched.name=constant"]
    )
    assert "betas" not in cfg.optim  # text.yaml tunes AdamW's betas: they do not apply to SGD
    net = model()
    optimizer = configure(net, cfg.optim, cfg.sched, 10)["optimizer"]
    assert type(optimizer) is torch.optim.SGD
    decay, no_decay = optimizer.param_groups
    assert decay["momentum"] == 0.9 and decay["nesterov"] and decay["weight_decay"] == 0.1
    assert no_decay["weight_decay"] == 0.0 and len(no_decay["params"]) == 4
    assert [p.shape for p in decay["params"]] == [p.shape for p in parameter_groups(net, 0.1)[0]["params"]]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optim.momentum=0.9"], "'optim.momentum' is not an option of optim.name=adamw; its options: name,"),
        (["optim.name=sgdd"], "optim.name cannot be 'sgdd' (did you mean 'sgd'?); valid: adadelta,"),
        (["optim.name=lbfgs"], "optim.name cannot be 'lbfgs': it re-evaluates the loss in a closure"),
        (["optim.name=sgd", "optim.momentun=0.9"], "unknown config key 'optim.momentun' (did you mean"),
        (["optim.name=sgd", "optim.nesterov=maybe"], "config key 'optim.nesterov' expects bool"),
        (["sched.name=cosin"], "sched.name cannot be 'cosin' (did you mean 'cosine'?); valid: one_cycle, constant,"),
        (["sched.name=steplr"], "sched.name cannot be 'steplr' (did you mean 'StepLR'?)"),
        (["sched.name=LambdaLR"], "sched.name cannot be 'LambdaLR': it takes a function; valid: one_cycle,"),
        (["sched.name=OneCycleLR"], "sched.name cannot be 'OneCycleLR': sched.name=one_cycle is it, sized to the run"),
        (["sched.name=StepLR", "sched.step_size=0"], "config key 'sched.step_size' must be >= 1, got 0"),
        (["sched.name=StepLR", "sched.step=2"], "unknown config key 'sched.step' (did you mean"),
        (["sched.name=StepLR"], "sched.name=StepLR refuses its options: StepLR.__init__() missing 1 required"),
        (["sched.name=ReduceLROnPlateau", "sched.interval=step"], "sched.interval must be epoch"),
        (["sched.name=ReduceLROnPlateau", "sched.mode=maximum"], "'sched.mode' expects one of 'min', 'max', got"),
        (["sched.name=CyclicLR", "sched.base_lr=0.1", "sched.max_lr=0.2", "sched.mode=zigzag"], "'sched.mode' expects"),
    ],
)
def test_a_bad_optimiser_or_schedule_is_one_line(overrides, message, tmp_path, capsys):
    assert main(["train", f"run.root={tmp_path}", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not list(tmp_path.iterdir())


def factor(name: str, step: int, total: int, warmup: int) -> float:
    """The schedules written out: linear warmup (Goyal et al. 2017), then constant, a half cosine to zero
    (Loshchilov & Hutter 2017, eq. 5) or a line to zero."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / (total - warmup)
    return {"constant": 1.0, "cosine": 0.5 * (1 + math.cos(math.pi * progress)), "linear": 1 - progress}[name]


@pytest.mark.parametrize("name", ["constant", "cosine", "linear"])
def test_each_schedule_gives_the_optimiser_its_formulas_learning_rate(name):
    net = model()
    built = configure(net, {"lr": 0.5, "weight_decay": 0.0, "warmup_fraction": 0.2}, {"name": name}, 10)
    lrs = run_steps(built["optimizer"], built["lr_scheduler"]["scheduler"], net, 10)
    assert lrs == pytest.approx([0.5 * factor(name, t, 10, 2) for t in range(10)], abs=1e-12)


def test_a_resumed_schedule_follows_its_new_length():
    """Raising trainer.max_steps on resume: the schedule continues on the longer run from the step reached."""
    first = configure(model(), {"lr": 1.0, "weight_decay": 0.0, "warmup_fraction": 0.0}, {"name": "linear"}, 10)
    run_steps(first["optimizer"], first["lr_scheduler"]["scheduler"], model(), 5)
    longer = configure(model(), {"lr": 1.0, "weight_decay": 0.0, "warmup_fraction": 0.0}, {"name": "linear"}, 20)
    longer["lr_scheduler"]["scheduler"].load_state_dict(first["lr_scheduler"]["scheduler"].state_dict())
    longer["optimizer"].param_groups[0]["lr"] = longer["lr_scheduler"]["scheduler"].get_last_lr()[0]
    assert longer["lr_scheduler"]["scheduler"].last_epoch == 5
    longer["lr_scheduler"]["scheduler"].step()
    assert longer["optimizer"].param_groups[0]["lr"] == pytest.approx(1 - 6 / 20)


def test_one_cycle_keeps_a_momentum_the_config_sets_and_cycles_the_default():
    """SGD with optim.momentum=0.5 keeps 0.5 at every step; SGD with its default momentum (0) and AdamW
    cycle between 0.95 and 0.85 as one-cycle does."""
    set_momentum = {"name": "sgd", "lr": 0.1, "momentum": 0.5, "warmup_fraction": 0.3}
    net = model()
    built = configure(net, set_momentum, {"name": "one_cycle"}, 10)
    optimizer, schedule = built["optimizer"], built["lr_scheduler"]["scheduler"]
    seen = []
    for _ in range(10):
        seen.append(optimizer.param_groups[0]["momentum"])
        optimizer.step()
        schedule.step()
    assert seen == [0.5] * 10
    adamw = configure(model(), {"lr": 0.1, "weight_decay": 0.0, "warmup_fraction": 0.3}, {"name": "one_cycle"}, 10)
    assert adamw["optimizer"].param_groups[0]["betas"][0] == pytest.approx(0.95)  # cycled: starts at the top


def test_a_torch_scheduler_by_class_name_steps_as_its_class_does_per_epoch():
    """``sched.name=StepLR``: torch's class with the config's typed arguments, stepped per epoch (Lightning's
    ``interval``): lr * gamma ** (epoch // step_size); ``MultiStepLR`` takes its milestones as a list."""
    cfg = compose(["sched.name=StepLR", "sched.step_size=2", "sched.gamma=0.5", "optim.lr=0.1"])
    built = configure(model(), cfg.optim, cfg.sched, total_steps=100)
    scheduler = built["lr_scheduler"]
    assert type(scheduler["scheduler"]) is torch.optim.lr_scheduler.StepLR
    assert (scheduler["interval"], scheduler["frequency"], scheduler["name"]) == ("epoch", 1, "train/lr")
    lrs = run_steps(built["optimizer"], scheduler["scheduler"], model(), 6)  # one step() per epoch here
    assert lrs == pytest.approx([0.1 * 0.5 ** (epoch // 2) for epoch in range(6)])
    multi = compose(["sched.name=MultiStepLR", "sched.milestones=[1,3]", "sched.interval=step"])
    built = configure(model(), multi.optim, multi.sched, total_steps=10)
    assert built["lr_scheduler"]["interval"] == "step" and built["lr_scheduler"]["scheduler"].milestones == {1: 1, 3: 1}


@pytest.mark.parametrize(("modality", "watched"), [("vision", ("val/acc", "max")), ("text", ("val/loss", "min"))])
def test_reduce_on_plateau_watches_the_tasks_metric_unless_told_another(modality, watched):
    cfg = compose([f"modality={modality}", "sched.name=ReduceLROnPlateau", "sched.patience=1"])
    built = configure(model(), cfg.optim, cfg.sched, total_steps=10, monitor=watched)["lr_scheduler"]
    assert built["monitor"] == watched[0] and built["scheduler"].mode == watched[1] and built["interval"] == "epoch"
    told = compose([f"modality={modality}", "sched.name=ReduceLROnPlateau", "sched.monitor=train/loss",
                    "sched.mode=min"])  # fmt: skip
    built = configure(model(), told.optim, told.sched, total_steps=10, monitor=watched)["lr_scheduler"]
    assert built["monitor"] == "train/loss" and built["scheduler"].mode == "min"


def test_a_run_with_reduce_on_plateau_lowers_its_learning_rate_when_the_metric_stalls(tiny):
    """In a real fit: Lightning steps it at each validation with the task's metric (patience 0, factor 0.5: the
    rate halves at every epoch whose val/acc did not improve)."""
    import csv
    from pathlib import Path

    from poslab.run.train import train

    overrides = [o for o in tiny if o != "logger=none"]
    summary = train(compose([*overrides, "logger=csv", "sched.name=ReduceLROnPlateau", "sched.patience=0",
                             "sched.factor=0.5", "trainer.max_epochs=4", "optim.lr=0.003",
                             "trainer.log_every_n_steps=1"]))  # fmt: skip
    accs = [acc for _, acc in summary["history"]["val/acc"]]
    assert len(accs) == 4
    halvings, best = [0], accs[0]
    for acc in accs[1:]:  # torch's rule in max mode: better than the best by more than 1e-4 of it (rel threshold)
        halvings.append(halvings[-1] + (acc <= best * (1 + 1e-4)))
        best = max(best, acc)
    rows = list(csv.DictReader((Path(summary["run_dir"]) / "csv" / "metrics.csv").open()))
    lrs = {int(r["step"]): float(r["train/lr"]) for r in rows if r.get("train/lr")}
    for step, lr in lrs.items():  # 3 steps an epoch; the rate of epoch e follows the validations before it
        epoch = step // 3
        assert lr == pytest.approx(0.003 * 0.5 ** (halvings[epoch - 1] if epoch else 0)), (step, accs)
