"""What a resumed run may change: the rule of every key of the training config, declared with the
key in :data:`resnet.schema.KEYS`.

A checkpoint records the config it was trained with. A resume compares it with the config given
now, key by key: a key the run is *fixed* by (what is trained, on what data, how) refuses a change
in one line naming both values; a key that may *change* (how fast, where to, how often to log or
save, how long to train) is applied and reported. Nothing is recorded and then ignored. The rule
of a key is its longest entry in :data:`RULES` (``data`` covers ``data.image_size``; ``data.workers``
overrides it), and docs/training.md shows the table (generated: scripts/resume_table.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..schema import FIXED, KEYS

# Key -> (rule, the line the docs show), from each key's declaration in resnet.schema.KEYS.
RULES: dict[str, tuple[str, str]] = {name: (key.rule, key.doc) for name, key in KEYS.items() if key.rule is not None}
# present or absent, part of what is trained: absent is "no grid". (The padding is compared as
# built, resnet.job.resume: without +padding= the model's own applies, which may be the same.)
ABSENCE_MATTERS = tuple(name for name, key in KEYS.items() if key.absence_matters)
# differ on every resume by nature: applied, not reported
QUIET = tuple(name for name, key in KEYS.items() if key.quiet)


def rule(key: str) -> tuple[str, str] | None:
    """The rule of a dotted key: its longest entry in :data:`RULES`; None for an unknown key."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        found = RULES.get(".".join(parts[:n]))
        if found is not None:
            return found
    return None


def flatten(config: Mapping, prefix: str = "") -> dict[str, object]:
    """``{"data": {"root": x}}`` -> ``{"data.root": x}``; lists and empty mappings are values."""
    out: dict[str, object] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


@dataclass(frozen=True)
class Difference:
    key: str
    was: object
    now: object

    def __str__(self) -> str:
        return f"{self.key}: {_shown(self.was)} -> {_shown(self.now)}"


def compare(recorded: Mapping, now: Mapping) -> tuple[list[Difference], list[Difference]]:
    """(refused, changed): the differences between a checkpoint's config and this run's, split
    by :data:`RULES`. A key on one side only (a config from another version of this code) is
    skipped, except under :data:`ABSENCE_MATTERS`; a key with no rule counts as fixed."""
    was, given = flatten(recorded), flatten(now)
    refused, changed = [], []
    for key in sorted(set(was) | set(given)):
        top = key.split(".")[0]
        if (key not in was or key not in given) and top not in ABSENCE_MATTERS:
            continue
        a, b = was.get(key), given.get(key)
        if a == b or top in QUIET:
            continue
        kind = (rule(key) or (FIXED, ""))[0]
        (refused if kind == FIXED else changed).append(Difference(key, a, b))
    return refused, changed


def as_typed(value: object) -> str:
    """A recorded value as a command line gives it (``null``, ``[a,b]``): what a refusal names, and
    the override it says to pass."""
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return "null" if value is None else str(value)


def _shown(value: object) -> str:
    return "(not set)" if value is None else as_typed(value)
