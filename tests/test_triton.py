"""trt_gn.triton, `trt-gn triton`, `trt-gn serve`'s checks and examples/triton_client.py, without a
Triton server.

The written config.pbtxt is parsed with Triton's own model-config schema (tritonclient ships
model_config_pb2) and every field is checked, the [batch] tensors' dims [1] + reshape included. The
engine, plugin and autoload-shim files here are placeholder bytes (no TensorRT on this machine): the
tests check that they are copied into the right place, not that Triton can run them. Dims/types are
read from the ONNX model (--io-from onnx); reading them from an engine needs TensorRT and a GPU and
is not covered here. A real TensorRT-RTX plan, built here from `trt-gn export`'s tiny VAE decoder
(skipped where TensorRT-RTX or the plugin is missing), is refused with the reason. The Python
backend's model.py is the package's file: its initialize() runs with this onnxruntime (a CPU
session; a GPU instance refused without the CUDA provider), and the providers it asks for put a GPU
instance on its own device.

The client example is tested on its request construction (tritonclient's own request
encoders), response decoding (responses assembled in the KServe v2 format the server uses,
not recorded from a live server), the shapes of reshaped tensors and the comparison with
onnxruntime. The round trip through a real tritonserver, the configs loaded by it and `trt-gn serve`
are tests/test_triton_server.py's.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import trt_gn
from trt_gn import spec
from trt_gn.cli import main as cli_main
from trt_gn.engine import EngineBuildError
from trt_gn.triton import RepositoryError, RepositoryOptions, write_model_repository

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                                       reason="tritonclient[grpc] is not installed")
from google.protobuf import text_format  # noqa: E402  (comes with tritonclient's protobuf)

HAVE_TENSORRT = importlib.util.find_spec("tensorrt") is not None
REPO_ROOT = Path(__file__).resolve().parents[1]


def io_model(path: Path, in_dims=("N", 4, "H", "W"), out_dims=("N", 3, "H8", "W8"), dtype=TensorProto.FLOAT16,
             extra=False) -> Path:
    """Inputs/outputs shaped like a VAE decoder around a trt_gn node (only the IO matters here)."""
    x = helper.make_tensor_value_info("latent", dtype, list(in_dims))
    y = helper.make_tensor_value_info("images", dtype, list(out_dims))
    inputs = [x]
    if extra:
        inputs.append(helper.make_tensor_value_info("timestep", TensorProto.INT64, ["N"]))
    node = helper.make_node(spec.PLUGIN_NAME, ["latent", "g", "b"], ["images"], domain=spec.ONNX_DOMAIN,
                            num_groups=1, epsilon=1e-5, activation="silu")
    inits = [helper.make_tensor(n, dtype, [4], [1.0] * 4) for n in ("g", "b")]
    graph = helper.make_graph([node], "g", inputs, [y], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                      helper.make_opsetid(spec.ONNX_DOMAIN, 1)]), path)
    return path


@pytest.fixture
def files(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    plan = src / "vae.plan"
    plan.write_bytes(b"placeholder engine bytes " * 10)
    plugin = src / spec.PLUGIN_LIBRARY
    plugin.write_bytes(b"placeholder plugin bytes")
    autoload = src / spec.PLUGIN_AUTOLOAD_LIBRARY  # built next to the plugin, as plugin_src/plugin does
    autoload.write_bytes(b"placeholder autoload shim bytes")
    return {"onnx": io_model(src / "vae.onnx"), "plan": plan, "plugin": plugin, "autoload": autoload,
            "repo": tmp_path / "models"}


def parse_config(path: Path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def tree(folder: Path) -> dict[str, bytes]:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(folder.rglob("*"))}


def T(name):  # DataType enum value by name
    return model_config_pb2.DataType.Value(name)


def test_repository_layout_and_every_config_field(files):
    result = write_model_repository(files["repo"], "vae_decoder", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=files["onnx"], io_from="onnx", max_batch_size=4, instance_count=2,
        gpus=[0, 1], preferred_batch_sizes=[2, 4], max_queue_delay_us=250))
    model_dir = files["repo"] / "vae_decoder"
    assert tree(files["repo"]) == {
        "vae_decoder": b"<dir>",
        "vae_decoder/1": b"<dir>",
        "vae_decoder/1/model.plan": files["plan"].read_bytes(),
        "vae_decoder/config.pbtxt": (model_dir / "config.pbtxt").read_bytes(),
        f"vae_decoder/{spec.PLUGIN_LIBRARY}": files["plugin"].read_bytes(),
        f"vae_decoder/{spec.PLUGIN_AUTOLOAD_LIBRARY}": files["autoload"].read_bytes(),
    }
    assert result.model_dir == model_dir and result.io_source == "onnx" and result.max_batch_size == 4
    assert result.plugin_library == model_dir / "libtrt_gn_plugin.so"
    assert result.plugin_autoload_library == model_dir / "libtrt_gn_plugin_autoload.so"
    # Triton only dlopen()s plugins=: it gets the shim, which registers the plugin beside it.
    assert result.server_command == (f"tritonserver --model-repository={files['repo']} "
                                     f"--backend-config=tensorrt,plugins={model_dir}/libtrt_gn_plugin_autoload.so")

    config = parse_config(model_dir / "config.pbtxt")
    expected = model_config_pb2.ModelConfig(
        name="vae_decoder", platform="tensorrt_plan", max_batch_size=4, default_model_filename="model.plan",
        input=[model_config_pb2.ModelInput(name="latent", data_type=T("TYPE_FP16"), dims=[4, -1, -1])],
        output=[model_config_pb2.ModelOutput(name="images", data_type=T("TYPE_FP16"), dims=[3, -1, -1])],
        instance_group=[model_config_pb2.ModelInstanceGroup(
            count=2, kind=model_config_pb2.ModelInstanceGroup.Kind.KIND_GPU, gpus=[0, 1])],
        dynamic_batching=model_config_pb2.ModelDynamicBatching(preferred_batch_size=[2, 4],
                                                               max_queue_delay_microseconds=250),
    )
    # Message equality compares every field, set or not: nothing more, nothing less was written.
    assert config == expected
    assert [f.name for f, _ in config.ListFields()] == [
        "name", "platform", "max_batch_size", "input", "output", "instance_group", "default_model_filename",
        "dynamic_batching"]


def test_no_batching_keeps_the_batch_dimension(files):
    write_model_repository(files["repo"], "m", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=files["onnx"], io_from="onnx", max_batch_size=0))
    config = parse_config(files["repo"] / "m" / "config.pbtxt")
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [-1, 4, -1, -1] and list(config.output[0].dims) == [-1, 3, -1, -1]
    assert not config.HasField("dynamic_batching")
    assert [(g.count, g.kind, list(g.gpus)) for g in config.instance_group] == [
        (1, model_config_pb2.ModelInstanceGroup.Kind.KIND_GPU, [])]


def test_static_model_fp32_and_several_inputs(tmp_path, files):
    static = io_model(tmp_path / "s.onnx", in_dims=(1, 4, 8, 8), out_dims=(1, 3, 64, 64), dtype=TensorProto.FLOAT)
    write_model_repository(files["repo"], "s", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=static, io_from="onnx"))
    config = parse_config(files["repo"] / "s" / "config.pbtxt")
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert (config.input[0].data_type, list(config.input[0].dims)) == (T("TYPE_FP32"), [1, 4, 8, 8])

    multi = io_model(tmp_path / "u.onnx", dtype=TensorProto.BFLOAT16, extra=True)
    write_model_repository(files["repo"], "u", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=multi, io_from="onnx", max_batch_size=2))
    config = parse_config(files["repo"] / "u" / "config.pbtxt")
    # A [batch] input under batching: dims [1] in the API, reshaped to the model's [] (Triton
    # refuses empty dims; tests/test_triton_server.py shows it in the real server).
    assert [(i.name, i.data_type, list(i.dims), i.HasField("reshape"), list(i.reshape.shape))
            for i in config.input] == [("latent", T("TYPE_BF16"), [4, -1, -1], False, []),
                                       ("timestep", T("TYPE_INT64"), [1], True, [])]
    assert "    dims: [ 1 ]\n    reshape: { shape: [ ] }\n" in (files["repo"] / "u" / "config.pbtxt").read_text()


def test_batch_only_outputs_are_reshaped_and_unbatched_configs_keep_the_batch(tmp_path, files):
    scalar_out = tmp_path / "scalar_out.onnx"
    model = onnx.load(io_model(scalar_out, extra=True))
    model.graph.output.append(helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"]))
    onnx.save(model, scalar_out)
    write_model_repository(files["repo"], "b", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=scalar_out, io_from="onnx", max_batch_size=3))
    config = parse_config(files["repo"] / "b" / "config.pbtxt")
    assert [(o.name, list(o.dims), o.HasField("reshape")) for o in config.output] == [
        ("images", [3, -1, -1], False), ("score", [1], True)]
    assert list(config.output[1].reshape.shape) == []
    # Without Triton batching the batch is an ordinary dimension: [-1], no reshape.
    write_model_repository(files["repo"], "u", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=scalar_out, io_from="onnx", max_batch_size=0))
    config = parse_config(files["repo"] / "u" / "config.pbtxt")
    assert [(t.name, list(t.dims), t.HasField("reshape")) for t in [*config.input, *config.output]] == [
        ("latent", [-1, 4, -1, -1], False), ("timestep", [-1], False), ("images", [-1, 3, -1, -1], False),
        ("score", [-1], False)]


def test_names_are_quoted(tmp_path, files):
    odd = tmp_path / "odd.onnx"
    model = onnx.load(io_model(odd))
    model.graph.input[0].name = 'lat"ent\\0'
    model.graph.node[0].input[0] = 'lat"ent\\0'
    onnx.save(model, odd)
    write_model_repository(files["repo"], "odd", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=odd, io_from="onnx", max_batch_size=1))
    assert parse_config(files["repo"] / "odd" / "config.pbtxt").input[0].name == 'lat"ent\\0'


@pytest.mark.skipif(HAVE_TENSORRT, reason="TensorRT is installed: auto reads the engine")
def test_auto_without_tensorrt_reads_the_onnx_and_says_so(files):
    result = write_model_repository(files["repo"], "m", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=files["onnx"], max_batch_size=2))
    assert result.io_source == "onnx"
    assert result.notes == ["input/output dims and types read from the ONNX model: TensorRT is not installed here"]


def test_overwrite_replaces_the_whole_model_folder(files):
    opts = RepositoryOptions(plugin_library=files["plugin"], onnx=files["onnx"], io_from="onnx", max_batch_size=2)
    write_model_repository(files["repo"], "m", files["plan"], opts)
    (files["repo"] / "m" / "stale.txt").write_text("from before")
    with pytest.raises(RepositoryError, match="already exists"):
        write_model_repository(files["repo"], "m", files["plan"], opts)
    assert (files["repo"] / "m" / "stale.txt").exists()
    opts.overwrite, opts.max_batch_size = True, 1
    write_model_repository(files["repo"], "m", files["plan"], opts)
    assert sorted(p.name for p in files["repo"].iterdir()) == ["m"]  # no staging or backup folders left
    assert not (files["repo"] / "m" / "stale.txt").exists()
    assert parse_config(files["repo"] / "m" / "config.pbtxt").max_batch_size == 1


@pytest.mark.parametrize("change, message", [
    ({"model": ".hidden"}, "model name '.hidden' is not a valid folder name"),
    ({"model": "a/b"}, "model name 'a/b' is not a valid folder name"),
    ({"plan": "missing.plan"}, "does not exist"),
    ({"plan": spec.PLUGIN_LIBRARY}, "must end in .plan or .engine"),
    ({"plan": "vae.onnx"}, "vae.onnx is an ONNX model: Triton's TensorRT backend serves an engine built from it; "
                           "an ONNX model is served with --backend python (onnxruntime)"),
    ({"max_batch_size": None}, "the model's batch dimension is dynamic: give --max-batch-size"),
    ({"max_batch_size": -1}, "--max-batch-size must be in 0..2147483647"),
    ({"max_batch_size": 0, "dynamic_batching": True}, "dynamic batching needs --max-batch-size > 0"),
    ({"preferred_batch_sizes": [8]}, "preferred batch size 8 is outside 1..4"),
    ({"instance_count": 0}, "--instances must be >= 1"),
    ({"io_from": "onnx", "onnx": None}, "reading inputs/outputs from the ONNX model needs --onnx"),
    ({"plugin_library": "missing.so"}, "plugin library"),
])
def test_bad_arguments_write_nothing(files, change, message):
    src = files["plan"].parent
    change = dict(change)
    model = change.pop("model", "m")
    plan = src / change.pop("plan", "vae.plan")
    kwargs = dict(plugin_library=files["plugin"], onnx=files["onnx"], io_from="onnx", max_batch_size=4)
    kwargs.update({k: (src / v if k == "plugin_library" else v) for k, v in change.items()})
    with pytest.raises(EngineBuildError) as err:  # RepositoryError, or the plugin lookup's EngineBuildError
        write_model_repository(files["repo"], model, plan, RepositoryOptions(**kwargs))
    assert message in err.value.message
    assert not files["repo"].exists()  # not even the repository folder


def test_plugin_without_its_autoload_shim_is_refused_and_writes_nothing(tmp_path, files):
    alone = tmp_path / "alone"
    alone.mkdir()
    plugin = alone / spec.PLUGIN_LIBRARY
    plugin.write_bytes(files["plugin"].read_bytes())
    with pytest.raises(RepositoryError) as err:
        write_model_repository(files["repo"], "m", files["plan"], RepositoryOptions(
            plugin_library=plugin, onnx=files["onnx"], io_from="onnx", max_batch_size=4))
    assert err.value.message == (f"{alone.resolve()}/libtrt_gn_plugin_autoload.so does not exist: Triton loads "
                                 f"the plugin through it, so it must sit next to the plugin library "
                                 f"{plugin.resolve()}")
    assert "libtrt_gn_plugin_autoload.so" in err.value.hint
    assert not files["repo"].exists()


def test_autoload_shim_is_looked_up_only_next_to_the_plugin(tmp_path, files):
    from trt_gn import abi

    assert abi.find_plugin_autoload_library(files["plugin"]) == files["autoload"]
    elsewhere = tmp_path / "elsewhere" / spec.PLUGIN_LIBRARY
    missing = f"{elsewhere.parent}/libtrt_gn_plugin_autoload.so not found"
    with pytest.raises(abi.LibraryNotFoundError, match=re.escape(missing)):
        abi.find_plugin_autoload_library(elsewhere)


def test_batching_needs_a_dynamic_first_dimension(tmp_path, files):
    static = io_model(tmp_path / "s.onnx", in_dims=(1, 4, "H", "W"), out_dims=(1, 3, "H", "W"))
    with pytest.raises(RepositoryError, match=r"--max-batch-size 2 needs a dynamic first dimension on every "
                                              r"input and output; fixed in: latent, images"):
        write_model_repository(files["repo"], "m", files["plan"], RepositoryOptions(
            plugin_library=files["plugin"], onnx=static, io_from="onnx", max_batch_size=2))


# --- the CLI ----------------------------------------------------------------------------------

def test_triton_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["triton", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for text in ("examples:", "--backend-config=tensorrt,plugins=models/vae_decoder/libtrt_gn_plugin_autoload.so",
                 "REPOSITORY/MODEL/libtrt_gn_plugin_autoload.so", "--max-batch-size", "exit codes:"):
        assert text in out


def test_triton_cli_writes_and_prints_the_server_command(files, capsys):
    code = cli_main(["triton", str(files["plan"]), "--repository", str(files["repo"]), "--onnx", str(files["onnx"]),
                     "--plugin", str(files["plugin"]), "--io-from", "onnx", "--max-batch-size", "2",
                     "--preferred-batch-size", "2", "--gpus", "0"])
    out = capsys.readouterr().out
    assert code == 0
    config = parse_config(files["repo"] / "vae" / "config.pbtxt")  # model name defaults to the plan's stem
    assert config.name == "vae" and list(config.dynamic_batching.preferred_batch_size) == [2]
    assert f"--backend-config=tensorrt,plugins={files['repo'] / 'vae' / spec.PLUGIN_AUTOLOAD_LIBRARY}" in out
    assert (files["repo"] / "vae" / spec.PLUGIN_AUTOLOAD_LIBRARY).read_bytes() == files["autoload"].read_bytes()


def test_triton_cli_error_is_one_line_with_hint_and_exit_2(files, capsys):
    code = cli_main(["triton", str(files["plan"]), "--repository", str(files["repo"]), "--onnx", str(files["onnx"]),
                     "--plugin", str(files["plugin"]), "--io-from", "onnx"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == ["trt-gn triton: error: the model's batch dimension is dynamic: give --max-batch-size",
                   "  hint: use the MAX of --batch given to `trt-gn build` (TensorRT is not importable here to "
                   "read it from the engine)"]
    assert not files["repo"].exists()


def test_triton_cli_onnx_without_python_backend_says_how_to_serve_it(files, capsys):
    before = files["onnx"].read_bytes()
    code = cli_main(["triton", str(files["onnx"]), "--repository", str(files["repo"])])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trt-gn triton: error: {files['onnx']} is an ONNX model: Triton's TensorRT backend serves an engine built "
        f"from it; an ONNX model is served with --backend python (onnxruntime)",
        f"  hint: `trt-gn triton {files['onnx']} --backend python --repository {files['repo']}`, or build an engine "
        f"first: `trt-gn build {files['onnx']}` and pass the .plan"]
    assert not files["repo"].exists() and files["onnx"].read_bytes() == before


@pytest.mark.skipif(HAVE_TENSORRT, reason="TensorRT is installed")
def test_triton_cli_io_from_engine_without_tensorrt_exits_3(files, capsys):
    code = cli_main(["triton", str(files["plan"]), "--repository", str(files["repo"]), "--plugin",
                     str(files["plugin"]), "--io-from", "engine"])
    assert code == 3
    assert "TensorRT is not installed" in capsys.readouterr().err
    assert not files["repo"].exists()


# --- examples/triton_client.py ------------------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    path = REPO_ROOT / "examples" / "triton_client.py"
    module_spec = importlib.util.spec_from_file_location("triton_client_example", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # dataclasses look their module up here
    module_spec.loader.exec_module(module)
    return module


@pytest.fixture
def standard_model(tmp_path):
    """GroupNorm+SiLU in standard ONNX ops (what the fused node's local function computes)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, "H", "W"])
    rng = np.random.default_rng(1)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), n) for n in ("s", "b")]
    nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], ["n"], num_groups=4, epsilon=1e-5),
             helper.make_node("Sigmoid", ["n"], ["sig"]), helper.make_node("Mul", ["n", "sig"], ["y"])]
    graph = helper.make_graph(nodes, "gn", [x], [y], initializer=inits)
    path = tmp_path / "gn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return path


