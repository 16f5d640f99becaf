"""Shared, session-scoped exports of the tiny diffusers models (each export takes seconds)."""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("diffusers", reason="diffusers is not installed (pip install diffusers)")

from trt_gn.onnx import recipes  # noqa: E402

logging.getLogger("torch.onnx").setLevel(logging.ERROR)


@pytest.fixture(scope="session")
def tiny_models():
    torch.manual_seed(0)
    vae = recipes.build("tiny-vae-decoder")
    unet = recipes.build("tiny-unet")
    return {"tiny-vae-decoder": vae, "tiny-unet": unet}


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx")


