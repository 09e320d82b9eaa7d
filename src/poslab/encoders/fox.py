"""``fox``: the Forgetting Transformer's forget gate (Lin et al. 2025, "Forgetting Transformer: Softmax
Attention with a Forget Gate", ICLR, eq. 4-6; reference: zhixuan-lin/forgetting-transformer).

Each token t of a layer's input gets a scalar forget gate per head,
f_t = σ(w_h·x_t + b_h), and the logit of query i for key j ≤ i gains
D_ij = Σ_{l=j+1..i} log f_l = c_i − c_j, c the cumulative sum of log f_t: the
attention weight is multiplied by the product of the gates between the two,
a learned, data-dependent decay (a token can keep or close the past). No
position of its own: alone it is FoX without RoPE (the paper's default);
``rope+fox`` is FoX with RoPE. Gates as the reference builds them: one
``Linear(dim, heads)`` per layer (the model's depth fills ``depth``), weights
N(0, 0.02), biases 0. On bidirectional attention the gates between i and j
on either side: D_ij = −|c_i − c_j|, the symmetric reading.

It acts through the ``input_bias`` hook: attention writes its logits out for
it (an ``L × L`` tensor per head; the reference's fused kernel avoids that).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from poslab.config.ranges import OptionalCount
from poslab.encoders.base import PositionEncoder
from poslab.encoders.registry import register_encoder


@register_encoder("fox")
class ForgetGate(PositionEncoder):
    paper = "Lin et al. 2025"
    reads = None  # the gates come from the tokens

    def __init__(
        self,
        dim: int,
        num_heads: int,
        depth: OptionalCount = None,  # one gate per layer (the model's depth); None: one shared by every layer
    ) -> None:
        super().__init__(dim, num_heads)
        self.depth = depth
        self.gates = nn.ModuleList(nn.Linear(dim, num_heads) for _ in range(depth or 1))
        for gate in self.gates:  # the reference's initialisation
            nn.init.normal_(gate.weight, std=0.02)
            nn.init.zeros_(gate.bias)

    def log_gates(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """log f_t = log σ(w_h·x_t + b_h): ``[B, H, L]`` float32."""
        return F.logsigmoid(self.gates[layer % len(self.gates)](x).float()).transpose(1, 2)

    def input_bias(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """D_ij = −|c_i − c_j|, c_i = Σ_{t ≤ i} log f_t (eq. 6): ``[B, H, L, L]``; for j ≤ i it is c_i − c_j."""
        cumulative = self.log_gates(x, layer).cumsum(-1)
        return -(cumulative[..., :, None] - cumulative[..., None, :]).abs()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, depth={self.depth}"
