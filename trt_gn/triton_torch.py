"""Write a Triton model repository that serves a diffusers model of trt_gn's recipes in PyTorch,
with trt_gn's fused GroupNorm(+SiLU) swapped in (or stock, for comparison), through Triton's
Python backend on the GPU (`trt-gn triton RECIPE --backend pytorch`).

Layout written (``<repository>/<model>/``)::

    config.pbtxt        backend "python", inputs/outputs of the recipe at one latent size, dynamic
                        batching, KIND_GPU instances (or KIND_CPU), and the parameters below
    <version>/model.py  trt_gn/triton_models/torch_model.py (the model's code and documentation)

config.pbtxt's parameters tell the model what to build (recipe, variant, dtype, channels_last,
compile, weights, seed, gpu_memory_limit_gib) and where its code is, since the Python backend's
interpreter sees neither PYTHONPATH nor this environment: the trt_gn package that wrote the
repository, the kernels library it found, and the folders holding torch and diffusers here.
Serve the repository where those paths hold, or give them (``python_path``, ``kernels_library``).

Inputs and outputs (the batch dimension is Triton's; dims below are per image):

    vae-decoder   latent [latent_channels, L, L] -> image [out_channels, L*f, L*f] (f = 8 for SD)
    unet          sample [in_channels, L, L], timestep FP32 [1], encoder_hidden_states [T, D]
                  (+ text_embeds [1280], time_ids [6] for SDXL) -> noise_pred [out_channels, L, L]

Tensors other than the timestep are of the chosen dtype (FP16, BF16 or FP32).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .engine import TensorSpec
from . import spec
from .errors import EXIT_MISSING, first_line
from .triton import RepositoryError, RepositoryOptions, _check_common, _publish, _quote, _resolve_batching, \
    model_config_text

BACKEND = "pytorch"
VARIANTS = ("trt_gn", "stock")
DTYPES = {"fp16": "FLOAT16", "bf16": "BFLOAT16", "fp32": "FLOAT"}  # --dtype -> ONNX element type name
DEVICES = ("gpu", "cpu")
DEFAULT_MAX_BATCH_SIZE = 8
MODEL_TEMPLATE = Path(__file__).resolve().parent / "triton_models" / "torch_model.py"
# What the model imports besides trt_gn (diffusers brings huggingface_hub; safetensors loads weights).
PYTHON_PACKAGES = ("torch", "diffusers", "huggingface_hub", "safetensors")


@dataclass
class TorchModelOptions:
    variant: str = "trt_gn"  # "trt_gn" (GroupNorm swapped) or "stock"
    dtype: str = "fp16"
    channels_last: bool = True
    compile: bool = False  # torch.compile at load, warmed on every batch size
    weights: str | os.PathLike | None = None  # diffusers folder or state-dict file; None: seeded random
    seed: int = 0
    latent_size: int | None = None  # latent height = width; None: the recipe's
    device: str = "gpu"  # instance kind: "gpu" (KIND_GPU) or "cpu" (KIND_CPU)
    gpu_memory_limit_gib: float | None = None
    python_path: Sequence[str] | None = None  # None: where torch and diffusers are found here
    kernels_library: str | os.PathLike | None = None  # None: the one trt_gn finds here (trt_gn variant, GPU)
    queue_timeout_ms: int | None = None  # reject a request queued longer (dynamic batcher's queue policy)


@dataclass
class TorchRepositoryResult:
    model_dir: Path
    config: Path
    model_py: Path
    max_batch_size: int
    config_text: str
    parameters: dict
    notes: list[str] = field(default_factory=list)



def recipe_io(recipe_name: str, dtype: str, latent_size: int | None = None) -> tuple[list, list]:
    """(inputs, outputs) TensorSpecs of a recipe served at one latent size; the batch is dimension 0 (None)."""
    from .onnx.recipe_table import RECIPES

    if recipe_name not in RECIPES:
        raise RepositoryError(f"unknown model recipe '{recipe_name}'", f"choose one of {', '.join(sorted(RECIPES))}")
    if dtype not in DTYPES:
        raise RepositoryError(f"unknown --dtype '{dtype}'", f"choose one of {', '.join(DTYPES)}")
    recipe = RECIPES[recipe_name]
    cfg = recipe.config
    size = recipe.latent if latent_size is None else latent_size
    element = DTYPES[dtype]
    factor = 2 ** (len(cfg["block_out_channels"]) - 1)  # the decoder's upsamplings / the UNet's downsamplings
    if recipe.kind == "vae-decoder":
        if size < 1:
            raise RepositoryError(f"--latent-size must be >= 1, got {size}")
        inputs = [TensorSpec("latent", element, (None, cfg["latent_channels"], size, size))]
        outputs = [TensorSpec("image", element, (None, cfg["out_channels"], size * factor, size * factor))]
        return inputs, outputs
    if size < 1 or size % factor:
        raise RepositoryError(f"--latent-size {size}: {recipe_name} needs a multiple of {factor} (it halves the "
                              f"latent {len(cfg['block_out_channels']) - 1} times)")
    inputs = [TensorSpec("sample", element, (None, cfg["in_channels"], size, size)),
              TensorSpec("timestep", "FLOAT", (None, 1)),
              TensorSpec("encoder_hidden_states", element, (None, recipe.text_len, cfg["cross_attention_dim"]))]
    if cfg.get("addition_embed_type") == "text_time":
        time_ids = 6  # original size, crop offset, target size (SDXL)
        text = cfg["projection_class_embeddings_input_dim"] - time_ids * cfg["addition_time_embed_dim"]
        inputs += [TensorSpec("text_embeds", element, (None, text)), TensorSpec("time_ids", element, (None, time_ids))]
    outputs = [TensorSpec("noise_pred", element, (None, cfg["out_channels"], size, size))]
    return inputs, outputs


def _package_folders(names: Sequence[str]) -> list[str]:
    """The sys.path folders these packages are imported from here (first seen first)."""
    folders = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise RepositoryError(f"{name} is not installed here, and the model needs it",
                                  f"pip install {name}, or pass --python-path with the folders that hold "
                                  f"torch and diffusers where the server runs", exit_code=EXIT_MISSING)
        folder = str(Path(list(spec.submodule_search_locations)[0]).resolve().parent)
        if folder not in folders:
            folders.append(folder)
    return folders


def _kernels_library(torch_options: TorchModelOptions) -> str:
    """The kernels library the trt_gn variant loads on a GPU ("" where none is needed)."""
    from . import abi

    if torch_options.variant != "trt_gn" or torch_options.device != "gpu":
        return ""
    if torch_options.kernels_library is not None:
        path = Path(torch_options.kernels_library)
        if not path.is_file():
            raise RepositoryError(f"--kernels-library {path} is not a file")
        return str(path.resolve())
    try:
        return str(abi.find_kernels_library().resolve())
    except FileNotFoundError as exc:
        looked = getattr(exc, "looked_in", None)
        where = f"looked in: {', '.join(map(str, looked))}" if looked else first_line(exc)
        raise RepositoryError(f"the trt_gn variant on a GPU needs the kernels library {spec.KERNELS_LIBRARY}, "
                              f"which is not found here ({where})",
                              f"build it (cmake -S plugin_src -B build && cmake --build build), set "
                              f"{abi.KERNELS_LIBRARY_ENV}, or pass --kernels-library PATH",
                              exit_code=EXIT_MISSING) from None


def _check_options(torch_options: TorchModelOptions, options: RepositoryOptions) -> None:
    o = torch_options
    if o.variant not in VARIANTS:
        raise RepositoryError(f"unknown --variant '{o.variant}'", f"choose one of {', '.join(VARIANTS)}")
    if o.device not in DEVICES:
        raise RepositoryError(f"unknown --device '{o.device}'", f"choose one of {', '.join(DEVICES)}")
    if o.device == "cpu" and options.gpus:
        raise RepositoryError("--gpus needs --device gpu", "drop --gpus, or serve on the GPU")
    if o.device == "cpu" and o.gpu_memory_limit_gib is not None:
        raise RepositoryError("--gpu-memory-limit needs --device gpu")
    if o.gpu_memory_limit_gib is not None and not o.gpu_memory_limit_gib > 0:
        raise RepositoryError(f"--gpu-memory-limit must be > 0 GiB, got {o.gpu_memory_limit_gib}")
    if o.queue_timeout_ms is not None and o.queue_timeout_ms < 1:
        raise RepositoryError(f"--queue-timeout-ms must be >= 1, got {o.queue_timeout_ms}")
    if options.io_from != "auto":
        raise RepositoryError("--io-from belongs to the TensorRT backend", "drop it with --backend pytorch")
    if options.max_batch_size is not None and options.max_batch_size < 1:
        raise RepositoryError(f"--max-batch-size must be >= 1 with --backend pytorch (the model batches requests), "
                              f"got {options.max_batch_size}")
    if options.dynamic_batching is False:
        raise RepositoryError("--backend pytorch always batches requests dynamically", "drop --no-dynamic-batching")
    if o.weights is not None:
        from .pipeline import check_weights

        check_weights(o.weights)


def model_parameters(recipe: str, torch_options: TorchModelOptions) -> dict:
    """config.pbtxt parameters for trt_gn/triton_models/torch_model.py (all strings)."""
    import trt_gn

    o = torch_options
    python_path = o.python_path if o.python_path is not None else _package_folders(PYTHON_PACKAGES)
    return {
        "trt_gn_package": str(Path(trt_gn.__file__).resolve().parent),
        "kernels_library": _kernels_library(o),
        "python_path": os.pathsep.join(str(p) for p in python_path),
        "recipe": recipe,
        "variant": o.variant,
        "dtype": o.dtype,
        "channels_last": "true" if o.channels_last else "false",
        "compile": "true" if o.compile else "false",
        "weights": "" if o.weights is None else str(Path(o.weights).resolve()),
        "seed": str(int(o.seed)),
        "gpu_memory_limit_gib": "" if o.gpu_memory_limit_gib is None else repr(float(o.gpu_memory_limit_gib)),
    }


def parameters_text(params: dict) -> str:
    return "".join(f"parameters {{\n  key: {_quote(k)}\n  value: {{ string_value: {_quote(v)} }}\n}}\n"
                   for k, v in params.items())


def _with_queue_timeout(text: str, timeout_ms: int) -> str:
    """Triton rejects a request that waited `timeout_ms` in the dynamic batcher's queue (instead of
    letting it wait, e.g. while the model is loaded again)."""
    head = "dynamic_batching {\n"
    if text.count(head) != 1:
        raise RepositoryError("internal: the config has no single dynamic_batching block for the queue policy")
    policy = (f"  default_queue_policy {{\n    timeout_action: REJECT\n"
              f"    default_timeout_microseconds: {int(timeout_ms) * 1000}\n    allow_timeout_override: true\n  }}\n")
    return text.replace(head, head + policy)


def write_torch_repository(repository, model_name: str, recipe: str, options: RepositoryOptions | None = None,
                           torch_options: TorchModelOptions | None = None) -> TorchRepositoryResult:
    """Write ``<repository>/<model_name>`` serving `recipe` in PyTorch (see the module docstring).
    Every check runs before anything is written; the folder is staged and renamed into place."""
    options = options or RepositoryOptions()
    torch_options = torch_options or TorchModelOptions()
    repo = Path(repository)
    _check_common(repo, model_name, options)
    _check_options(torch_options, options)
    inputs, outputs = recipe_io(recipe, torch_options.dtype, torch_options.latent_size)
    if options.max_batch_size is None:
        options = dataclasses.replace(options, max_batch_size=DEFAULT_MAX_BATCH_SIZE)
    max_batch, dynamic = _resolve_batching(inputs, outputs, None, "onnx", options)
    params = model_parameters(recipe, torch_options)
    text = model_config_text(model_name, inputs, outputs, max_batch_size=max_batch,
                             instance_count=options.instance_count, gpus=options.gpus, dynamic_batching=dynamic,
                             preferred_batch_sizes=options.preferred_batch_sizes,
                             max_queue_delay_us=options.max_queue_delay_us, backend="python")
    if torch_options.device == "gpu" and not options.gpus:
        # The Python backend's instances default to the CPU; these run on every GPU.
        if text.count("kind: KIND_CPU") != 1:
            raise RepositoryError("internal: the config's instance_group has no single KIND_CPU to make KIND_GPU")
        text = text.replace("kind: KIND_CPU", "kind: KIND_GPU")
    if torch_options.queue_timeout_ms is not None:
        text = _with_queue_timeout(text, torch_options.queue_timeout_ms)
    text += parameters_text(params)
    notes = []
    if torch_options.compile:
        notes.append(f"torch.compile runs at load and is warmed on batch sizes 1..{max_batch}: loading takes minutes")

    def fill(stage: Path) -> None:
        (stage / "config.pbtxt").write_text(text)
        version_dir = stage / str(options.version)
        version_dir.mkdir()
        shutil.copyfile(MODEL_TEMPLATE, version_dir / "model.py")

    target = _publish(repo, model_name, fill, options.overwrite)
    return TorchRepositoryResult(model_dir=target, config=target / "config.pbtxt",
                                 model_py=target / str(options.version) / "model.py", max_batch_size=max_batch,
                                 config_text=text, parameters=params, notes=notes)
