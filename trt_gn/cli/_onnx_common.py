"""Shared bits of the ONNX subcommands (export, fuse, validate): error line + hint, progress."""

from __future__ import annotations

import contextlib

from ._errors import print_error



def fail(prog: str, message: str, hint: str | None = None) -> int:
    """Prints the error (see _errors) and returns the usage-error exit code."""
    print_error(prog, message, hint or "")
    return 2


@contextlib.contextmanager
def progress_bar(enabled: bool = True):
    """Yields callback(stage, done, total) drawing a rich progress bar on stderr."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        tasks: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=max(total, 1))
            bar.update(tasks[stage], completed=done, total=max(total, 1))

        yield update
