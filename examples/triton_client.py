#!/usr/bin/env python3
"""Send a seeded random input to a trt_gn model served by Triton and compare the answer with
onnxruntime running the fused ONNX model (its model-local function makes it runnable there).

    python examples/triton_client.py --onnx vae_decoder.fused.onnx --model vae_decoder \\
        --shape latent:1x4x64x64 --protocol grpc --url localhost:8001

    python examples/triton_client.py --onnx model.onnx --model model --protocol http --url localhost:8000

The model's config is read from the server: a tensor it reshapes (a [batch] tensor under batching
is dims [ 1 ] with reshape: { shape: [ ] }) is sent as [batch, 1] and its answer compared in the
model's shape. Prints max abs/rel error per output and exits 0 when every output is within tolerance
(|triton - onnxruntime| <= atol + rtol * |onnxruntime| everywhere), 1 when not, 2 for bad
arguments, 3 when the server cannot be reached or rejects the request.

Needs: numpy, onnx, onnxruntime, tritonclient[http,grpc].
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

# ONNX element type name -> numpy dtype. BF16 is left out: numpy and onnxruntime's CPU provider
# have no native bfloat16, so this example cannot build a reference for it.
_ONNX_TO_NUMPY = {
    "FLOAT": np.float32, "FLOAT16": np.float16, "DOUBLE": np.float64, "INT8": np.int8, "INT16": np.int16,
    "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8, "BOOL": np.bool_,
}


class ClientError(RuntimeError):
    pass


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple  # ints, None for dynamic dimensions


def read_model_io(onnx_path: str) -> tuple[list[InputSpec], list[str]]:
    """Graph inputs (without initializers) and output names, weights not loaded."""
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        t = value.type.tensor_type
        dtype_name = onnx.TensorProto.DataType.Name(t.elem_type)
        if dtype_name not in _ONNX_TO_NUMPY:
            raise ClientError(f"input '{value.name}' has type {dtype_name}, which this example does not generate")
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim)
        inputs.append(InputSpec(value.name, np.dtype(_ONNX_TO_NUMPY[dtype_name]), shape))
    return inputs, [o.name for o in model.graph.output]


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """'latent:1x4x64x64' -> ('latent', (1, 4, 64, 64))."""
    name, sep, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME:SHAPE like latent:1x4x64x64")
    return name, shape


def make_inputs(specs: list[InputSpec], shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs: dynamic dimensions from ``shapes``; dimension 0 defaults to 1."""
    unknown = set(shapes) - {s.name for s in specs}
    if unknown:
        raise ClientError(f"--shape names {sorted(unknown)}, not inputs of the model ({[s.name for s in specs]})")
    rng = np.random.default_rng(seed)
    feeds = {}
    for s in specs:
        if s.name in shapes:
            shape = shapes[s.name]
            if len(shape) != len(s.shape) or any(d is not None and d != g for d, g in zip(s.shape, shape)):
                raise ClientError(f"--shape {s.name}:{'x'.join(map(str, shape))} does not fit the model's "
                                  f"{'x'.join('?' if d is None else str(d) for d in s.shape)}")
        else:
            unknown_dims = [i for i, d in enumerate(s.shape) if d is None and i != 0]
            if unknown_dims:
                raise ClientError(f"input '{s.name}' has dynamic dimensions {unknown_dims}: "
                                  f"give --shape {s.name}:SHAPE")
            shape = tuple(1 if d is None else d for d in s.shape)
        if s.dtype.kind == "f":
            feeds[s.name] = rng.standard_normal(shape).astype(s.dtype)
        elif s.dtype.kind == "b":
            feeds[s.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:  # integer inputs (e.g. a diffusion timestep): small non-negative values
            feeds[s.name] = rng.integers(0, 1000, shape).astype(s.dtype)
    return feeds


def reference_outputs(onnx_path: str, feeds: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        return dict(zip(output_names, session.run(output_names, feeds)))
    except Exception as exc:  # onnxruntime raises its own exception types for bad models and inputs
        raise ClientError(f"onnxruntime could not run {onnx_path}: {str(exc).splitlines()[0]}") from exc


def client_module(protocol: str):
    """tritonclient.http or tritonclient.grpc (same InferInput/InferRequestedOutput API)."""
    if protocol == "http":
        import tritonclient.http as module
    elif protocol == "grpc":
        import tritonclient.grpc as module
    else:
        raise ClientError(f"unknown protocol '{protocol}' (http or grpc)")
    return module


def build_request(protocol: str, feeds: dict[str, np.ndarray], output_names: list[str]):
    """(InferInput list, InferRequestedOutput list) for ``client.infer``; HTTP sends binary tensors."""
    from tritonclient.utils import np_to_triton_dtype

    module = client_module(protocol)
    inputs = []
    for name, array in feeds.items():
        infer_input = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        if protocol == "http":
            infer_input.set_data_from_numpy(array, binary_data=True)
        else:
            infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    if protocol == "http":
        outputs = [module.InferRequestedOutput(n, binary_data=True) for n in output_names]
    else:
        outputs = [module.InferRequestedOutput(n) for n in output_names]
    return inputs, outputs


def _reshaped(config: dict, kind: str) -> dict[str, tuple[list[int], list[int]]]:
    """name -> (dims, reshape shape) of the config's ``kind`` ("input"/"output") tensors with reshape."""
    return {t["name"]: ([int(d) for d in t.get("dims", [])], [int(d) for d in t["reshape"].get("shape", [])])
            for t in config.get(kind, []) if "reshape" in t}


def to_request_shapes(config: dict, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's tensors in the shapes the server's API takes: a tensor with ``reshape`` in the
    config is sent in its ``dims`` (under batching, a [batch] tensor goes as [batch, 1])."""
    batched = int(config.get("max_batch_size", 0)) > 0
    reshaped = _reshaped(config, "input")
    return {name: (array.reshape(([array.shape[0]] if batched else []) + reshaped[name][0]) if name in reshaped
                   else array) for name, array in feeds.items()}


def to_model_shapes(config: dict, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The server's answers in the model's own shapes (the inverse of ``to_request_shapes``, for outputs)."""
    batched = int(config.get("max_batch_size", 0)) > 0
    reshaped = _reshaped(config, "output")
    return {name: (array.reshape(([array.shape[0]] if batched else []) + reshaped[name][1])
                   if name in reshaped and array is not None else array) for name, array in outputs.items()}


def triton_infer(protocol: str, url: str, model: str, feeds: dict[str, np.ndarray], output_names: list[str],
                 version: str = "", timeout_s: float = 60.0) -> dict[str, np.ndarray]:
    """Send ``feeds`` (the model's shapes) and return its outputs (the model's shapes): the model's
    config, read from the server, says which tensors the API shapes differently (reshape)."""
    from tritonclient.utils import InferenceServerException

    module = client_module(protocol)
    try:
        if protocol == "http":
            client = module.InferenceServerClient(url=url, network_timeout=timeout_s)
        else:
            client = module.InferenceServerClient(url=url)
        if not client.is_model_ready(model, version):
            raise ClientError(f"model '{model}' is not ready on {url}")
        config = (client.get_model_config(model, version) if protocol == "http"
                  else client.get_model_config(model, version, as_json=True)["config"])
        inputs, outputs = build_request(protocol, to_request_shapes(config, feeds), output_names)
        result = client.infer(model, inputs, model_version=version, outputs=outputs)
    except InferenceServerException as exc:
        raise ClientError(f"Triton at {url} ({protocol}): {exc}") from exc
    except OSError as exc:  # connection refused and similar
        raise ClientError(f"cannot reach Triton at {url} ({protocol}): {exc}") from exc
    return to_model_shapes(config, {name: result.as_numpy(name) for name in output_names})


@dataclass(frozen=True)
class Comparison:
    name: str
    max_abs: float
    max_rel: float
    ok: bool


def compare(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], atol: float, rtol: float
            ) -> list[Comparison]:
    """Per output: max |a - e|, max |a - e| / |e| (over |e| > atol, so near-zero references do not
    dominate) and whether |a - e| <= atol + rtol * |e| holds everywhere (NaN/inf never pass)."""
    results = []
    for name, exp in expected.items():
        if name not in actual or actual[name] is None:
            raise ClientError(f"the server's answer has no output '{name}'")
        act = actual[name]
        if act.shape != exp.shape:
            raise ClientError(f"output '{name}': shape {act.shape} from the server, {exp.shape} from onnxruntime")
        a = act.astype(np.float64)
        e = exp.astype(np.float64)
        diff = np.abs(a - e)
        finite = bool(np.isfinite(a).all() and np.isfinite(e).all())
        max_abs = float(diff.max()) if diff.size else 0.0
        big = np.abs(e) > atol
        max_rel = float((diff[big] / np.abs(e[big])).max()) if big.any() else 0.0
        ok = finite and bool((diff <= atol + rtol * np.abs(e)).all())
        results.append(Comparison(name, max_abs if finite else float("nan"), max_rel if finite else float("nan"), ok))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--onnx", required=True, help="the fused ONNX model the engine was built from")
    p.add_argument("--model", required=True, help="model name in the Triton repository")
    p.add_argument("--version", default="", help="model version (default: the server's choice)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--url", help="server address (default: localhost:8000 for http, localhost:8001 for grpc)")
    p.add_argument("--shape", action="append", type=parse_shape, default=[], metavar="NAME:SHAPE",
                   help="shape of an input with dynamic dimensions, e.g. latent:1x4x64x64 (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--atol", type=float, default=1e-2, help="absolute tolerance (default 1e-2: fp16 engine)")
    p.add_argument("--rtol", type=float, default=1e-2, help="relative tolerance (default 1e-2: fp16 engine)")
    args = p.parse_args(argv)
    url = args.url or ("localhost:8000" if args.protocol == "http" else "localhost:8001")
    try:
        specs, output_names = read_model_io(args.onnx)
        feeds = make_inputs(specs, dict(args.shape), args.seed)
        expected = reference_outputs(args.onnx, feeds, output_names)
    except (ClientError, OSError) as exc:
        print(f"triton_client: error: {exc}", file=sys.stderr)
        return 2
    try:
        actual = triton_infer(args.protocol, url, args.model, feeds, output_names, args.version)
    except ClientError as exc:
        print(f"triton_client: error: {exc}", file=sys.stderr)
        return 3
    results = compare(actual, expected, args.atol, args.rtol)
    print(f"{'output':<24} {'max abs err':>12} {'max rel err':>12}  result (atol {args.atol:g}, rtol {args.rtol:g})")
    for r in results:
        print(f"{r.name:<24} {r.max_abs:>12.3e} {r.max_rel:>12.3e}  {'pass' if r.ok else 'FAIL'}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
