"""diffusers models for export: UNet2DConditionModel and the AutoencoderKL decoder in the published
SD 1.5 and SDXL configurations (values copied from their config.json files), plus tiny
configurations shaped like diffusers' own test configs. Weights are random and seeded (no hub
download); pass a local folder or file with real weights to load them instead.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import Error, first_line
from .weights import WEIGHT_SUFFIXES, WeightsError, check_weights  # noqa: F401  (part of this module's API)

# The table is data only (recipe_table); re-exported here, where the models are built from it.
from .recipe_table import (RECIPES, SD15_UNET, SD15_VAE, SDXL_UNET, SDXL_VAE, TINY_UNET,  # noqa: F401
                           TINY_VAE, OUTPUT_NAMES, Recipe)


class VaeDecoder(torch.nn.Module):
    """latents -> image: AutoencoderKL.post_quant_conv + decoder (what pipelines call decode)."""

    def __init__(self, vae):
        super().__init__()
        self.post_quant_conv = vae.post_quant_conv
        self.decoder = vae.decoder

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        if self.post_quant_conv is not None:
            latent = self.post_quant_conv(latent)
        return self.decoder(latent)


class UNetWrapper(torch.nn.Module):
    """Plain-tensor signature for export: (sample, timestep, encoder_hidden_states[, text_embeds, time_ids])."""

    def __init__(self, unet, sdxl: bool):
        super().__init__()
        self.unet = unet
        self.sdxl = sdxl

    def forward(self, sample, timestep, encoder_hidden_states, text_embeds=None, time_ids=None):
        added = {"text_embeds": text_embeds, "time_ids": time_ids} if self.sdxl else None
        return self.unet(sample, timestep, encoder_hidden_states, added_cond_kwargs=added, return_dict=False)[0]


def build(name: str, *, dtype: torch.dtype = torch.float32, seed: int = 0, weights: str | Path | None = None) -> torch.nn.Module:
    """The model of recipe `name`, eval mode, in `dtype`: seeded random weights or `weights`
    (a diffusers model folder, or a .safetensors/.bin state dict file); WeightsError when the
    weights cannot be loaded."""
    from diffusers import AutoencoderKL, UNet2DConditionModel

    if name not in RECIPES:
        raise Error(f"unknown model recipe {name!r}", f"choose one of {', '.join(sorted(RECIPES))}")
    recipe = RECIPES[name]
    cls = UNet2DConditionModel if recipe.kind == "unet" else AutoencoderKL
    torch.manual_seed(seed)
    if weights is not None and Path(weights).is_dir():
        try:
            model = cls.from_pretrained(str(weights), local_files_only=True)
        except Exception as exc:
            raise WeightsError(f"{weights}: not a diffusers {cls.__name__} folder ({first_line(exc)})") from exc
    else:
        model = cls(**recipe.config)
        if weights is not None:
            state = _load_state_dict(Path(weights))
            missing, unexpected = _key_mismatch(model, state)
            if missing or unexpected:
                raise WeightsError(
                    f"{weights}: not a state dict of the {name} configuration: {len(missing)} missing keys"
                    f"{_examples(missing)}, {len(unexpected)} unexpected keys{_examples(unexpected)}")
            try:
                model.load_state_dict(state)
            except Exception as exc:  # shapes that do not match the configuration
                raise WeightsError(f"{weights}: does not fit the {name} configuration: {first_line(exc)[:300]}") from exc
    model = model.to(dtype).eval()
    if recipe.kind == "unet":
        return UNetWrapper(model, sdxl="addition_embed_type" in recipe.config).eval()
    return VaeDecoder(model).eval()


def _key_mismatch(model: torch.nn.Module, state: dict) -> tuple[list[str], list[str]]:
    expected = set(model.state_dict())
    return sorted(expected - set(state)), sorted(set(state) - expected)


def _examples(keys: list[str]) -> str:
    return f" (e.g. {', '.join(repr(k) for k in keys[:2])})" if keys else ""


def _load_state_dict(path: Path) -> dict:
    if not path.is_file():
        raise WeightsError(f"{path}: no such weights file or folder")
    if path.suffix != ".safetensors":
        with open(path, "rb") as f:
            head = f.read(4)
        if head != b"PK\x03\x04" and head[:1] != b"\x80":  # torch.save writes a zip file (or, older, a pickle)
            raise WeightsError(f"{path}: not a torch.save file (neither a zip archive nor a pickle)")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise WeightsError(f"{path}: not a readable {'safetensors' if path.suffix == '.safetensors' else 'torch'} "
                           f"state dict ({first_line(exc)[:200]})") from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsError(f"{path}: holds no state dict of tensors")
    return state


def example_inputs(name: str, *, batch: int = 2, latent: int | None = None, dtype: torch.dtype = torch.float32):
    """(args, input names, dynamic_shapes) for exporting recipe `name` (batch/height/width dynamic)."""
    recipe = RECIPES[name]
    size = latent or recipe.latent
    g = torch.Generator().manual_seed(1)
    # Dim.DYNAMIC lets torch.export work out the constraints (e.g. sizes that survive every
    # down/up-sampling stage); the example sizes must be >= 2 (0/1 would be specialised).
    batch_dim = torch.export.Dim.DYNAMIC
    spatial = {0: batch_dim, 2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}
    if recipe.kind == "vae-decoder":
        latent_ch = recipe.config["latent_channels"]
        args = (torch.randn(batch, latent_ch, size, size, generator=g).to(dtype),)
        return args, ["latent"], ({**spatial},)
    cfg = recipe.config
    sample = torch.randn(batch, cfg["in_channels"], size, size, generator=g).to(dtype)
    timestep = torch.tensor([10.0] * batch).to(dtype)
    text = torch.randn(batch, recipe.text_len, cfg["cross_attention_dim"], generator=g).to(dtype)
    args = [sample, timestep, text]
    names = ["sample", "timestep", "encoder_hidden_states"]
    shapes = [spatial, {0: batch_dim}, {0: batch_dim}]
    if "addition_embed_type" in cfg:
        args += [torch.randn(batch, 1280, generator=g).to(dtype), torch.randn(batch, 6, generator=g).to(dtype)]
        names += ["text_embeds", "time_ids"]
        shapes += [{0: batch_dim}, {0: batch_dim}]
    return tuple(args), names, tuple(shapes)
