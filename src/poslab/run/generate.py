"""``poslab generate ckpt=… prompt=…``: continue a prompt with a checkpoint's model, one token a step with a
decoding cache. The model and its tokenizer come from the checkpoint (and its data's config); data keys may
be overridden as for ``poslab eval`` (``data.root=`` on another machine)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from poslab.config.composition import recompose
from poslab.data import build_datamodule
from poslab.errors import ConfigError, PoslabError, first_line
from poslab.tasks import task_from_checkpoint


@dataclass(frozen=True)
class Sampling:
    """What ``poslab generate`` takes besides ``ckpt=`` and data overrides; the defaults are nanoGPT's
    ``sample.py`` (temperature 0.8, top-k 200), with 200 new tokens."""

    prompt: str = "\n"
    max_new_tokens: int = 200
    temperature: float = 0.8  # 0: greedy (the most likely token)
    top_k: int | None = 200  # None (top_k=null): the whole vocabulary
    samples: int = 1
    seed: int = 0
    device: str = "auto"  # auto: cuda when there is one, else cpu

    @classmethod
    def parse(cls, items: list[str]) -> tuple[Sampling, list[str]]:
        """(the sampling keys of ``items``, the remaining ``key=value`` overrides)."""
        known = {f.name: f for f in fields(cls)}
        values, rest = {}, []
        for item in items:
            key, eq, value = item.partition("=")
            if key not in known:
                rest.append(item)
                continue
            if not eq:
                raise ConfigError(f"generate: {key} needs a value ({key}=…)")
            values[key] = _value(key, value)
        sampling = cls(**values)
        sampling.check()
        return sampling, rest

    def check(self) -> None:
        problems = [
            f"max_new_tokens={self.max_new_tokens} (at least 1)" * (self.max_new_tokens < 1),
            f"temperature={self.temperature} (0 for greedy, or more)" * (self.temperature < 0),
            f"top_k={self.top_k} (at least 1, or null)" * (self.top_k is not None and self.top_k < 1),
            f"samples={self.samples} (at least 1)" * (self.samples < 1),
            f"device={self.device} (auto, cpu, cuda, cuda:N, mps)"
            * (self.device.split(":")[0] not in ("auto", "cpu", "cuda", "mps")),
        ]
        problems = [p for p in problems if p]
        if problems:
            raise ConfigError(f"generate: {'; '.join(problems)}")


def _value(key: str, text: str):
    kinds = {"max_new_tokens": int, "samples": int, "seed": int, "top_k": int, "temperature": float}
    if key not in kinds:
        return text.replace("\\n", "\n").replace("\\t", "\t") if key == "prompt" else text  # prompt='ROMEO:\n'
    if key == "top_k" and text.lower() in ("null", "none", ""):
        return None
    try:
        return kinds[key](text)
    except ValueError:
        kind = "an integer" if kinds[key] is int else "a number"
        raise ConfigError(f"generate: {key}={text!r} is not {kind}") from None


def generate(ckpt: str | Path, sampling: Sampling, overrides: list[str] = ()) -> list[str]:
    """The continuations of ``sampling.prompt`` (``sampling.samples`` of them), drawn with ``sampling.seed``."""
    from poslab.run.train import read_checkpoint  # deferred: Lightning, ~7.5 s

    checkpoint, note = read_checkpoint(Path(ckpt))
    stored = checkpoint["hyper_parameters"]["cfg"]
    try:
        task = task_from_checkpoint(checkpoint)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise PoslabError(f"cannot rebuild the model from checkpoint {ckpt}: {first_line(exc)}") from None
    if note:
        print(note, file=sys.stderr)
    if not hasattr(task, "generate"):
        model = f"{stored['modality']} {stored['task']['name']}"
        raise ConfigError(f"checkpoint {ckpt} holds a {model} model, which does not generate tokens; "
                          "poslab generate takes a language model's checkpoint")  # fmt: skip
    device = sampling.device if sampling.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    datamodule = build_datamodule(recompose(stored, overrides), train_cfg=stored)
    generator = torch.Generator(device=device).manual_seed(sampling.seed)
    task.to(device)
    return task.generate(
        sampling.prompt, datamodule, samples=sampling.samples, generator=generator,
        max_new_tokens=sampling.max_new_tokens, temperature=sampling.temperature, top_k=sampling.top_k,
    )  # fmt: skip
