"""On a GPU: the CUDA kernel (through the swapped PyTorch model) against onnxruntime's output of
the unfused ONNX model of the same tiny VAE decoder, for fp32/fp16/bf16 inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trt_gn.onnx import recipes

from onnx_helpers import plain_export, run_ort, swapped

pytestmark = pytest.mark.gpu

# relative to the output's range: the whole decoder runs in the given dtype on the GPU
TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}


@pytest.fixture
def no_tf32():
    """fp32 means fp32: cuDNN convolutions default to TF32 on Ampere+, 1e-3 off onnxruntime's CPU fp32."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_cuda_kernel_vs_onnxruntime_unfused(tiny_models, export_dir, dtype, no_tf32):
    model = tiny_models["tiny-vae-decoder"]
    path = export_dir / "vae.unfused.gpu.onnx"
    if not path.exists():
        plain_export(model, "tiny-vae-decoder", path, opset=18)
    args, names, _ = recipes.example_inputs("tiny-vae-decoder")
    (ref,) = run_ort(path, {names[0]: args[0].numpy()})
    m, report = swapped(model)
    m = m.to("cuda", dtype).to(memory_format=torch.channels_last)
    x = args[0].to("cuda", dtype).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        out = m(x).float().cpu().numpy()
    err = float(np.abs(out - ref).max() / np.abs(ref).max())
    assert err < TOL[dtype], f"{dtype}: max error {err:.3e} of the output range"
