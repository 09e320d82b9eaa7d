"""One training step of the text model on random tokens, as a run builds the model (the encoder with its
defaults and the context length the data would report): what ``make bench`` times and ``make gpu-check``
measures (speed, MFU, memory vs length)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from poslab.encoders import build_encoder_in_context, encoder_defaults
from poslab.modalities.text.model import CausalLM
from poslab.positions import Positions


@dataclass
class TrainingStep:
    """``run()`` takes one step (forward, backward, AdamW); ``model`` is what it trains."""

    run: Callable[[], None]
    model: nn.Module

    def __call__(self) -> None:
        self.run()


def training_step(
    encoder: str, *, dim: int, depth: int, num_heads: int, length: int, batch: int, vocab_size: int = 96,
    device: str = "cpu", compile: bool = False, bf16: bool = False,
) -> TrainingStep:  # fmt: skip
    """The causal LM with ``encoder`` at these sizes on ``batch`` random sequences of ``length`` tokens. ``bf16``:
    autocast to bfloat16 (the loss in float32); ``compile``: ``torch.compile`` the backbone; on CUDA, AdamW fused."""
    options = encoder_defaults(encoder)
    built = build_encoder_in_context(
        encoder, dim=dim, num_heads=num_heads, options=options, context={"max_len": length}
    )
    model = CausalLM(built, vocab_size=vocab_size, dim=dim, depth=depth, num_heads=num_heads).to(device)
    if compile:
        model.backbone.compile()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.startswith("cuda"))
    tokens = torch.randint(0, vocab_size, (batch, length + 1), device=device)
    steps = Positions.consecutive(length, device=device)  # what a data module hands over
    autocast = torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=bf16)

    def run() -> None:
        with autocast:
            logits = model(tokens[:, :-1], steps)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return TrainingStep(run, model)
