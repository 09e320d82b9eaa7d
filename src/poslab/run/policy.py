"""What a stored run's config may change, in one table: on resume, on re-evaluation, and which keys are not
part of what a run computes (left out of :func:`config_hash`, which names a comparison's runs and groups its
seeds). The error lines that name the allowed keys are written from it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class KeyRule:
    """The rule for a key, or with ``.*`` for a node and every key under it (the longest match wins)."""

    key: str
    resume: bool = False  # a resumed run may change it: how long it trains, how it shows, where it writes
    evaluate: bool = True  # `poslab eval` may change it: False where the checkpoint's weights depend on it
    computes: bool = True  # part of what a run computes: False for where it writes, how it logs or shows

    def matches(self, key: str) -> bool:
        node = self.key.removesuffix(".*")
        return key == node or (self.key.endswith(".*") and key.startswith(f"{node}."))


POLICY = (
    KeyRule("modality", evaluate=False),
    KeyRule("experiment", evaluate=False),
    KeyRule("task.*", evaluate=False),
    KeyRule("encoder.*", evaluate=False),
    KeyRule("model.*", evaluate=False),
    KeyRule("model.compile", resume=True, evaluate=False, computes=False),
    KeyRule("model.activation_checkpointing", resume=True, evaluate=False, computes=False),
    KeyRule("optim.*", evaluate=False),
    KeyRule("sched.*", evaluate=False),
    KeyRule("trainer.max_steps", resume=True),
    KeyRule("trainer.max_epochs", resume=True),
    KeyRule("trainer.max_time", resume=True),
    KeyRule("trainer.enable_progress_bar", resume=True, computes=False),
    KeyRule("data.root", resume=True, computes=False),  # where the files are kept (verified by checksum), not what
    KeyRule("run.*", resume=True, computes=False),
    KeyRule("resume", resume=True, computes=False),
    KeyRule("logger.*", computes=False),
    KeyRule("eval.ckpt", computes=False),
    KeyRule("offers", computes=False),  # what the modality's training can do for an encoder that needs it
    KeyRule("expect", computes=False),
    KeyRule("compare_encoders", computes=False),
    KeyRule("compare_experiment", computes=False),
    KeyRule("compare_variants.*", computes=False),
    KeyRule("encoder_options.*", computes=False),  # what it sets is in encoder.*: the run's own options
)
DEFAULT = KeyRule("")


def rule(key: str) -> KeyRule:
    """The rule of dotted ``key``: the longest entry of :data:`POLICY` that matches it, else the default
    (fixed on resume, free on eval, part of what the run computes)."""
    return max((e for e in POLICY if e.matches(key)), key=lambda e: len(e.key), default=DEFAULT)


def listed(keys: list[str]) -> str:
    return ", ".join(keys[:-1]) + f" and {keys[-1]}" if len(keys) > 1 else "".join(keys)


def changeable_on_resume() -> str:
    """``trainer.max_steps, …, model.compile and run.*``: what a resumed run may change."""
    return listed([e.key for e in POLICY if e.resume and e.key != "resume"])


def fixed_on_eval() -> str:
    """``modality, experiment, task.*, …``: what a re-evaluation keeps from the checkpoint."""
    fixed = [e for e in POLICY if not e.evaluate]
    return listed([e.key for e in fixed if not any(_under(e, node) for node in fixed if node is not e)])


def _under(entry: KeyRule, node: KeyRule) -> bool:
    """Whether ``entry`` lies in ``node`` (``model.compile`` in ``model.*``)."""
    return node.key.endswith(".*") and entry.key.startswith(node.key[:-1])


def not_computing() -> tuple[str, ...]:
    """The keys and nodes a run's hash leaves out."""
    return tuple(e.key.removesuffix(".*") for e in POLICY if not e.computes)


def config_hash(cfg: dict, ignore: tuple[str, ...] = ()) -> str:
    """A short stable hash of what a run computes: equal configs, equal hashes."""
    plain = {k: v for k, v in json.loads(json.dumps(cfg)).items() if v not in ({}, [])}  # empty nodes compute nothing
    for dotted in (*not_computing(), *ignore):
        node, *path = dotted.split(".")
        parent, key = (plain, node) if not path else (plain.get(node, {}), path[-1])
        if isinstance(parent, dict):
            parent.pop(key, None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:10]


def setting_hash(cfg: dict) -> str:
    """What a run computes, its seed aside, in 6 hex digits: the seeds of one setting share it (their W&B group
    and ``setting`` column), two comparisons with different settings do not."""
    return config_hash(cfg, ignore=("run", "seed"))[:6]
