"""--weights: the one check of a weights path before any work (a diffusers model folder or a
state-dict file), beside the error a weights path that cannot be used raises. Imports nothing
third-party: `trt-gn pipeline` and `trt-gn export` check their options before loading torch models."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import Error


class WeightsError(Error):
    """--weights cannot be loaded into the recipe's model (one line, naming the file)."""

    default_hint = "--weights must be a local diffusers model folder or a .safetensors/.bin state dict of this model"


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def check_weights(weights: str | os.PathLike) -> Path:
    """A --weights path that can be tried: an existing folder, or a file with a state-dict suffix."""
    weights = Path(weights)
    if not weights.exists():
        raise WeightsError(f"--weights {weights}: no such file or folder",
                           "pass a local diffusers model folder or a state-dict file (nothing is downloaded)")
    if weights.is_file() and weights.suffix.lower() not in WEIGHT_SUFFIXES:
        raise WeightsError(f"--weights {weights}: a weights file must end in {', '.join(WEIGHT_SUFFIXES)}",
                           "pass a state dict (.safetensors, .bin) or a diffusers model folder")
    if weights.is_dir() and not (weights / "config.json").is_file():
        raise WeightsError(f"--weights {weights}: folder has no config.json, so it is no diffusers model folder",
                           "pass the model's own folder (e.g. .../vae or .../unet), or a state-dict file")
    return weights