def test_client_inputs_are_seeded_and_shaped(client, standard_model):
    specs, outputs = client.read_model_io(str(standard_model))
    assert outputs == ["y"]
    a = client.make_inputs(specs, {"x": (2, 8, 4, 4)}, seed=7)
    b = client.make_inputs(specs, {"x": (2, 8, 4, 4)}, seed=7)
    assert a["x"].shape == (2, 8, 4, 4) and a["x"].dtype == np.float32 and np.array_equal(a["x"], b["x"])
    with pytest.raises(client.ClientError, match=r"input 'x' has dynamic dimensions \[2, 3\]: give --shape x:SHAPE"):
        client.make_inputs(specs, {}, seed=0)
    with pytest.raises(client.ClientError, match="does not fit the model's"):
        client.make_inputs(specs, {"x": (2, 3, 4, 4)}, seed=0)


def test_http_request_and_response_round_trip(client, standard_model):
    import tritonclient.http as httpclient

    specs, outputs = client.read_model_io(str(standard_model))
    feeds = client.make_inputs(specs, {"x": (1, 8, 4, 4)}, seed=0)
    expected = client.reference_outputs(str(standard_model), feeds, outputs)
    inputs, requested = client.build_request("http", feeds, outputs)

    body, header_length = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=requested)
    header = json.loads(body[:header_length])
    assert header["inputs"] == [{"name": "x", "shape": [1, 8, 4, 4], "datatype": "FP32",
                                 "parameters": {"binary_data_size": feeds["x"].nbytes}}]
    assert header["outputs"] == [{"name": "y", "parameters": {"binary_data": True}}]
    assert body[header_length:] == feeds["x"].tobytes()

    # The server's answer in the same binary-tensor format, carrying onnxruntime's output.
    y = expected["y"]
    response_header = json.dumps({"model_name": "gn", "model_version": "1", "outputs": [
        {"name": "y", "datatype": "FP32", "shape": list(y.shape), "parameters": {"binary_data_size": y.nbytes}}]}
    ).encode()
    result = httpclient.InferenceServerClient.parse_response_body(response_header + y.tobytes(),
                                                                  header_length=len(response_header))
    actual = {"y": result.as_numpy("y")}
    [ok] = client.compare(actual, expected, atol=1e-6, rtol=1e-6)
    assert ok == client.Comparison("y", 0.0, 0.0, True)


