"""The pipeline's output folder: every step writes into a staging folder next to it, which is
renamed into place at the end, so the output folder holds a complete run or nothing new."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .. import fileio
from .options import PipelineError, PipelineOptions, PipelineResult, Step, check_options
from .steps import run_steps


def run_pipeline(options: PipelineOptions, on_step: Callable[[str, Step], None] | None = None) -> PipelineResult:
    """Run every step into a staging folder, then rename it to options.out. See the module docstring."""
    out = check_options(options)
    with fileio.staging_folder(fileio.folder_of(out), out.name) as stage:
        report, steps = run_steps(options, stage, on_step)
        publish_folder(stage, out, options.overwrite)
    return PipelineResult(out, report, steps)


def publish_folder(stage: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished staging folder to `out`; an existing `out` is replaced only if it is empty
    or overwrite is set (checked again here: it may have changed during the run)."""
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise PipelineError(f"output folder {out} was filled while the pipeline ran", "rerun with another --out")
    fileio.publish_folder(stage, out, replace=True)
