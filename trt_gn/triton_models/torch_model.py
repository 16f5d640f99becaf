"""Triton Python-backend model written by `trt-gn triton --backend pytorch`: a diffusers VAE decoder
or UNet of trt_gn's model recipes, run by PyTorch on the instance's device, with trt_gn's fused
GroupNorm(+SiLU) swapped in (variant "trt_gn") or as diffusers builds it (variant "stock").

What to build is read from config.pbtxt's parameters (strings, written by trt_gn/triton_torch.py):

    trt_gn_package        folder of the trt_gn package to import (its parent is not put on sys.path)
    kernels_library       libtrt_gn_kernels.so for the trt_gn variant on a GPU ("": trt_gn's lookup)
    python_path           folders appended to sys.path (os.pathsep-separated): torch, diffusers
    recipe                sd15-vae-decoder, sdxl-vae-decoder, sd15-unet, sdxl-unet, tiny-...
    variant               trt_gn or stock
    dtype                 fp16, bf16 or fp32 (the inputs' and outputs' type; FP32 timestep)
    channels_last         true or false: the model and its image inputs in channels_last
    compile               true: torch.compile (Inductor) at load, warmed on every batch size
    weights               a diffusers model folder or a state-dict file ("": seeded random)
    seed                  seed of the random weights
    gpu_memory_limit_gib  cap on the instance's CUDA memory ("": none)

The stub's interpreter sees neither PYTHONPATH nor the writer's environment, hence the paths.

Data path: each input arrives as a Triton tensor in shared memory and is taken by DLPack into torch
(no copy, no numpy); the requests of a dynamic batch are concatenated on the instance's device
(``model_instance_device_id`` for KIND_GPU instances), run as one batch, and the output is copied
to the host once and split per request, each part answered by DLPack.

Load: the model is built, moved to the device, swapped, compiled, then run once on every batch
size from 1 to max_batch_size (seeded random inputs), so no request pays for CUDA start-up,
cuDNN set-up or a compile. A batch size that runs out of memory there ends the warm-up: larger
dynamic batches are then split into runs that fit (a single request larger than that still runs
alone, and may be refused with an out-of-memory error).

Errors answer the request they belong to, never the others of its batch: a malformed request
(data type, rank, channel count, shape, batch) names the tensor and what was expected; running
out of GPU memory frees the cached memory and answers an error, and the instance keeps serving.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass

PARAMETERS = ("trt_gn_package", "kernels_library", "python_path", "recipe", "variant", "dtype", "channels_last",
              "compile", "weights", "seed", "gpu_memory_limit_gib")
VARIANTS = ("trt_gn", "stock")
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}  # parameter -> torch dtype name

# Triton model-config type -> torch dtype name, and torch dtype name -> Triton's wire name
CONFIG_TO_TORCH = {"TYPE_FP16": "float16", "TYPE_BF16": "bfloat16", "TYPE_FP32": "float32",
                   "TYPE_FP64": "float64", "TYPE_INT32": "int32", "TYPE_INT64": "int64"}
TORCH_TO_WIRE = {"float16": "FP16", "bfloat16": "BF16", "float32": "FP32", "float64": "FP64", "int32": "INT32",
                 "int64": "INT64", "int8": "INT8", "uint8": "UINT8", "int16": "INT16", "bool": "BOOL"}


class ModelError(RuntimeError):
    """The model cannot be loaded as configured (the server reports the message for the load)."""


class RequestError(ValueError):
    """A request the model refuses; the message names the tensor and what was expected."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: str  # torch dtype name
    dims: tuple  # without the batch dimension; -1 where any size is taken


def parameters(config: dict) -> dict:
    """The model's string parameters from the parsed config (every name of PARAMETERS present)."""
    given = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
    missing = [k for k in PARAMETERS if k not in given]
    if missing:
        raise ModelError(f"config.pbtxt lacks the parameter(s) {', '.join(missing)}: write the repository with "
                         f"`trt-gn triton --backend pytorch`")
    return given