def test_grpc_request_and_response_round_trip(client, standard_model):
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc import service_pb2
    from tritonclient.grpc._utils import _get_inference_request

    specs, outputs = client.read_model_io(str(standard_model))
    feeds = client.make_inputs(specs, {"x": (2, 8, 2, 3)}, seed=3)
    inputs, requested = client.build_request("grpc", feeds, outputs)
    request = _get_inference_request(model_name="gn", inputs=inputs, model_version="", request_id="",
                                     outputs=requested, sequence_id=0, sequence_start=False, sequence_end=False,
                                     priority=0, timeout=None, parameters=None)
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [("x", "FP32", [2, 8, 2, 3])]
    assert list(request.raw_input_contents) == [feeds["x"].tobytes()]
    assert [o.name for o in request.outputs] == ["y"]

    expected = client.reference_outputs(str(standard_model), feeds, outputs)
    served = expected["y"].copy()
    served.flat[5] += 0.5  # a wrong element: the comparison must catch it and report its size
    response = service_pb2.ModelInferResponse(model_name="gn", model_version="1")
    out = response.outputs.add()
    out.name, out.datatype = "y", "FP32"
    out.shape.extend(served.shape)
    response.raw_output_contents.append(served.tobytes())
    actual = {"y": grpcclient.InferResult(response).as_numpy("y")}
    [result] = client.compare(actual, expected, atol=1e-3, rtol=1e-3)
    assert result.name == "y" and not result.ok
    assert result.max_abs == pytest.approx(0.5, abs=1e-6)


