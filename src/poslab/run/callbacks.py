"""Lightning callbacks that measure, draw and report during training.

A :class:`Reporter` fills ``self.report`` (``metrics``, ``tables``,
``figures``); :func:`poslab.run.train.train` merges every reporter's report into
``summary.json``. End-of-run evaluations are :mod:`poslab.evaluation.probes`.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import deque
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from poslab.errors import NonFiniteLoss
from poslab.evaluation.probes import RunReport
from poslab.evaluation.similarity import position_similarity
from poslab.files import write_json_atomic
from poslab.run.throughput import StepShape, peak_flops, weight_count
from poslab.track import plots


class Reporter(RunReport, L.Callback):
    """A callback whose results go into ``summary.json`` (a training-time measurement or figure; end-of-run
    evaluations are :class:`poslab.evaluation.probes.Evaluation`)."""

    def __init__(self) -> None:
        RunReport.__init__(self)


class FiniteLoss(L.Callback):
    """Stops a run whose training loss turns NaN / inf, naming the step, before a checkpoint saves it.

    Reading the loss waits for the device, so on an accelerator it is read only on logging steps
    (``trainer.log_every_n_steps``), where Lightning reads it anyway; on the CPU, every step.
    """

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        # before the backward pass and the optimiser step: the weights never see the bad loss
        if loss.device.type != "cpu" and trainer.global_step % trainer.log_every_n_steps:
            return
        if not torch.isfinite(loss.detach()).all():
            raise NonFiniteLoss(
                f"the training loss is {float(loss.detach())} at step {trainer.global_step}; the run stopped there "
                "and keeps its checkpoints from before it (try a lower optim.lr)"
            )


class RunCheckpoint(ModelCheckpoint):
    """Checkpoints that keep their names and follow their run directory.

    A file of the same name is replaced, never joined by ``best-v1.ckpt`` / ``last-v1.ckpt``; and a run
    directory that was moved or copied resumes with the state its checkpoint recorded, its paths rebased
    onto the directory it is in now (Lightning otherwise drops the best score and paths when the
    directory differs, so a resumed copy would start a second set of files and lose track of the best)."""

    PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(enable_version_counter=False, **kwargs)

    def _save_topk_checkpoint(self, trainer, monitor_candidates) -> None:
        """Not before the encoder is complete (:meth:`PositionEncoder.complete_from`): a best checkpoint from
        before DroPE's drop or LongRoPE2's search would test a model the run does not deliver."""
        encoder = getattr(trainer.lightning_module, "encoder", None)
        start = encoder.complete_from() if encoder is not None else 0.0
        if start and trainer.global_step <= start * trainer.estimated_stepping_batches:
            return
        super()._save_topk_checkpoint(trainer, monitor_candidates)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old, new = state_dict.get("dirpath"), self.dirpath
        if old and new and old != new:

            def rebase(path):
                return str(Path(new) / Path(path).relative_to(old)) if path and str(path).startswith(old) else path

            state_dict = {
                **state_dict,
                "dirpath": new,
                **{k: rebase(state_dict.get(k)) for k in self.PATH_KEYS if k in state_dict},
                "best_k_models": {rebase(k): v for k, v in state_dict.get("best_k_models", {}).items()},
            }
        super().load_state_dict(state_dict)


class PeriodicLast(RunCheckpoint):
    """``last.ckpt`` every ``every_n_steps`` training steps, at the end, and when the run is interrupted.

    ``every_n_steps`` None: a tenth of the run's steps, so a kill loses at most
    about 10 % of it. Only ``last.ckpt`` is kept (the best model has its own callback).
    """

    def __init__(self, dirpath, every_n_steps: int | None = None) -> None:
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, every_n_train_steps=every_n_steps or 0)
        self.auto = every_n_steps is None

    @property
    def state_key(self) -> str:
        # ModelCheckpoint's key is built from its settings, and on_train_start changes one of them:
        # a fixed key lets a resumed run find this callback's state.
        return "PeriodicLast"

    def on_train_start(self, trainer, pl_module) -> None:
        if self.auto:
            self._every_n_train_steps = max(1, int(trainer.estimated_stepping_batches) // 10)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """A SIGTERM or Ctrl-C keeps the work done so far (a crash from a bug does not overwrite it)."""

        if isinstance(exception, SIGTERMException | KeyboardInterrupt) and not trainer.sanity_checking:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


class ResumedByFit:
    """A callback whose saved state continues a run, read back only when a fit resumes.

    Lightning restores every callback's state from any checkpoint it reads, the best checkpoint
    that testing reloads too: that would turn this run's state back to that epoch's (its curves
    cut at the best epoch). Lightning calls ``setup`` before it restores, so the stage is known."""

    _fitting = True

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._fitting = stage == "fit"

    def load_state_dict(self, state_dict: dict) -> None:
        if self._fitting:
            self.restore(state_dict)

    def restore(self, state_dict: dict) -> None:
        raise NotImplementedError


class TrainingPosition(ResumedByFit, L.Callback):
    """What a resumed run needs beyond the model and optimiser to continue exactly like an uninterrupted one.

    Saved with every checkpoint: the global torch RNG states (dropout, augmentation,
    randomized positions and a shuffled loader's order draw from them), restored as
    soon as the checkpoint is read — before Lightning builds the training loader,
    which then redraws its epoch's order (:mod:`poslab.data.resumable`). Also
    tells that loader how many batches training consumed (it runs ahead).
    """

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loader = trainer.train_dataloader
        if callable(getattr(loader, "consumed", None)):  # a ResumableLoader, a streamed one (poslab.data.shards)
            loader.consumed(batch_idx + 1, epoch_over=batch_idx + 1 >= trainer.num_training_batches)

    def state_dict(self) -> dict:
        state = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            # this process's device only: each DDP rank draws on its own device, all alike (the same seed and
            # the same draws), while the other devices' generators in rank 0's process were never used
            state["cuda"] = torch.cuda.get_rng_state()
        return state

    def restore(self, state_dict: dict) -> None:
        """Nothing between here and the first resumed batch draws from the global RNG (evaluation loaders
        have their own generator; the sanity check runs in eval mode), as between two steps of the run."""
        torch.set_rng_state(state_dict["cpu"])
        cuda = state_dict.get("cuda")
        if cuda is not None and torch.cuda.is_available():
            if isinstance(cuda, list | tuple):  # every device's state, as saved before: rank 0's device's
                cuda = cuda[0]
            torch.cuda.set_rng_state(cuda)


class EncoderFigure(Reporter):
    """At the start of a run: the position-only attention scores of the encoder."""

    def __init__(self) -> None:
        super().__init__()
        self._done = False

    def _draw(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self._done:
            return
        self._done = True
        pos, length, grid = trainer.datamodule.similarity_positions()
        scores = position_similarity(module.encoder, pos, length, module.device).cpu()
        title = f"encoder '{module.encoder.name}': position-only attention scores"
        self.add_figure(trainer, "encoder/position_similarity", plots.similarity_figure(scores, grid, title))

    def on_fit_start(self, trainer, pl_module) -> None:
        self._draw(trainer, pl_module)

    def on_test_start(self, trainer, pl_module) -> None:
        self._draw(trainer, pl_module)


class FitMetrics(L.Callback):
    """The finished fit's last logged scalars (``train/loss``, ``val/*``), its best score and best checkpoint,
    kept in ``checkpoints/fit.json`` when the fit ends.

    ``last.ckpt`` is saved at a step's end, before that step's validation, and a checkpoint saved after the fit
    would mark its epoch complete (a longer resumed run would start a new epoch). A run interrupted while
    testing resumes with no step to take, so nothing logs these again: they are read back from here, for the
    step they were recorded at only."""

    def __init__(self, path: Path, best: ModelCheckpoint) -> None:
        super().__init__()
        self.path, self.best, self._stepped = Path(path), best, False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._stepped = True

    def on_train_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero or not self._stepped:  # a resumed fit with no step left keeps the record
            return
        scalars = {k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
        score = self.best.best_model_score
        record = {
            "global_step": trainer.global_step,
            "metrics": scalars,
            "best_score": None if score is None else float(score),
            # beside this file: the run directory may move
            "best_checkpoint": Path(self.best.best_model_path).name if self.best.best_model_path else None,
        }
        write_json_atomic(self.path, record)

    def recorded(self, global_step: int) -> dict | None:
        """What the fit recorded when it ended at ``global_step`` (None: it ended elsewhere, or not yet)."""
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return record if record.get("global_step") == global_step else None


class StepTimer(ResumedByFit, Reporter):
    """Median time of a training step, in ms, from the batch on the device to the step's end, and what it buys:
    ``perf/tokens_per_s`` and ``perf/samples_per_s`` (every device's together) and ``perf/mfu``
    (:mod:`poslab.run.throughput`).

    On the CPU, the host's wall time. On CUDA the host runs ahead of the device (it waits only where a value
    is read), so its times would mostly be the time to queue the work: each step is timed by two CUDA events
    on the device's stream instead, read when the device has passed them (never waiting for it during
    training) and at the end. The tokens are what the backbone's passes of the first step saw (a hook on
    it for that step only): every step of a run has the same shape.
    """

    warmup_steps = 5

    def __init__(self) -> None:
        super().__init__()
        self._times: list[float] = []
        self._events: deque[tuple] = deque()
        self._start: Any = 0.0
        self._passes: list[tuple[int, ...]] = []
        self._hook: Any = None
        self._cost: dict[str, Any] = {}  # the step's shape, the model's weights, the device's peak, the world

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self._cost and self._hook is None:
            self._hook = pl_module.backbone.register_forward_pre_hook(self._see)
        if pl_module.device.type == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def _see(self, module, args) -> None:
        if module.training:
            self._passes.append(tuple(args[0].shape))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if pl_module.device.type != "cuda":
            self._times.append(time.perf_counter() - self._start)
        else:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((self._start, end))
            while self._events and self._events[0][1].query():  # steps the device has finished: no wait
                self._read_first()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
            self._cost = self._step_cost(trainer, pl_module) if self._passes else {}

    def _step_cost(self, trainer, pl_module) -> dict[str, Any]:
        shape = StepShape(
            samples=self._passes[0][0],
            tokens=sum(b * n for b, n, _ in self._passes),
            token_lengths=sum(b * n * n for b, n, _ in self._passes),
            depth=len(pl_module.backbone.blocks),
            width=self._passes[0][-1],
        )
        # the device's peak now, within the warm-up steps the median leaves out (the CPU's is measured once), so
        # that every checkpoint from here on holds it: a run resumed after its last step publishes it too
        peak = peak_flops(pl_module.device)
        return {"shape": asdict(shape), "weights": weight_count(pl_module.model), "world": trainer.world_size,
                "peak": peak}  # fmt: skip

    def _read_first(self) -> None:
        start, end = self._events.popleft()
        self._times.append(start.elapsed_time(end) / 1000)

    def on_train_end(self, trainer, pl_module) -> None:
        if self._events:
            self._events[-1][1].synchronize()  # the last step's end: every earlier event has been reached
            while self._events:
                self._read_first()
        self._publish()

    def _publish(self) -> None:
        times = self._times[self.warmup_steps :] or self._times
        if not times:
            return
        step = statistics.median(times)
        metrics = self.report["metrics"]
        metrics["perf/train_step_ms"] = 1000 * step
        if self._cost:
            shape, world = StepShape(**self._cost["shape"]), self._cost["world"]
            metrics["perf/tokens_per_s"] = world * shape.tokens / step
            metrics["perf/samples_per_s"] = world * shape.samples / step
            if self._cost.get("peak"):
                metrics["perf/mfu"] = shape.model_flops(self._cost["weights"]) / step / self._cost["peak"]

    def state_dict(self) -> dict:
        return {"times": list(self._times), "cost": dict(self._cost)}

    def restore(self, state_dict: dict) -> None:
        """A resumed run's median covers the steps before the interruption too (and, resumed after its last
        step, they are all it has)."""
        self._times = list(state_dict.get("times", []))
        self._cost = dict(state_dict.get("cost", {}))
        self._publish()


class History(ResumedByFit, Reporter):
    """Logged scalars against the global step, so a report can draw training curves without W&B.

    Under the keys they are logged with: every task logs ``train/loss`` per step
    and evaluation metrics per epoch, none both (which would add ``_step`` /
    ``_epoch`` keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.report["history"] = {}

    def _record(self, trainer: L.Trainer, prefix: str) -> None:
        step = trainer.global_step
        for key, value in trainer.callback_metrics.items():
            if not key.startswith(prefix) or key.endswith("_best") or "/lr" in key:
                continue
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                continue
            series = self.report["history"].setdefault(key, [])
            if series and series[-1][0] == step:
                series[-1][1] = float(value)
            else:
                series.append([step, float(value)])

    def state_dict(self) -> dict:
        return {"history": self.report["history"]}

    def restore(self, state_dict: dict) -> None:
        """A resumed run continues the curves of the run it resumes."""
        self.report["history"] = state_dict["history"]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            self._record(trainer, "train/")

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:  # the latest training loss too, so short runs get a curve
            self._record(trainer, "val/")
            self._record(trainer, "train/")
