"""The plugin through a real builder: TensorRT-RTX, which builds plans ahead of time without a GPU.

For every model: the plugin library is loaded into the builder's registry, TensorRT-RTX's ONNX
parser imports the file, every custom node becomes a plugin layer (counted in the network), a plan
is built for each target compute capability and for all of them at once, and the plugin fields
serialized into the plan equal the nodes' attributes. Models: the tiny UNet and VAE decoder from
the exporter, with the model-local function and bare; a plain export fused by `trt-gn fuse`;
TensorRT 8.5's GroupNorm node (the legacy creator); fp32, fp16 and bf16 (strongly typed); dynamic
batch, height and width. Bad nodes fail in the builder with the plugin's message naming the field,
and nothing is written.

Needs TensorRT-RTX (`pip install tensorrt-rtx-cu13-libs tensorrt-rtx-cu13-bindings`) and the plugin
library built against TensorRT 10+ headers (plugin_src/plugin/README.md); skipped with the reason
where either is missing. The runtime side (enqueue on a GPU) is the conformance harness's: these
plans run on compute capability 8.0, 8.6, 8.9 and 12.0 only.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from plan_fields import plugin_records
from trt_gn import abi, engine, spec
from trt_gn.cli import main as cli_main

TARGETS = engine.RTX_DEFAULT_TARGETS
BATCH, LATENT = engine.DimRange(1, 1, 2), engine.DimRange(8, 16, 32)


@pytest.fixture(scope="session")
def rtx():
    try:
        return engine.import_tensorrt_rtx()
    except engine.TensorRTNotInstalledError as exc:
        pytest.skip(f"{exc.message} ({exc.hint})")


@pytest.fixture(scope="session")
def plugin_library():
    try:
        return Path(abi.find_plugin_library())
    except FileNotFoundError as exc:
        pytest.skip(f"the plugin library is not built (needs TensorRT 10+ headers): {str(exc).splitlines()[0]}")


def _cli(argv):
    assert cli_main(argv) == 0, argv


def _gn_model(path: Path, dtype: int, nodes=((4, 1e-5, "silu"), (2, 1e-3, "none")), channels=8) -> Path:
    """x -> GroupNormAct -> GroupNormAct -> y (N, C, H, W dynamic but C), in one element type."""
    x = helper.make_tensor_value_info("x", dtype, ["N", channels, "H", "W"])
    y = helper.make_tensor_value_info("y", dtype, ["N", channels, "H", "W"])
    graph_nodes, inits, prev = [], [], "x"
    rng = np.random.default_rng(0)
    for i, (groups, eps, act) in enumerate(nodes):
        out = "y" if i == len(nodes) - 1 else f"h{i}"
        inits += [helper.make_tensor(f"gamma{i}", dtype, [channels], rng.uniform(0.5, 1.5, channels).tolist()),
                  helper.make_tensor(f"beta{i}", dtype, [channels], rng.uniform(-0.5, 0.5, channels).tolist())]
        graph_nodes.append(helper.make_node(spec.PLUGIN_NAME, [prev, f"gamma{i}", f"beta{i}"], [out],
                                            domain=spec.ONNX_DOMAIN, name=f"gn{i}",
                                            **engine_attrs(groups, eps, act)))
        prev = out
    model = helper.make_model(helper.make_graph(graph_nodes, "g", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(spec.ONNX_DOMAIN, 1)])
    onnx.save(model, path)
    return path


def engine_attrs(groups, eps, act) -> dict:
    return {spec.FIELD_NUM_GROUPS: groups, spec.FIELD_EPSILON: eps, spec.FIELD_ACTIVATION: act}


def _legacy_model(path: Path) -> Path:
    """TensorRT 8.5's Stable Diffusion demo node: op GroupNorm (default domain), epsilon, bSwish,
    32 groups, FP32 gamma/beta, as its ONNX files carry it."""
    c = 64
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c, "H", "W"])
    inits = [helper.make_tensor("gamma", TensorProto.FLOAT, [c], [1.0] * c),
             helper.make_tensor("beta", TensorProto.FLOAT, [c], [0.0] * c),
             helper.make_tensor("gamma2", TensorProto.FLOAT, [c], [1.0] * c),
             helper.make_tensor("beta2", TensorProto.FLOAT, [c], [0.0] * c)]
    nodes = [helper.make_node(spec.LEGACY_PLUGIN_NAME, ["x", "gamma", "beta"], ["h"], name="gn_swish",
                              **{spec.LEGACY_FIELD_EPSILON: 1e-5, spec.LEGACY_FIELD_SWISH: 1}),
             helper.make_node(spec.LEGACY_PLUGIN_NAME, ["h", "gamma2", "beta2"], ["y"], name="gn_plain",
                              **{spec.LEGACY_FIELD_EPSILON: 1e-6, spec.LEGACY_FIELD_SWISH: 0})]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """name -> ONNX file. Exports take seconds each, so they are made once a session."""
    d = tmp_path_factory.mktemp("rtx_models")
    out = {}
    for recipe in ("tiny-vae-decoder", "tiny-unet"):
        out[f"{recipe}"] = d / f"{recipe}.onnx"
        _cli(["export", recipe, str(out[recipe])])
        out[f"{recipe}-bare"] = d / f"{recipe}.bare.onnx"
        _cli(["export", recipe, str(out[f"{recipe}-bare"]), "--bare"])
    out["tiny-vae-decoder-fp16"] = d / "tiny-vae-decoder.fp16.onnx"
    _cli(["export", "tiny-vae-decoder", str(out["tiny-vae-decoder-fp16"]), "--dtype", "fp16"])
    plain = d / "tiny-vae-decoder.plain.onnx"
    _cli(["export", "tiny-vae-decoder", str(plain), "--no-swap"])
    out["tiny-vae-decoder-fused-from-plain"] = d / "tiny-vae-decoder.plain.fused.onnx"
    _cli(["fuse", str(plain), str(out["tiny-vae-decoder-fused-from-plain"])])
    out["legacy-groupnorm-v1"] = _legacy_model(d / "legacy.onnx")
    for name, dtype in (("fp32", TensorProto.FLOAT), ("fp16", TensorProto.FLOAT16), ("bf16", TensorProto.BFLOAT16)):
        out[f"two-nodes-{name}"] = _gn_model(d / f"two_nodes_{name}.onnx", dtype)
    return out


# (model, precision): the exported models are fp32 unless named fp16; strongly typed keeps their types.
CASES = [
    ("tiny-vae-decoder", "fp32"),
    ("tiny-vae-decoder-bare", "fp32"),
    ("tiny-unet", "fp32"),
    ("tiny-unet-bare", "fp32"),
    ("tiny-vae-decoder-fp16", "strongly-typed"),
    ("tiny-vae-decoder-fused-from-plain", "fp32"),
    ("legacy-groupnorm-v1", "fp32"),
    ("two-nodes-fp32", "fp32"),
    ("two-nodes-fp16", "strongly-typed"),
    ("two-nodes-bf16", "strongly-typed"),
]


def node_fields(path: Path) -> tuple[str, str, Counter]:
    """(plugin name, namespace, multiset of field tuples) of the custom nodes of the main graph, as
    the plan should hold them: ints, floats rounded to fp32, strings."""
    model = onnx.load(str(path), load_external_data=False)
    found = Counter()
    kind = None
    for n in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if (n.domain, n.op_type) == (spec.ONNX_DOMAIN, spec.PLUGIN_NAME):
            kind = (spec.PLUGIN_NAME, spec.PLUGIN_NAMESPACE)
            found[(int(attrs[spec.FIELD_NUM_GROUPS]), float(np.float32(attrs[spec.FIELD_EPSILON])),
                   attrs[spec.FIELD_ACTIVATION].decode())] += 1
        elif n.op_type == spec.LEGACY_PLUGIN_NAME and n.domain in ("", "ai.onnx"):
            kind = (spec.LEGACY_PLUGIN_NAME, spec.LEGACY_PLUGIN_NAMESPACE)
            found[(float(np.float32(attrs[spec.LEGACY_FIELD_EPSILON])), int(attrs[spec.LEGACY_FIELD_SWISH]))] += 1
    return kind[0], kind[1], found


def plan_fields(plan: Path, name: str, namespace: str) -> Counter:
    records = plugin_records(plan.read_bytes(), name, namespace)
    if name == spec.PLUGIN_NAME:
        return Counter((r.value(spec.FIELD_NUM_GROUPS), r.value(spec.FIELD_EPSILON), r.value(spec.FIELD_ACTIVATION))
                       for r in records)
    return Counter((r.value(spec.LEGACY_FIELD_EPSILON), r.value(spec.LEGACY_FIELD_SWISH)) for r in records)


def build(onnx_path: Path, plan: Path, plugin: Path, precision: str, targets) -> engine.BuildResult:
    return engine.build_engine(onnx_path, plan, engine.BuildOptions(
        builder="tensorrt-rtx", target_cc=targets, plugin_library=plugin, precision=precision,
        batch=BATCH, height=LATENT, width=LATENT, progress=False))


@pytest.mark.parametrize("name,precision", CASES, ids=[c[0] for c in CASES])
def test_plugin_layers_plans_per_target_and_fields(rtx, plugin_library, models, name, precision, tmp_path):
    onnx_path = models[name]
    plugin_name, namespace, expected = node_fields(onnx_path)
    nodes = sum(expected.values())
    assert nodes > 0
    # All targets in one plan, then one plan per target.
    for targets in [TARGETS] + [(t,) for t in TARGETS]:
        plan = tmp_path / f"{name}.{'-'.join(targets)}.plan"
        result = build(onnx_path, plan, plugin_library, precision, targets)
        assert result.builder == "tensorrt-rtx" and result.targets == targets
        assert (result.plugin_nodes, result.plugin_layers) == (nodes, nodes), "every custom node a plugin layer"
        assert plan.is_file() and plan.stat().st_size == result.plan_bytes > 0
        assert plan_fields(plan, plugin_name, namespace) == expected
        print(f"{name} [{precision}] cc {','.join(targets)}: {nodes}/{nodes} nodes -> plugin layers, "
              f"{result.plan_bytes / 2**20:.1f} MiB, {result.seconds:.1f} s")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{name}.{'-'.join(t)}.plan" for t in [TARGETS] + [(t,) for t in TARGETS]), "no temp files left"


def test_cli_build_reports_builder_targets_and_layers(rtx, plugin_library, models, tmp_path, capsys):
    plan = tmp_path / "vae.plan"
    rc = cli_main(["build", str(models["tiny-vae-decoder"]), "-o", str(plan), "--builder", "tensorrt-rtx",
                   "--target-cc", "8.6,12.0", "--batch", "1:1:2", "--height", "8:16:32", "--width", "8:16:32",
                   "--plugin", str(plugin_library), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "with TensorRT-RTX" in out and "14 of 14 trt_gn node(s) became plugin layers" in out
    assert "runs on compute capability 8.6, 12.0" in out
    assert plan.is_file()


def test_cli_target_the_builder_does_not_have_is_a_bad_argument(rtx, plugin_library, models, tmp_path, capsys):
    rc = cli_main(["build", str(models["two-nodes-fp32"]), "-o", str(tmp_path / "m.plan"), "--builder",
                   "tensorrt-rtx", "--target-cc", "9.0", "--batch", "1:1:2", "--height", "8:16:32", "--width",
                   "8:16:32", "--plugin", str(plugin_library)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "builds no plans for compute capability 9.0" in err and "8.6" in err.splitlines()[1]
    assert os.listdir(tmp_path) == []


def _bad(path: Path, **changes) -> Path:
    c = changes.pop("channels", 8)
    gamma_len = changes.pop("gamma_len", c)
    attrs = engine_attrs(4, 1e-5, "silu")
    attrs.update(changes)
    attrs = {k: v for k, v in attrs.items() if v is not None}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c, "H", "W"])
    inits = [helper.make_tensor("gamma", TensorProto.FLOAT, [gamma_len], [1.0] * gamma_len),
             helper.make_tensor("beta", TensorProto.FLOAT, [c], [0.0] * c)]
    node = helper.make_node(spec.PLUGIN_NAME, ["x", "gamma", "beta"], ["y"], domain=spec.ONNX_DOMAIN, name="gn0",
                            **attrs)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(spec.ONNX_DOMAIN, 1)])
    onnx.save(model, path)
    return path


BAD = {
    "groups-do-not-divide-C": (dict(num_groups=3), ["num_groups=3", "C=8"]),
    "unknown-activation": (dict(activation="relu"), ["'activation'", "relu"]),
    "missing-field": (dict(epsilon=None), ["'epsilon' is missing"]),
    "wrong-gamma-length": (dict(gamma_len=4), ["gamma has 4 elements", "C=8"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_node_fails_with_the_plugins_message_and_writes_nothing(rtx, plugin_library, case, tmp_path):
    changes, words = BAD[case]
    model = _bad(tmp_path / "bad.onnx", **changes)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(engine.EngineBuildError) as info:
        build(model, out / "bad.plan", plugin_library, "fp32", TARGETS)
    message = info.value.message
    # One line, from the plugin (through the builder's logger), naming the layer and the field.
    assert "\n" not in message
    assert "GroupNormAct (layer 'gn0')" in message, message
    for w in words:
        assert w in message, message
    print(f"{case}: {message}")
    assert os.listdir(out) == [], "nothing written"


def test_missing_plugin_library_is_one_clear_line(rtx, tmp_path, capsys):
    model = _gn_model(tmp_path / "m.onnx", TensorProto.FLOAT)
    rc = cli_main(["build", str(model), "-o", str(tmp_path / "m.plan"), "--builder",
                   "tensorrt-rtx", "--plugin", str(tmp_path / "nope.so"), "--batch", "1:1:2", "--height",
                   "8:16:32", "--width", "8:16:32"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and err[0].endswith(f"plugin library {tmp_path / 'nope.so'} (--plugin) does not exist")
    assert os.listdir(tmp_path) == ["m.onnx"]


def test_unversioned_library_workaround_lives_in_trt_gns_cache(rtx):
    """The parser's dlopen("libtensorrt_rtx.so") is served by trt_gn's symlink folder, whose
    libraries were loaded from there (their $ORIGIN), not by files added to the installed package."""
    folder = engine.prepare_tensorrt_rtx_loader()
    found = importlib.util.find_spec("tensorrt_rtx_libs")
    if found is None:
        pytest.skip("TensorRT-RTX is not the PyPI packaging here (no tensorrt_rtx_libs): no workaround needed")
    libs = Path(list(found.submodule_search_locations)[0])
    assert not (libs / "libtensorrt_rtx.so").exists()
    assert folder is not None and folder.is_relative_to(engine.cache_dir()) or "trt_gn-" in str(folder)
    assert (folder / "libtensorrt_rtx.so").resolve() == (libs / "libtensorrt_rtx.so.1").resolve()


# A child process: without the workaround, parsing with the plugin registered ends in std::terminate.
_PARSE = r"""
import sys
from trt_gn import engine
trt = engine.import_tensorrt_rtx()
logger = engine.make_logger(trt)
builder = trt.Builder(logger)
if len(sys.argv) > 2:
    assert builder.get_plugin_registry().load_library(sys.argv[2]) is not None
