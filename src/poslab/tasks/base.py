"""What every task shares: the encoder built from the config, the optimiser, the hooks callers use."""

from __future__ import annotations

from typing import Any

import lightning as L
from torch.distributed.fsdp.wrap import wrap

from poslab.encoders import PositionEncoder, build_encoder_in_context
from poslab.errors import ConfigError
from poslab.nn.backbone import TransformerBlock
from poslab.tasks.optimizers import configure


class PositionTask(L.LightningModule):
    """Base of the tasks. Subclasses call ``save_hyperparameters()`` (it records *their*
    arguments), set ``self.model`` (whose ``.backbone`` owns the encoder) and ``monitor``."""

    monitor: tuple[str, str] = ("val/loss", "min")  # what the best checkpoint is chosen by
    #: Whether it trains a step on rows longer than the data's when the encoder asks
    #: (:meth:`PositionEncoder.training_multiple`).
    longer_rows: bool = False

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg

    def build_encoder(self, context: dict[str, Any], causal: bool = False) -> PositionEncoder:
        """``cfg.encoder`` with the options the data knows (``context``) filled in.

        ``causal``: the model's attention. A relative bias left ``bidirectional:
        null`` (ALiBi, T5) follows it: a bidirectional model needs the symmetric
        form, or keys *after* the query would get ALiBi's bias growing with
        distance and T5's bucket of distance 0.
        """
        options = dict(self.cfg["encoder"])
        model = self.cfg["model"]
        context = {"bidirectional": not causal, "depth": model.get("depth"), **context}
        return build_encoder_in_context(
            options.pop("name"), dim=model["dim"], num_heads=model["num_heads"], options=options, context=context
        )

    @property
    def backbone(self):
        return self.model.backbone

    @property
    def encoder(self) -> PositionEncoder:
        return self.backbone.encoder

    def configure_model(self) -> None:
        """Called by Lightning once the strategy is set up, before the optimiser.

        Under ``trainer=fsdp`` each backbone block becomes its own FSDP unit (Lightning's manual wrapping:
        ``wrap`` shards what it is given inside the strategy's context and returns it unchanged under any other
        strategy), so one block's weights are gathered at a time. ``model.activation_checkpointing=true``: the
        backbone recomputes its blocks in the backward pass. ``model.compile=true``: compile the backbone in
        place (``nn.Module.compile``), so the checkpoint's keys stay those of the plain model and either kind
        of run loads the other's."""
        blocks = self.backbone.blocks
        for index, block in enumerate(blocks):
            if isinstance(block, TransformerBlock):  # not wrapped yet (a test after a fit calls this again)
                blocks[index] = wrap(block)
        self.backbone.activation_checkpointing = bool(self.cfg["model"].get("activation_checkpointing"))
        if self.cfg["model"].get("compile"):
            self.backbone.compile()

    def evaluations(self, cfg) -> list:
        """End-of-run evaluations (:class:`poslab.evaluation.probes.Evaluation`), run after testing as
        Lightning test passes; ``cfg`` is this run's config (an evaluation of a checkpoint may differ)."""
        return []

    def on_fit_start(self) -> None:
        """An encoder that trains on longer rows needs a task that draws them, and must be the run's encoder (a
        member of a combination would not be asked)."""
        encoders = [m for m in self.encoder.modules() if isinstance(m, PositionEncoder)]
        longer = [m for m in encoders if m.training_multiples() != (1,)]
        if any(m is not self.encoder for m in longer):
            raise ConfigError(f"encoder '{longer[0].name}' trains on rows longer than the context: use it as the run's "
                              f"encoder, not within '{self.encoder.name}'")  # fmt: skip
        if longer and not self.longer_rows:
            raise ConfigError(f"encoder '{self.encoder.name}' trains on rows longer than the context, which the "
                              f"{type(self).__name__} task does not draw")  # fmt: skip

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Tell every encoder (a composite's members too) how far training has gone; where the encoder asks
        for a learning rate of its own (DroPE's recalibration), this step's optimiser takes it, in place of
        the schedule's (set again before every step, so the schedule's own count is left as it is)."""
        fraction = self.global_step / max(1, self.trainer.estimated_stepping_batches)
        for module in self.encoder.modules():
            if isinstance(module, PositionEncoder):
                module.train_progress(fraction)
        factor = self.encoder.learning_rate_factor(fraction)
        if factor is not None:
            for optimizer in self.trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = float(self.cfg["optim"]["lr"]) * factor

    #: What a schedule's saved state holds about its length: a resumed run keeps these from the schedule it
    #: builds for its own (possibly longer: ``trainer.max_steps`` raised) run, and the step it reached.
    SCHEDULE_LENGTH_KEYS = ("total_steps", "_schedule_phases")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A run resumed with more steps continues on the schedule of its new length from the step it
        reached (restored as saved, the one-cycle schedule would end, and raise, at the old total)."""
        for state in checkpoint.get("lr_schedulers", []):
            for key in self.SCHEDULE_LENGTH_KEYS:
                state.pop(key, None)

    def configure_optimizers(self):
        return configure(
            self, self.cfg["optim"], self.cfg.get("sched"), self.trainer.estimated_stepping_batches,
            no_decay_modules=(self.encoder,), monitor=self.monitor,
        )  # fmt: skip
