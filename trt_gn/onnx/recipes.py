"""diffusers models for export: UNet2DConditionModel and the AutoencoderKL decoder in the published
SD 1.5 and SDXL configurations (values copied from their config.json files), plus tiny
configurations shaped like diffusers' own test configs. Weights are random and seeded (no hub
download); pass a local folder or file with real weights to load them instead.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..errors import Error, first_line

SD15_UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32, norm_eps=1e-5,
)
SDXL_UNET = dict(
    sample_size=128, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280),
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    transformer_layers_per_block=(1, 2, 10), attention_head_dim=(5, 10, 20), cross_attention_dim=2048,
    use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=256,
    projection_class_embeddings_input_dim=2816, norm_num_groups=32, norm_eps=1e-5,
)
TINY_UNET = dict(
    sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
    cross_attention_dim=32, attention_head_dim=8, norm_num_groups=32,
)
SD15_VAE = dict(
    in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2, norm_num_groups=32, sample_size=512,
    block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4, scaling_factor=0.18215,
)
SDXL_VAE = dict(SD15_VAE, sample_size=1024, scaling_factor=0.13025)
TINY_VAE = dict(
    in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1, norm_num_groups=32, sample_size=32,
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
)


# The exported model's output, named for what it is (the exporter would name it after the op that
# makes it, e.g. "conv2d_16"). diffusers returns the UNet's as `sample`, the name of its input, so
# it takes the name diffusers' pipelines give it.
OUTPUT_NAMES = {"unet": ("noise_pred",), "vae-decoder": ("image",)}


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    kind: str  # "unet" or "vae-decoder"
    config: dict
    text_len: int = 77  # encoder_hidden_states length (UNet)
    latent: int = 64  # default latent height/width for the example input

    @property
    def output_names(self) -> list[str]:
        return list(OUTPUT_NAMES[self.kind])


RECIPES = {
    "sd15-unet": Recipe("sd15-unet", "unet", SD15_UNET),
    "sdxl-unet": Recipe("sdxl-unet", "unet", SDXL_UNET, latent=128),
    "tiny-unet": Recipe("tiny-unet", "unet", TINY_UNET, text_len=7, latent=16),
    "sd15-vae-decoder": Recipe("sd15-vae-decoder", "vae-decoder", SD15_VAE),
    "sdxl-vae-decoder": Recipe("sdxl-vae-decoder", "vae-decoder", SDXL_VAE, latent=128),
    "tiny-vae-decoder": Recipe("tiny-vae-decoder", "vae-decoder", TINY_VAE, latent=16),
}


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


class WeightsError(Error):
    """--weights cannot be loaded into the recipe's model (one line, naming the file)."""

    default_hint = "--weights must be a local diffusers model folder or a .safetensors/.bin state dict of this model"


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