def input_specs(config: dict) -> list:
    specs = []
    for entry in config["input"]:
        dtype = CONFIG_TO_TORCH.get(entry["data_type"])
        if dtype is None:
            raise ModelError(f"input '{entry['name']}' has data_type {entry['data_type']}, which this model does "
                             f"not take")
        specs.append(InputSpec(entry["name"], dtype, tuple(int(d) for d in entry["dims"])))
    return specs


def _wire(dtype) -> str:
    name = str(dtype).replace("torch.", "")
    return TORCH_TO_WIRE.get(name, name)


def _shape_text(dims) -> str:
    return "[" + ", ".join("batch" if d is None else ("any" if d < 0 else str(d)) for d in dims) + "]"


def check_request(tensors: dict, specs: list, max_batch_size: int) -> int:
    """The request's batch size; RequestError for a missing input or one whose data type, rank,
    dimensions or batch (1..max_batch_size, the same for every input) is not what the model takes."""
    batch = first = None
    for spec in specs:
        t = tensors.get(spec.name)
        if t is None:
            raise RequestError(f"input '{spec.name}' is missing")
        full = (None,) + spec.dims
        if _wire(t.dtype) != TORCH_TO_WIRE[spec.dtype]:
            raise RequestError(f"input '{spec.name}': expected data type {TORCH_TO_WIRE[spec.dtype]}, got "
                               f"{_wire(t.dtype)}")
        if t.dim() != len(full):
            raise RequestError(f"input '{spec.name}': expected {len(full)} dimensions {_shape_text(full)}, got "
                               f"{t.dim()} {list(t.shape)}")
        n = int(t.shape[0])
        if not 1 <= n <= max_batch_size:
            raise RequestError(f"input '{spec.name}': batch {n} is outside 1..{max_batch_size} (max_batch_size)")
        if batch is None:
            batch, first = n, spec.name
        elif n != batch:
            raise RequestError(f"input '{spec.name}': batch {n} differs from input '{first}''s batch {batch}")
        for axis, want in enumerate(spec.dims, start=1):
            got = int(t.shape[axis])
            if want >= 0 and got != want:
                what = "channels" if axis == 1 and len(spec.dims) == 3 else f"in dimension {axis}"
                raise RequestError(f"input '{spec.name}': expected {want} {what}, got {got} (expected shape "
                                   f"{_shape_text(full)}, got {list(t.shape)})")
    return batch


def group_requests(batches: list, limit: int) -> list:
    """Consecutive runs of request indices whose batches add up to at most `limit` images; a
    request larger than `limit` runs alone."""
    groups, current, size = [], [], 0
    for i, n in enumerate(batches):
        if current and size + n > limit:
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        groups.append(current)
    return groups


def utf8_locale() -> str | None:
    """Make text files open as UTF-8; the stub's embedded interpreter starts in the C locale (ASCII),
    where torch.compile fails reading its own sources. Returns a warning when no UTF-8 locale exists."""
    import locale

    def utf8() -> bool:
        return locale.getpreferredencoding(False).lower().replace("-", "") == "utf8"

    for name in ("", "C.UTF-8", "C.utf8", "en_US.UTF-8"):
        if utf8():
            return None
        try:
            locale.setlocale(locale.LC_CTYPE, name)
        except locale.Error:
            continue
    return None if utf8() else (f"no UTF-8 locale could be set (text files open as "
                                f"{locale.getpreferredencoding(False)}); torch.compile may fail")