def test_compare_rejects_nan_and_shape_mismatch(client):
    expected = {"y": np.ones((2, 2), np.float32)}
    bad = np.ones((2, 2), np.float32)
    bad[0, 0] = np.nan
    [result] = client.compare({"y": bad}, expected, atol=1.0, rtol=1.0)
    assert not result.ok
    with pytest.raises(client.ClientError, match=r"output 'y': shape \(4,\) from the server, \(2, 2\) from onnxruntime"):
        client.compare({"y": np.ones(4, np.float32)}, expected, atol=1.0, rtol=1.0)
    with pytest.raises(client.ClientError, match="the server's answer has no output 'y'"):
        client.compare({}, expected, atol=1.0, rtol=1.0)


def test_client_without_server_exits_3(client, standard_model, capsys):
    # Port 9 (discard) on localhost: nothing listens there; the client must say it cannot reach Triton.
    code = client.main(["--onnx", str(standard_model), "--model", "gn", "--shape", "x:1x8x4x4",
                        "--protocol", "http", "--url", "127.0.0.1:9"])
    assert code == 3
    assert "triton_client: error:" in capsys.readouterr().err


# ---- the Python-backend repository (served for real in tests/test_triton_server.py) ---------------------

def _function_model(path: Path, bare: bool = False) -> Path:
    """A fused model as the exporter writes it: the trt_gn node with (or, bare, without) its function."""
    from trt_gn.onnx.node import make_function

    x = helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["N", 4, "H", "W"])
    y = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 4, "H", "W"])
    node = helper.make_node(spec.PLUGIN_NAME, ["latent", "g", "b"], ["images"], domain=spec.ONNX_DOMAIN,
                            name="gn0", num_groups=2, epsilon=1e-5, activation="silu")
    inits = [helper.make_tensor(n, TensorProto.FLOAT, [4], [1.0] * 4) for n in ("g", "b")]
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(spec.ONNX_DOMAIN, 1)],
                              functions=[] if bare else [make_function(18)])
    onnx.save(model, path)
    return path


