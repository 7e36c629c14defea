"""Run outputs on rank 0: CSV logs, results.json, the summary table, train.log, and W&B when on.

W&B: the API key is read by wandb itself (``WANDB_API_KEY`` or ``wandb login``);
nothing here writes it to disk or into the logged config.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from ..report.wandb_log import start_run, table_cell


class CsvLog:
    """Dict rows in a CSV file; the header is the first row's keys. Every write replaces the file
    whole (a temporary file, then a rename), so a run killed at any moment leaves the rows before
    the write or after it, never half a row. A row with a key the header lacks (a metric added
    since the file was begun, a resumed run's, or ``val_*`` first logged at a later epoch) widens
    the header: the file is rewritten with the new column, empty in the rows before it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fields: list[str] | None = None
        if path.exists() and path.stat().st_size:  # resumed run: keep appending
            with open(path, newline="") as f:
                self.fields = next(csv.reader(f), None)

    def drop_rows(self, keep: Callable[[dict], bool]) -> None:
        """Rewrite the file with only the rows ``keep`` accepts (rows a resumed run repeats)."""
        if self.fields is None:
            return
        with open(self.path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if keep(r)]
        self._replace("", rows)

    def write(self, *rows: Mapping) -> None:
        if not rows:
            return
        kept = ""
        begun = self.fields is not None
        new = list(dict.fromkeys(k for row in rows for k in row if k not in (self.fields or ())))
        self.fields = [*(self.fields or ()), *new]
        if begun and self.path.exists():
            if new:  # a wider header: every row read back and written again under it
                with open(self.path, newline="") as f:
                    rows = (*csv.DictReader(f), *rows)
            else:
                kept = self.path.read_text()
        self._replace(kept, rows)

    def _replace(self, kept: str, rows: Sequence[Mapping]) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.fields)  # every key has its column: none dropped
        if not kept:
            writer.writeheader()
        writer.writerows(rows)
        write_atomic(self.path, kept + buffer.getvalue())


class RunLogger:
    """Everything a run reports. Build it on every rank; only rank 0 writes."""

    def __init__(
        self, run_dir: Path, enabled: bool, wandb_cfg: Mapping | None, config: dict, group: str, resumed_epoch: int = 0
    ) -> None:
        self.enabled, self.run_dir, self.wandb = enabled, run_dir, None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self.epochs = CsvLog(run_dir / "metrics.csv")
        self.steps = CsvLog(run_dir / "steps.csv")
        # A run killed after logging an epoch but before checkpointing it repeats that epoch.
        self.epochs.drop_rows(lambda r: int(r["epoch"]) <= resumed_epoch)  # 1-based: epochs done
        self.steps.drop_rows(lambda r: int(r["epoch"]) <= resumed_epoch)
        if wandb_cfg and wandb_cfg.get("wandb"):
            self.wandb = start_run(wandb_cfg, config, group, run_dir)

    def log_steps(self, records: Sequence[Mapping], epoch: int) -> None:
        """``records`` of ``epoch`` (1-based, as metrics.csv's) to steps.csv (and W&B)."""
        if not self.enabled:
            return
        self.steps.write(*({"epoch": epoch, **record} for record in records))
        for record in records:
            if self.wandb is not None:
                self.wandb.log({f"train/{k}": v for k, v in record.items() if k != "step"}, step=record["step"])

    def log_epoch(self, row: Mapping) -> None:
        if not self.enabled:
            return
        self.epochs.write(row)
        if self.wandb is not None:
            self.wandb.log({f"epoch/{k}": v for k, v in row.items() if k != "step"}, step=row["step"])

    def finish(self, results: Mapping, checkpoint: Path | None = None, log_checkpoint: bool = False) -> None:
        if not self.enabled:
            return
        write_json(self.run_dir / "results.json", results)
        if self.wandb is not None:
            import wandb

            columns = list(results)
            self.wandb.log({"results": wandb.Table(columns=columns, data=[[table_cell(results[c]) for c in columns]])})
            self.wandb.summary.update({k: v for k, v in results.items() if isinstance(v, (int, float, str))})
            if log_checkpoint and checkpoint is not None and checkpoint.exists():
                artifact = wandb.Artifact(f"{results['arch']}-{results['padding_name']}", type="model")
                artifact.add_file(str(checkpoint))
                self.wandb.log_artifact(artifact)
            self.wandb.finish()


def write_json(path: Path, data: Mapping) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_atomic(path: Path, text: str) -> None:
    """``path`` holds ``text`` or what it held before, whenever the process dies: written to a
    temporary file beside it, flushed to disk, then renamed over it."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with open(tmp, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:  # a full disk, a quota, a lost mount: no half file left beside the whole one
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and not err.filename:  # fsync's and write's name no file
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise


LOG_NAME = "train.log"  # Hydra's job log of train.py has this name too: the same file where run_dir is Hydra's


class _Tee:
    """A text stream that writes to ``stream`` and to ``file`` alike; anything else (``isatty``,
    ``fileno``, ``encoding``) is ``stream``'s."""

    def __init__(self, stream: IO[str], file: IO[str]) -> None:
        self._stream, self._file = stream, file

    def write(self, text: str) -> int:
        self._file.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._file.flush()
        self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def run_log(run_dir: Path, enabled: bool) -> Iterator[None]:
    """On rank 0 (``enabled``), everything the run prints on stdout inside (the resume line, every
    epoch's line, the summary and its last line) is also appended to ``run_dir/train.log``, and so
    is the one line a run that fails or is stopped ends with (train.py prints it on stderr). The
    progress bar and its lines (stderr) are not: the file holds what a run reports, not its redraws."""
    if not enabled:
        yield
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOG_NAME, "a", buffering=1) as file:  # line-buffered: a killed run keeps its lines
        stdout = sys.stdout
        sys.stdout = _Tee(stdout, file)
        try:
            yield
        except BaseException as err:
            line = ending_line(err)
            if line:
                file.write(line + "\n")
            raise
        finally:
            sys.stdout = stdout


def ending_line(err: BaseException) -> str | None:
    """The line train.py prints for ``err`` where it ends a run in one line (resnet.cli.errors), else None."""
    from ..config import ConfigError
    from ..job.checkpointer import RunFailed
    from ..job.preempt import Stopped
    from .loop import NonFiniteLoss

    if isinstance(err, Stopped):
        return str(err)
    if isinstance(err, (ConfigError, RunFailed, NonFiniteLoss)):
        return f"error: {err}"
    return None
