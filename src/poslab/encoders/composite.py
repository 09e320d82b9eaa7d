"""A chain of encoders that the backbone sees as one (``encoder=rope+calendar``).

Each member reads its own field of :class:`~poslab.positions.Positions` — e.g.
RoPE on step indices plus a calendar embedding on timestamps — and the
composite calls every member's hooks in turn: input encodings are applied one
after the other, rotations composed, biases summed. Built by the registry for
any ``a+b`` name; the config holds one options block per member
(``encoder.calendar.embedding=learned``).
"""

from __future__ import annotations

import torch
from torch import nn

from poslab.encoders.base import HOOKS, REPLACING_HOOKS, PositionEncoder
from poslab.errors import ConfigError, PoslabError
from poslab.positions import Positions


class MemberEncoder(PositionEncoder):
    """An encoder built from registered members (a composite, a per-layer pattern): its hooks and context
    extensions are its members' (an instance's, not the class's)."""

    reads = None

    def __init__(self, dim: int, num_heads: int, members: dict[str, PositionEncoder]) -> None:
        super().__init__(dim, num_heads)
        self.members = nn.ModuleDict(members)
        searched = [e for m in members.values() for e in m.searched_extensions if e in m.context_extensions]
        self.searched_extensions = tuple(e for e in dict.fromkeys(searched) if searched.count(e) == 1)
        self.context_extensions = tuple(  # a search over two members' settings at once: not offered
            e
            for e in dict.fromkeys(e for m in members.values() for e in m.context_extensions)
            if e not in searched or e in self.searched_extensions
        )
        self.length_driven_extensions = tuple(
            dict.fromkeys(e for m in members.values() for e in m.length_driven_extensions)
        )

    def learning_rate_factor(self, fraction: float) -> float | None:
        """The first member's that asks for one."""
        return next((f for m in self.members.values() if (f := m.learning_rate_factor(fraction)) is not None), None)

    def complete_from(self) -> float:
        return max(m.complete_from() for m in self.members.values())

    def hooks(self) -> tuple[str, ...]:
        """The members' hooks: a composite of RoPE and a calendar table rotates and embeds but adds no bias,
        and computes no content bias unless a member does. Offsets-only biases reach the backbone through
        the members' :meth:`attention_bias`."""
        used = {"attention_bias" if h == "relative_bias" else h for m in self.members.values() for h in m.hooks()}
        return tuple(h for h in HOOKS if h in used)

    def uses(self, hook: str) -> bool:
        return hook in self.hooks()

    def length_dependent(self) -> bool:
        return any(m.length_dependent() for m in self.members.values())

    def extended_members(self, kind: str, factor: float) -> dict[str, PositionEncoder]:
        """The members extended by ``kind`` where they know it; the others shared unchanged."""
        return {n: m.extended(kind, factor) if kind in m.context_extensions else m for n, m in self.members.items()}

    def with_members(self, members: dict[str, PositionEncoder]) -> MemberEncoder:
        """The same construction over other members (an extended copy)."""
        raise NotImplementedError

    def extended(self, kind: str, factor: float) -> MemberEncoder:
        return self.with_members(self.extended_members(kind, factor))

    def search_extension(self, kind, factor, fitness, budget):
        """The one member's searched extension, scored with the other members as trained."""
        if kind not in self.searched_extensions:
            return super().search_extension(kind, factor, fitness, budget)
        name = next(n for n, m in self.members.items() if kind in m.searched_extensions)

        def with_member(member: PositionEncoder) -> MemberEncoder:
            return self.with_members({**self.members, name: member})

        def scored(member: PositionEncoder, *objective: str) -> float:
            return fitness(with_member(member), *objective)

        found, result = self.members[name].search_extension(kind, factor, scored, budget)
        return with_member(found), result


class CompositeEncoder(MemberEncoder):
    def __init__(self, dim: int, num_heads: int, members: dict[str, PositionEncoder]) -> None:
        for hook in REPLACING_HOOKS:  # two replacements of the same step cannot both act
            owners = [name for name, m in members.items() if m.uses(hook)]
            if len(owners) > 1:
                raise ConfigError(
                    f"encoder '{'+'.join(members)}': {' and '.join(owners)} both replace {hook}; chain one"
                )
        super().__init__(dim, num_heads, members)
        self.name = "+".join(members)
        self.sees_prefix = any(m.sees_prefix for m in members.values())

    def _replacing(self, hook: str) -> PositionEncoder | None:
        return next((m for m in self.members.values() if m.uses(hook)), None)

    def _positions(self, pos: Positions | torch.Tensor) -> Positions:
        if isinstance(pos, torch.Tensor):
            raise PoslabError(f"encoder '{self.name}' reads several position fields: pass a Positions")
        return pos

    def _chain(self, hook: str, x: torch.Tensor, pos) -> torch.Tensor:
        """Every member's ``hook`` in turn: input encodings applied one after the other, rotations composed."""
        pos = self._positions(pos)
        for member in self.members.values():
            x = getattr(member, hook)(x, pos)
        return x

    def encode_input(self, x, pos):
        return self._chain("encode_input", x, pos)

    def rotate(self, x, pos):
        return self._chain("rotate", x, pos)

    def rotate_tokens(self, hook, x, pos, prefix):
        """Each member's ``hook`` in turn, on the prefix tokens too where the member :attr:`sees_prefix`."""
        pos = self._positions(pos)
        for member in self.members.values():
            x = member.rotate_tokens(hook, x, pos, prefix)
        return x

    def rotate_query(self, x, pos):
        return self._chain("rotate_query", x, pos)

    def rotate_key(self, x, pos):
        return self._chain("rotate_key", x, pos)

    def attention_bias(self, q_pos, k_pos):
        q_pos, k_pos = self._positions(q_pos), self._positions(k_pos)
        biases = [b for m in self.members.values() if (b := m.attention_bias(q_pos, k_pos)) is not None]
        return sum(biases[1:], biases[0]) if biases else None

    def content_bias(self, q, k, logits):
        biases = [m.content_bias(q, k, logits) for m in self.members.values() if m.uses("content_bias")]
        biases = [b for b in biases if b is not None]
        return sum(biases[1:], biases[0]) if biases else None

    def input_bias(self, x, layer):
        biases = [m.input_bias(x, layer) for m in self.members.values() if m.uses("input_bias")]
        biases = [b for b in biases if b is not None]
        return sum(biases[1:], biases[0]) if biases else None

    def attention_logits(self, q, k, x, layer):
        member = self._replacing("attention_logits")
        return None if member is None else member.attention_logits(q, k, x, layer)

    def attention_weights(self, logits):
        member = self._replacing("attention_weights")
        return None if member is None else member.attention_weights(logits)

    def with_members(self, members: dict[str, PositionEncoder]) -> CompositeEncoder:
        return CompositeEncoder(self.dim, self.num_heads, members)