network = builder.create_network(0)
parser = trt.OnnxParser(network, logger)
if parser.parse_from_file(sys.argv[1]):
    print(f"parsed: {engine.count_plugin_layers(trt, network)} plugin layers")
else:
    print("rejected: " + parser.get_error(0).desc().splitlines()[0])
"""


def _parse_in_child(model: Path, *plugin: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(abi.__file__).parents[1]), os.environ.get("PYTHONPATH")) if p)}
    run = subprocess.run([sys.executable, "-c", _PARSE, str(model), *map(str, plugin)], capture_output=True,
                         text=True, timeout=120, env=env, cwd=model.parent)  # not the repository root
    assert run.returncode == 0, f"rc {run.returncode}: {run.stdout}{run.stderr}"
    return run.stdout.strip()


def test_plugin_nodes_parse_in_a_fresh_process(rtx, plugin_library, tmp_path):
    """The parser dlopen()s the unversioned libtensorrt_rtx.so when it imports a node through a
    registered plugin; trt_gn's loader folder makes that work with nothing added to the package."""
    out = _parse_in_child(_gn_model(tmp_path / "m.onnx", TensorProto.FLOAT), plugin_library)
    assert out == "parsed: 2 plugin layers", out


def test_plugin_node_without_the_plugin_is_a_parser_error(rtx, tmp_path):
    out = _parse_in_child(_gn_model(tmp_path / "m.onnx", TensorProto.FLOAT))
    assert out.startswith("rejected: ") and "Plugin not found" in out, out