def test_python_repository_layout_and_config(tmp_path):
    from trt_gn.triton import python_model_source, write_python_repository

    model = _function_model(tmp_path / "m.onnx")
    result = write_python_repository(tmp_path / "repo", "vae", model)
    assert sorted(str(p.relative_to(result.model_dir)) for p in result.model_dir.rglob("*")) == [
        "1", "1/model.onnx", "1/model.py", "config.pbtxt"]
    config = text_format.Parse(result.config.read_text(), model_config_pb2.ModelConfig())
    assert config.backend == "python" and config.platform == "" and config.max_batch_size == 0
    assert [tuple(i.dims) for i in config.input] == [(-1, 4, -1, -1)]
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    # model.py is the package's file, copied as is.
    shipped = Path(trt_gn.__file__).parent / "triton_models" / "onnxruntime_model.py"
    assert result.model_py.read_text() == python_model_source() == shipped.read_text()
    assert result.onnx.read_bytes() == model.read_bytes() or onnx.load(str(result.onnx)).graph.node[0].op_type == spec.PLUGIN_NAME


def test_python_repository_refuses_a_bare_model_and_writes_nothing(tmp_path):
    from trt_gn.triton import write_python_repository

    model = _function_model(tmp_path / "bare.onnx", bare=True)
    with pytest.raises(RepositoryError, match="without its model-local function"):
        write_python_repository(tmp_path / "repo", "vae", model)
    assert not (tmp_path / "repo").exists()


