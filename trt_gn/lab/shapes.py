"""The shape list of the diffusion models trt_gn is measured and tested on, in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    name: str
    n: int
    c: int
    h: int
    w: int
    groups: int
    eps: float

    @property
    def size(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    @property
    def numel(self) -> int:
        return self.n * self.c * self.h * self.w


SHAPES: tuple[Shape, ...] = (
    Shape("sd15-unet-320x64", 2, 320, 64, 64, 32, 1e-5),
    Shape("sd15-unet-640x32", 2, 640, 32, 32, 32, 1e-5),
    Shape("sd15-unet-1280x16", 2, 1280, 16, 16, 32, 1e-5),
    Shape("sd15-unet-1280x8", 2, 1280, 8, 8, 32, 1e-5),
    Shape("sd15-unet-2560x8", 2, 2560, 8, 8, 32, 1e-5),
    Shape("sdxl-unet-320x128", 2, 320, 128, 128, 32, 1e-5),
    Shape("sdxl-unet-640x64", 2, 640, 64, 64, 32, 1e-5),
    Shape("vae-dec-512x128", 1, 512, 128, 128, 32, 1e-6),
    Shape("vae-dec-256x512", 1, 256, 512, 512, 32, 1e-6),
    Shape("vae-dec-128x512", 1, 128, 512, 512, 32, 1e-6),
    # the SDXL VAE decoder at 1024x1024 (latents 1x4x128x128); its 1x512x128x128 is vae-dec-512x128
    Shape("sdxl-vae-dec-512x256", 1, 512, 256, 256, 32, 1e-6),
    Shape("sdxl-vae-dec-256x1024", 1, 256, 1024, 1024, 32, 1e-6),
    Shape("sdxl-vae-dec-128x1024", 1, 128, 1024, 1024, 32, 1e-6),
)

SHAPES_BY_NAME = {s.name: s for s in SHAPES}


def select_shapes(names: list[str] | None) -> list[Shape]:
    """The shapes named (in the order given), or all of them for None/empty."""
    if not names:
        return list(SHAPES)
    unknown = [n for n in names if n not in SHAPES_BY_NAME]
    if unknown:
        raise ValueError(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES_BY_NAME)}")
    return [SHAPES_BY_NAME[n] for n in names]
