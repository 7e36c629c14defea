"""Progress of a long loop: a tqdm bar on a terminal, one plain line at a time in a log.

A bar redraws itself with carriage returns; in a file (a SLURM job's log, ``nohup``,
``2>&1 | tee``) every redraw stays, and a 90-epoch run leaves tens of thousands of them.
:func:`progress_mode` picks, in this order:

1. ``RESNET_PROGRESS=bar|lines|off`` (``auto`` or unset: the rules below);
2. ``lines`` in a SLURM batch job: ``SLURM_JOB_ID`` is set and the job is not interactive
   (no ``srun --pty``, which sets ``SLURM_PTY_PORT``, and not an ``salloc`` / ``srun`` shell,
   whose job is named ``bash``, ``sh``, ``zsh`` or ``interactive``);
3. ``lines`` when stderr is not a terminal;
4. ``bar`` otherwise.

Both go to stderr, tqdm's stream, which is also the one tested for a terminal, so stdout holds
only each epoch's row and the summary tables: ``python train.py > log.txt`` keeps its bar on the
terminal and a clean log. A line is printed where the caller's numbers are on the host anyway
(:meth:`Progress.log`), every ``every`` units (:meth:`Progress.update`) and at the end, however
the loop ended; nothing here reads a device tensor::

    train 3: 50/625 batches (8%) | loss (running mean) 2.314 | lr 0.1 | img/s 1,234 | 0:00:41 elapsed, ETA 0:07:52
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import IO

from tqdm import tqdm

from .config import ConfigError

ENV = "RESNET_PROGRESS"
MODES = ("bar", "lines", "off")
INTERACTIVE_JOB_NAMES = ("bash", "sh", "zsh", "interactive")  # salloc's shell, srun --pty bash


def progress_mode(stream: IO | None = None, environ: Mapping[str, str] | None = None) -> str:
    """``bar``, ``lines`` or ``off`` for progress written to ``stream`` (stderr): module docstring.
    A misspelt override is a :class:`~data.config.ConfigError` (train.py and eval.py: one line, status 2)."""
    environ = os.environ if environ is None else environ
    stream = sys.stderr if stream is None else stream
    forced = environ.get(ENV, "").strip().lower()
    if forced in MODES:
        return forced
    if forced not in ("", "auto"):
        raise ConfigError(f"{ENV}={environ[ENV]!r}: use bar, lines, off or auto")
    interactive = environ.get("SLURM_PTY_PORT") or environ.get("SLURM_JOB_NAME") in INTERACTIVE_JOB_NAMES
    if environ.get("SLURM_JOB_ID") and not interactive:  # a SLURM job that no one watches on a terminal
        return "lines"
    try:
        return "bar" if stream is not None and stream.isatty() else "lines"
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return "lines"


def duration(seconds: float) -> str:
    """``H:MM:SS``."""
    minutes, s = divmod(int(seconds), 60)
    h, m = divmod(minutes, 60)
    return f"{h}:{m:02d}:{s:02d}"


class Progress(AbstractContextManager):
    """A bar or plain lines over ``total`` units (None: unknown), from ``initial`` (a resumed
    epoch); ``enabled=False`` (another rank, ``progress=False``) shows nothing. ``every``: a
    line each time the count passes a multiple of it (lines mode; 0: only at :meth:`log` and
    the end; ``interval``: and at least that many seconds after the last line). ``mode``
    overrides :func:`progress_mode`, chosen when the object is made."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        *,
        initial: int = 0,
        unit: str = "it",
        every: int = 0,
        interval: float = 0.0,
        enabled: bool = True,
        leave: bool = False,
        mode: str | None = None,
        file: IO | None = None,
    ):
        self.file = sys.stderr if file is None else file
        chosen = mode or progress_mode(self.file)  # on every rank: a bad RESNET_PROGRESS stops them all
        self.mode = chosen if enabled else "off"
        self.total, self.desc, self.unit, self.every, self.interval = total, desc, unit, every, interval
        self.n = self.initial = initial
        self.shown: int | None = None  # the count of the last line printed
        self.images = 0  # counted by update(images=...): the rate when the caller gives none
        self.start = self.shown_at = time.perf_counter()
        self.bar = None
        if self.mode == "bar":
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave, file=self.file)

    def update(self, n: int = 1, images: int = 0) -> None:
        """``n`` more units done (``images`` of them images, for the rate of a plain line)."""
        self.n += n
        self.images += images
        if self.bar is not None:
            self.bar.update(n)
        elif (
            self.mode == "lines"
            and self.every
            and self.n // self.every > (self.n - n) // self.every
            and (not self.interval or time.perf_counter() - self.shown_at >= self.interval)
        ):
            self._line()

    def log(self, fields: Mapping[str, str]) -> None:
        """Numbers the caller has on the host now: the bar's postfix, or a line."""
        if self.bar is not None:
            self.bar.set_postfix(fields)
        elif self.mode == "lines":
            self._line(fields)

    def close(self) -> None:
        """Clear the bar, or print the last line (where the loop ended, however it ended) unless the
        last line printed was at this count."""
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "lines" and self.n != self.shown:
            self._line()
        self.mode = "off"  # closed: a second close prints nothing

    def __exit__(self, *exc) -> None:
        self.close()

    def line(self, fields: Mapping[str, str] | None = None) -> str:
        """The plain line for the count now (module docstring)."""
        elapsed = time.perf_counter() - self.start
        count = f"{self.n:,} {self.unit}"
        if self.total:
            count = f"{self.n:,}/{self.total:,} {self.unit} ({100 * self.n // self.total}%)"
        parts = [f"{self.desc}: {count}"]
        fields = dict(fields or {})
        if "img/s" not in fields and self.images and elapsed > 0:
            fields["img/s"] = f"{self.images / elapsed:,.0f}"
        parts += [f"{key} {value}" for key, value in fields.items()]
        timing = f"{duration(elapsed)} elapsed"
        done = self.n - self.initial
        if self.total and done > 0 and self.n < self.total:
            timing += f", ETA {duration(elapsed / done * (self.total - self.n))}"
        parts.append(timing)
        return " | ".join(parts)

    def _line(self, fields: Mapping[str, str] | None = None) -> None:
        print(self.line(fields), file=self.file, flush=True)
        self.shown, self.shown_at = self.n, time.perf_counter()


PASS_LINE_SECONDS = 10.0  # a pass over images, in a log: a line at its end, and this often before it


def image_pass(images: int | None, desc: str, enabled: bool = True) -> Progress:
    """A pass over a sample of images (reading it, a BN re-estimation, a teacher's outputs): a bar
    on a terminal; in a log its last line alone, or a line every :data:`PASS_LINE_SECONDS` where
    it is slow."""
    return Progress(
        images, desc, unit="img", every=max((images or 0) // 100, 1), interval=PASS_LINE_SECONDS, enabled=enabled
    )