def test_cli_python_backend(tmp_path, capsys):
    model = _function_model(tmp_path / "m.onnx")
    assert cli_main(["triton", str(model), "--backend", "python", "--repository", str(tmp_path / "r"),
                     "--model", "m", "--max-batch-size", "2"]) == 0
    assert "Python backend" in capsys.readouterr().out
    config = text_format.Parse((tmp_path / "r" / "m" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.max_batch_size == 2 and config.HasField("dynamic_batching")
    assert cli_main(["triton", str(model), "--backend", "python", "--repository", str(tmp_path / "r2"),
                     "--onnx", str(model)]) == 2
    assert "belong to the TensorRT backend" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists()


# ---- model.py: where the Python backend's instances run ------------------------------------------------

@pytest.fixture(scope="module")
def model_py():
    """trt_gn/triton_models/onnxruntime_model.py, imported as Triton's stub would (it needs
    triton_python_backend_utils only to answer requests, not to set up)."""
    path = Path(trt_gn.__file__).parent / "triton_models" / "onnxruntime_model.py"
    module_spec = importlib.util.spec_from_file_location("trt_gn_model_py", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_model_py_places_instances_on_their_kind_and_device(model_py):
    cuda, cpu = "CUDAExecutionProvider", "CPUExecutionProvider"
    assert model_py.session_providers("CPU", 0, [cuda, cpu]) == [cpu]
    assert model_py.session_providers("GPU", 3, [cuda, cpu]) == [(cuda, {"device_id": 3}), cpu]
    with pytest.raises(model_py.InstanceError, match=r"^a KIND_GPU instance needs onnxruntime's CUDAExecutionProvider, "
                                                     r"which this server's onnxruntime does not have \(it has "
                                                     r"CPUExecutionProvider\): install onnxruntime-gpu"):
        model_py.session_providers("GPU", 0, [cpu])
    with pytest.raises(model_py.InstanceError, match="instance kind 'MODEL' is not supported"):
        model_py.session_providers("MODEL", 0, [cpu])


def test_model_py_initialize_with_this_onnxruntime(model_py, tmp_path):
    """The real initialize() over a repository written here: a CPU instance gets a CPU session; a GPU
    instance refuses to load where onnxruntime has no CUDA provider, rather than run on the CPU."""
    import onnxruntime as ort

    from trt_gn.triton import write_python_repository

    result = write_python_repository(tmp_path / "repo", "m", _function_model(tmp_path / "m.onnx"))
    config = json.dumps({"output": [{"name": "images"}]})
    args = {"model_repository": str(result.model_dir), "model_version": "1", "model_config": config,
            "model_instance_kind": "CPU", "model_instance_device_id": "0"}
    cpu = model_py.TritonPythonModel()
    cpu.initialize(args)
    assert cpu.session.get_providers() == ["CPUExecutionProvider"] and cpu.inputs == ["latent"]
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider: the refusal cannot be shown here")
    with pytest.raises(model_py.InstanceError, match="a KIND_GPU instance needs onnxruntime's CUDAExecutionProvider"):
        model_py.TritonPythonModel().initialize(dict(args, model_instance_kind="GPU", model_instance_device_id="1"))


# ---- TensorRT-RTX plans ------------------------------------------------------------------------------

def test_rtx_header_rule_reads_only_the_header(tmp_path):
    from trt_gn.triton import tensorrt_rtx_plan_version

    cases = {"rtx": b"vtrt" + bytes(20) + bytes([1, 7, 1, 116]) + bytes(16), "tensorrt": b"ftrt" + bytes(40),
             "vtrt-with-a-tensorrt-version": b"vtrt" + bytes(20) + bytes([10, 16, 0, 1]) + bytes(16),
             "short": b"vtrt" + bytes(4), "text": b"placeholder engine bytes " * 4}
    found = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        found[name] = tensorrt_rtx_plan_version(tmp_path / name)
    assert found == {"rtx": "1.7.1.116", "tensorrt": None, "vtrt-with-a-tensorrt-version": None, "short": None,
                     "text": None}


def test_triton_refuses_a_real_tensorrt_rtx_plan(tmp_path, capsys):
    """A plan built here by TensorRT-RTX from `trt-gn export`'s tiny VAE decoder is refused with the
    reason, nothing written, the plan untouched."""
    import hashlib

    from trt_gn import abi, engine
    from trt_gn.triton import tensorrt_rtx_plan_version

    try:
        rtx = engine.import_tensorrt_rtx()
    except engine.TensorRTNotInstalledError as exc:
        pytest.skip(f"{exc.message} ({exc.hint})")
    try:
        plugin = abi.find_plugin_library()
    except FileNotFoundError as exc:
        pytest.skip(f"the plugin library is not built: {str(exc).splitlines()[0]}")
    pytest.importorskip("diffusers", reason="diffusers is not installed (the export needs it)")
    model, plan, repo = tmp_path / "vae.onnx", tmp_path / "vae.plan", tmp_path / "models"
    assert cli_main(["export", "tiny-vae-decoder", str(model)]) == 0
    # The exporter names the output for what it is, not after the op that makes it.
    assert [o.name for o in onnx.load(str(model), load_external_data=False).graph.output] == ["image"]
    assert cli_main(["build", str(model), "-o", str(plan), "--builder", "tensorrt-rtx", "--plugin", str(plugin),
                     "--batch", "1:1:2", "--height", "8:16:16", "--width", "8:16:16", "--no-progress"]) == 0
    capsys.readouterr()
    assert tensorrt_rtx_plan_version(plan) == rtx.__version__
    digest = hashlib.sha256(plan.read_bytes()).hexdigest()
    code = cli_main(["triton", str(plan), "--repository", str(repo), "--onnx", str(model), "--io-from", "onnx",
                     "--max-batch-size", "2", "--plugin", str(plugin)])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"trt-gn triton: error: engine {plan} is a TensorRT-RTX plan (TensorRT-RTX {rtx.__version__}): Triton's "
        f"TensorRT backend deserializes TensorRT plans only, so it cannot load this model",
        "  hint: serve the fused ONNX model with `trt-gn triton MODEL.onnx --backend python`, or build a TensorRT "
        "engine with `trt-gn build --builder tensorrt` on a GPU"]
    assert not repo.exists() and hashlib.sha256(plan.read_bytes()).hexdigest() == digest


# ---- the client's shapes for reshaped tensors -----------------------------------------------------------

@pytest.mark.parametrize("dims", [[1], ["1"]])  # HTTP's JSON has numbers, gRPC's as_json strings
def test_client_sends_batch_only_tensors_as_the_config_says(client, dims):
    config = {"max_batch_size": "4" if dims == ["1"] else 4,
              "input": [{"name": "sample", "dims": [4, -1, -1]}, {"name": "timestep", "dims": dims, "reshape": {}}],
              "output": [{"name": "noise_pred", "dims": [4, -1, -1]}, {"name": "score", "dims": dims,
                                                                      "reshape": {"shape": []}}]}
    feeds = {"sample": np.zeros((3, 4, 2, 2), np.float32), "timestep": np.arange(3, dtype=np.float32)}
    sent = client.to_request_shapes(config, feeds)
    assert sent["sample"] is feeds["sample"] and sent["timestep"].shape == (3, 1)
    assert np.array_equal(sent["timestep"][:, 0], feeds["timestep"])
    answered = client.to_model_shapes(config, {"noise_pred": np.ones((3, 4, 2, 2)), "score": np.ones((3, 1))})
    assert answered["noise_pred"].shape == (3, 4, 2, 2) and answered["score"].shape == (3,)
    unbatched = dict(config, max_batch_size=0)
    unbatched["input"] = [{"name": "timestep", "dims": [-1]}]
    assert client.to_request_shapes(unbatched, {"timestep": feeds["timestep"]})["timestep"].shape == (3,)


# ---- trt-gn serve without a server -------------------------------------------------------------------------

def test_serve_help_and_a_home_without_a_server(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["serve", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for text in ("--print-command", "--disable-auto-complete-config", "scripts/setup_tritonserver.sh",
                 "Ctrl-C", "exit codes:"):
        assert text in out
    repo = tmp_path / "models"
    repo.mkdir()
    assert cli_main(["serve", str(repo), "--home", str(tmp_path / "nowhere")]) == 3
    assert capsys.readouterr().err.splitlines() == [
        f"trt-gn serve: error: --home {tmp_path / 'nowhere'}: no bin/tritonserver there",
        "  hint: give the folder that holds bin/tritonserver, or run `bash scripts/setup_tritonserver.sh DIR`"]
    assert cli_main(["serve", str(repo), "--http-port", "8000", "--grpc-port", "8000"]) == 2
    assert "trt-gn serve: error: the HTTP, gRPC and metrics ports must differ, got 8000, 8000, 8002" in \
        capsys.readouterr().err


def test_plugin_shims_reach_the_tensorrt_backend_once_per_distinct_file(tmp_path, files):
    from trt_gn import tritonserver

    repo = tmp_path / "models"
    for name in ("a", "b"):
        write_model_repository(repo, name, files["plan"], RepositoryOptions(
            plugin_library=files["plugin"], onnx=files["onnx"], io_from="onnx", max_batch_size=2))
    (repo / "b" / spec.PLUGIN_AUTOLOAD_LIBRARY).write_bytes(b"another build of the shim")
    write_model_repository(repo, "c", files["plan"], RepositoryOptions(
        plugin_library=files["plugin"], onnx=files["onnx"], io_from="onnx", max_batch_size=2))
    models = tritonserver.scan_repository(repo)
    assert models.tensorrt == ("a", "b", "c") and models.python == ()
    assert models.plugin_shims == (repo / "a" / spec.PLUGIN_AUTOLOAD_LIBRARY, repo / "b" / spec.PLUGIN_AUTOLOAD_LIBRARY)
    assert tritonserver.container_command(repo) == (
        f"tritonserver --model-repository={repo} '--backend-config=tensorrt,plugins="
        f"{repo}/a/{spec.PLUGIN_AUTOLOAD_LIBRARY};{repo}/b/{spec.PLUGIN_AUTOLOAD_LIBRARY}'")
