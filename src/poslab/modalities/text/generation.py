"""Sampling from a language model with a decoding cache (:mod:`poslab.nn.decoding`): the prompt in one step,
then one token a step, each at the position after the last.

The sampling rule is nanoGPT's ``generate`` and Hugging Face's ``TopKLogitsWarper`` + ``TemperatureLogitsWarper``:
logits divided by the temperature, everything below the k-th largest dropped, one draw from the softmax;
a temperature of 0 takes the most likely token (greedy decoding).
"""

from __future__ import annotations

import torch

from poslab.positions import Positions


def pick(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None = None):
    """The next token of each row of ``logits [B, V]`` -> ``[B, 1]``."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)


@torch.no_grad()
def sample(
    model,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``prompt [B, P]`` (token ids) followed by ``max_new_tokens`` sampled ones: ``[B, P + N]``.

    ``model``: a decoder with ``forward(tokens, pos, cache=)`` and ``new_cache()`` (``CausalLM``)."""
    cache = model.new_cache()
    device = prompt.device
    length = prompt.shape[1]
    logits = model(prompt, Positions.consecutive(length, device=device), cache=cache)[:, -1]
    out = [prompt]
    for step in range(max_new_tokens):
        token = pick(logits, temperature, top_k, generator)
        out.append(token)
        if step + 1 < max_new_tokens:
            logits = model(token, Positions.consecutive(1, start=length + step, device=device), cache=cache)[:, -1]
    return torch.cat(out, dim=1)
