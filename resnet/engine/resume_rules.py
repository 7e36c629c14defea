"""What a resumed run may change: one table, every key of the training config in it.

A checkpoint records the config it was trained with. A resume compares it with the config given
now, key by key: a key the run is *fixed* by (what is trained, on what data, how) refuses a change
in one line naming both values; a key that may *change* (how fast, where to, how often to log or
save, how long to train) is applied and reported. Nothing is recorded and then ignored. The rule
of a key is its longest entry below (``data`` covers ``data.image_size``; ``data.workers`` overrides
it), and docs/training.md shows the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FIXED, CHANGES = "fixed", "may change"

RULES: dict[str, tuple[str, str]] = {
    # what is trained
    "model": (FIXED, "the architecture and its classes"),
    "padding": (FIXED, "the padding of every site"),
    "grid": (FIXED, "the presets a grid model trains for"),
    "grid_bn": (FIXED, "what each BatchNorm keeps per preset"),
    # on what data
    "data": (FIXED, "the data, its image size and augmentation"),
    "data.root": (CHANGES, "the same data, moved (a node-local copy)"),
    "data.workers": (CHANGES, "loader processes (a mid-epoch resume also needs the same; it says so)"),
    "data.val_labels": (CHANGES, "where the val labels are read from"),
    "data.devkit": (CHANGES, "where the val labels are read from"),
    "seed": (FIXED, "every random draw"),
    "batch_size": (FIXED, "the batch per process (and, with the world size, the global batch)"),
    "world_size": (FIXED, "the global batch: batch_size x processes"),
    # how it is trained
    "optim": (FIXED, "the optimizer and its settings (their state is in the checkpoint)"),
    "optim.lr": (CHANGES, "the LR scale: every LR of the schedule from here on scales with it"),
    "sched": (FIXED, "the schedule's shape"),
    "max_steps_per_epoch": (FIXED, "the schedule's length"),
    "loss": (FIXED, "the loss"),
    "label_smoothing": (FIXED, "the loss"),
    "bce_target_threshold": (FIXED, "the loss"),
    "mixup": (FIXED, "the loss"),
    "cutmix": (FIXED, "the loss"),
    "random_erasing": (FIXED, "the augmentation"),
    "grad_clip": (FIXED, "the update"),
    "amp": (FIXED, "the arithmetic of every step"),
    "sync_bn": (FIXED, "the batch statistics"),
    "freeze_bn": (FIXED, "the batch statistics"),
    "ema_decay": (FIXED, "the EMA weights"),
    "ema_every": (FIXED, "the EMA weights"),
    "eval_flip": (FIXED, "what the val errors measure"),
    # how long, where, how fast, how it is watched
    "epochs": (CHANGES, "how long: beyond the planned end only where the schedule can extend"),
    "stop_after": (CHANGES, "epochs in this invocation"),
    "resume": (CHANGES, "where to resume from"),
    "init": (CHANGES, "the weights a fine-tune starts from (read only when there is nothing to resume)"),
    "run_dir": (CHANGES, "where the run is written"),
    "checkpoint_every": (CHANGES, "how often last.pt is saved"),
    "checkpoint_minutes": (CHANGES, "how often last.pt is saved, by the clock"),
    "dist_timeout": (CHANGES, "how long a collective waits for a stalled process"),
    "max_unreadable": (CHANGES, "the share of unreadable images that stops a run"),
    "eval_every": (CHANGES, "how often the run validates"),
    "val_images": (CHANGES, "how many val images a validation scores"),
    "log_every": (CHANGES, "how often the run logs"),
    "logger": (CHANGES, "where the run logs"),
    "on_nonfinite": (CHANGES, "what a non-finite loss does"),
    "data_changed": (CHANGES, "what a resume on another training set does"),
    "max_skipped": (CHANGES, "the share of skipped steps that stops a run"),
    "device": (CHANGES, "where it runs"),
    "compile": (CHANGES, "how fast"),
    "channels_last": (CHANGES, "how fast"),
    "deterministic": (CHANGES, "how reproducible the kernels are"),
}
# present or absent, part of what is trained: absent is "no grid". (The padding is compared as
# built, resnet.engine.resume: without +padding= the model's own applies, which may be the same.)
ABSENCE_MATTERS = ("grid",)
QUIET = ("resume", "run_dir")  # differ on every resume by nature: applied, not reported


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
