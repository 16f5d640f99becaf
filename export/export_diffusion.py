#!/usr/bin/env python3
"""Export recipes for diffusers models with the trt_gn custom node (a thin wrapper of
`trt-gn export`; see trt_gn/onnx/recipes.py for the configurations).

    python export/export_diffusion.py sd15-vae-decoder out/vae_decoder.onnx --dtype fp16
    python export/export_diffusion.py sdxl-unet out/unet.onnx --dtype fp16 --weights /models/sdxl/unet
    python export/export_diffusion.py tiny-unet out/tiny_unet.onnx --no-swap    # then: trt-gn fuse
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from trt_gn.cli import main

if __name__ == "__main__":
    sys.exit(main(["export", *sys.argv[1:]]))
