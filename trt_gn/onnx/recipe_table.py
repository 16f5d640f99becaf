"""The recipes' names and diffusers configurations: data only, no torch, so that the CLI can list
the recipes without importing the model code (trt_gn.onnx.recipes builds the models from them).
Values copied from the published SD 1.5 and SDXL config.json files; the tiny configurations are
shaped like diffusers' own test configs.
"""

from __future__ import annotations

import dataclasses

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