def bootstrap(params: dict) -> None:
    """Make torch, diffusers and the configured trt_gn importable, and point trt_gn at its kernels library."""
    for folder in filter(None, params["python_path"].split(os.pathsep)):
        if folder not in sys.path:
            sys.path.append(folder)  # after the stub's own environment (its numpy stays first)
    if params["kernels_library"]:
        os.environ["TRT_GN_KERNELS_LIBRARY"] = params["kernels_library"]
    package = params["trt_gn_package"]
    if "trt_gn" in sys.modules or not package:
        return
    init = os.path.join(package, "__init__.py")
    if not os.path.isfile(init):
        raise ModelError(f"parameter trt_gn_package: {package} is not the trt_gn package folder (no __init__.py)")
    spec = importlib.util.spec_from_file_location("trt_gn", init, submodule_search_locations=[package])
    module = importlib.util.module_from_spec(spec)
    sys.modules["trt_gn"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["trt_gn"]
        raise


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _root_cause(exc: BaseException) -> str:
    """'Type: first line' of the innermost cause (torch.compile wraps the error that stopped it)."""
    while (exc.__cause__ or getattr(exc, "inner_exception", None)) is not None:
        exc = exc.__cause__ or exc.inner_exception
    return f"{type(exc).__name__}: {_first_line(exc)}"


class TorchModel:
    """The model of one instance, without Triton: build, warm up, run grouped requests."""

    def __init__(self, params: dict, specs: list, output_names: list, max_batch_size: int, device, name: str = "model",
                 log=print):
        import torch

        self.params, self.inputs, self.outputs = params, specs, output_names
        self.max_batch_size, self.name, self.log = max_batch_size, name, log
        self.device = torch.device(device)
        if max_batch_size < 1:
            raise ModelError(f"max_batch_size is {max_batch_size}: this model batches requests, so it must be >= 1")
        if len(output_names) != 1:
            raise ModelError(f"the model has one output, the config lists {len(output_names)}")
        variant, dtype = params["variant"], params["dtype"]
        if variant not in VARIANTS:
            raise ModelError(f"parameter variant is '{variant}'; expected one of {', '.join(VARIANTS)}")
        if dtype not in DTYPES:
            raise ModelError(f"parameter dtype is '{dtype}'; expected one of {', '.join(DTYPES)}")
        self.dtype = getattr(torch, DTYPES[dtype])
        self.channels_last = params["channels_last"] == "true"
        self.compile = params["compile"] == "true"
        self.run_limit = max_batch_size  # largest batch run at once (lowered by the warm-up)
        self.compiled = None
        self.graphs_warm = 0
        self._limits = contextlib.ExitStack()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            limit = params["gpu_memory_limit_gib"]
            if limit:
                total = torch.cuda.get_device_properties(self.device).total_memory
                fraction = float(limit) * 2**30 / total
                if not 0 < fraction <= 1:
                    raise ModelError(f"parameter gpu_memory_limit_gib {limit} is not within the device's "
                                     f"{total / 2**30:.1f} GiB")
                torch.cuda.set_per_process_memory_fraction(fraction, self.device)
        self.module = self._build(variant)

    def _build(self, variant: str):
        import torch

        from trt_gn import abi
        from trt_gn.onnx import recipes
        from trt_gn.swap import swap_group_norms

        p = self.params
        started = time.perf_counter()
        model = recipes.build(p["recipe"], dtype=self.dtype, seed=int(p["seed"]), weights=p["weights"] or None)
        model = model.to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if variant == "trt_gn":
            if self.device.type == "cuda":
                from trt_gn import ops

                try:
                    abi.load()
                    # Chosen (and the C++ op built, where it is) now rather than by the first request.
                    self.log(f"{self.name}: trt_gn's op on CUDA: {ops.implementation()}")
                except (OSError, FileNotFoundError) as exc:
                    raise ModelError(f"the trt_gn kernels library cannot be loaded: {_first_line(exc)}") from exc
                except (RuntimeError, ValueError) as exc:  # TRT_GN_TORCH_OP's choice failed
                    raise ModelError(f"trt_gn's op cannot run on CUDA: {_first_line(exc)}") from exc
            report = swap_group_norms(model)
            if not report.replaced:
                raise ModelError(f"recipe {p['recipe']}: no GroupNorm was swapped for trt_gn's")
            self.log(f"{self.name}: {report.summary().splitlines()[0]}")
        weights = p["weights"] or f"seeded random weights (seed {p['seed']})"
        self.log(f"{self.name}: {p['recipe']} ({variant}, {p['dtype']}, "
                 f"{'channels_last' if self.channels_last else 'NCHW'}) on {self.device} from {weights} in "
                 f"{time.perf_counter() - started:.1f} s")
        return model

    def example(self, batch: int, seed: int = 0) -> dict:
        """Seeded random inputs of `batch` images, on the model's device."""
        import torch

        g = torch.Generator().manual_seed(seed)
        out = {}
        for spec in self.inputs:
            dtype = getattr(torch, spec.dtype)
            shape = (batch,) + tuple(d if d >= 0 else 1 for d in spec.dims)
            if spec.name == "timestep":
                x = torch.randint(0, 1000, shape, generator=g).to(dtype)
            else:
                x = torch.randn(shape, generator=g).to(dtype)
            out[spec.name] = x
        return out

    def _prepare(self, tensors: dict) -> list:
        """The forward's positional arguments, on the device, in the model's layout."""
        import torch

        args = []
        for spec in self.inputs:
            x = tensors[spec.name].to(self.device)
            if x.dim() == 4 and self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            if spec.dims == (1,):  # a per-image scalar (timestep) travels as [batch, 1]
                x = x.reshape(-1)
            args.append(x)
        return args

    def _forward(self, args: list):
        fn = self.compiled if self.compiled is not None else self.module
        return fn(*args)

    def warm_up(self) -> None:
        """Compile (when configured) and run every batch size 1..max_batch_size once; the first that
        runs out of memory sets run_limit below it."""
        import torch

        from trt_gn.compile_check import CheckedCompile, CompileFallbackError, raised_recompile_limits

        started = time.perf_counter()
        compile_s = 0.0
        if self.compile:
            # Hitting a recompile limit is an error (not a silent eager fallback) for this process's life.
            self._limits.enter_context(raised_recompile_limits())
            self.compiled = CheckedCompile(self.module, self.name, fullgraph=False, dynamic=None)
        with torch.inference_mode():
            for batch in range(1, self.max_batch_size + 1):
                args = self._prepare(self.example(batch))
                oom = None
                try:
                    if batch == 1 and self.compiled is not None:
                        try:
                            self.compiled.first_call(*args)
                        except CompileFallbackError as exc:
                            raise ModelError(f"{exc} ({_root_cause(exc)})") from exc
                        compile_s = self.compiled.compile_s
                    else:
                        self._forward(args)
                    self._synchronize()
                except torch.OutOfMemoryError as exc:
                    oom = _first_line(exc)
                del args
                if oom is not None:
                    self._free()
                    if batch == 1:
                        raise ModelError(f"batch 1 does not fit in the memory of {self.device}: {oom}")
                    self.run_limit = batch - 1
                    self.log(f"{self.name}: warm-up: batch {batch} ran out of memory on {self.device}; batches are "
                             f"run {self.run_limit} images at most (larger single requests are refused)")
                    break
        if self.compiled is not None:
            self.graphs_warm = self.compiled.graphs
        compiled = (f", torch.compile: {self.graphs_warm} graph(s), first call {compile_s:.1f} s"
                    if self.compiled is not None else "")
        self.log(f"{self.name}: warmed batch sizes 1..{self.run_limit} in {time.perf_counter() - started:.1f} s"
                 f"{compiled}")

    def _synchronize(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _free(self) -> None:
        import gc

        import torch

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def run_group(self, group: list) -> list:
        """[(tensors, batch)] -> one output tensor (host, contiguous) per request, run as one batch."""
        import torch

        merged = {spec.name: (torch.cat([t[spec.name] for t, _ in group]) if len(group) > 1 else group[0][0][spec.name])
                  for spec in self.inputs}
        with torch.inference_mode():
            y = self._forward(self._prepare(merged))
            y = y.contiguous().to("cpu")
        return list(torch.split(y, [n for _, n in group]))

    def run_requests(self, requests: list) -> list:
        """[(tensors, batch)] checked requests -> per request an output tensor or an error message.
        Requests are run in consecutive groups of at most run_limit images; a group that runs out
        of memory is freed and its requests run again one by one."""
        results = [None] * len(requests)
        for group in group_requests([n for _, n in requests], self.run_limit):
            self._run_indices(requests, group, results)
        if self.compiled is not None and self.compiled.graphs != self.graphs_warm:
            self.log(f"{self.name}: warning: requests compiled {self.compiled.graphs - self.graphs_warm} more "
                     f"graph(s) after the warm-up")
            self.graphs_warm = self.compiled.graphs
        return results

    def _run_indices(self, requests: list, indices: list, results: list) -> None:
        import torch

        oom = failure = None
        try:
            outputs = self.run_group([requests[i] for i in indices])
            for i, out in zip(indices, outputs):
                results[i] = out
            return
        except torch.OutOfMemoryError as exc:
            oom = _first_line(exc)
        except Exception as exc:  # noqa: BLE001 - answered to the requests of this run, the instance goes on
            failure = f"{type(exc).__name__}: {_first_line(exc)}"
        # Out of the except block: the failed run's frames (and their tensors) are gone before the cache is freed.
        self._free()
        if failure is not None:
            for i in indices:
                results[i] = f"{self.name}: running the model failed: {failure}"
            return
        if len(indices) > 1:
            for i in indices:
                self._run_indices(requests, [i], results)
            return
        tensors, n = requests[indices[0]]
        first = self.inputs[0].name
        self.log(f"{self.name}: out of memory on {self.device} for a batch of {n}; cache freed ({oom})")
        results[indices[0]] = (f"out of memory on {self.device} running a batch of {n} (input '{first}' of shape "
                               f"{list(tensors[first].shape)}); the instance freed its cached memory and keeps "
                               f"serving: send at most {self.run_limit} images per request")

    def close(self) -> None:
        self._limits.close()
        self.module = self.compiled = None
        self._free()


def instance_device(args: dict) -> str:
    """'cuda:<model_instance_device_id>' for a KIND_GPU instance, 'cpu' for KIND_CPU."""
    kind = args.get("model_instance_kind", "CPU")
    if kind == "CPU":
        return "cpu"
    if kind != "GPU":
        raise ModelError(f"instance kind {kind} is not supported: use KIND_GPU or KIND_CPU")
    import torch

    device_id = int(args["model_instance_device_id"])
    if not torch.cuda.is_available():
        raise ModelError(f"instance {args.get('model_instance_name')} is KIND_GPU (device {device_id}), but torch "
                         f"{torch.__version__} in the Python backend sees no CUDA device")
    if device_id >= torch.cuda.device_count():
        raise ModelError(f"instance {args.get('model_instance_name')} is on GPU {device_id}, but torch sees only "
                         f"{torch.cuda.device_count()}")
    return f"cuda:{device_id}"


class TritonPythonModel:
    """The Triton Python backend's entry points around TorchModel."""

    def initialize(self, args):
        import triton_python_backend_utils as pb_utils

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = parameters(config)
        warning = utf8_locale()
        if warning:
            pb_utils.Logger.log_warn(f"{args['model_instance_name']}: {warning}")
        bootstrap(params)
        try:
            import torch  # noqa: F401
            import torch.utils.dlpack  # noqa: F401
        except ImportError as exc:
            raise ModelError(f"torch is not importable in the Python backend ({_first_line(exc)}); python_path is "
                             f"'{params['python_path']}'") from exc
        name = args["model_instance_name"]
        self.model = TorchModel(params, input_specs(config), [o["name"] for o in config["output"]],
                                int(config.get("max_batch_size", 0)), instance_device(args), name=name,
                                log=pb_utils.Logger.log_info)
        self.model.warm_up()

    def _error(self, message: str):
        pb = self.pb
        code = getattr(pb.TritonError, "INVALID_ARG", None)
        error = pb.TritonError(message) if code is None else pb.TritonError(message, code)
        return pb.InferenceResponse(error=error)

    def execute(self, requests):
        import torch.utils.dlpack as dlpack

        pb = self.pb
        responses = [None] * len(requests)
        checked, where = [], []
        for i, request in enumerate(requests):
            tensors = {}
            for spec in self.model.inputs:
                t = pb.get_input_tensor_by_name(request, spec.name)
                tensors[spec.name] = None if t is None else dlpack.from_dlpack(t.to_dlpack())
            try:
                checked.append((tensors, check_request(tensors, self.model.inputs, self.model.max_batch_size)))
                where.append(i)
            except RequestError as exc:
                responses[i] = self._error(str(exc))
        output = self.model.outputs[0]
        for i, result in zip(where, self.model.run_requests(checked)):
            if isinstance(result, str):
                responses[i] = pb.InferenceResponse(error=pb.TritonError(result))
            else:
                responses[i] = pb.InferenceResponse(output_tensors=[pb.Tensor.from_dlpack(output, dlpack.to_dlpack(result))])
        return responses

    def finalize(self):
        self.model.close()
