"""`trt-gn pipeline` end to end on the embedded default (tiny diffusers VAE decoder, seeded random
weights, no download), run as a user runs it, plus its refusals: a non-empty output folder, and a
failure in the middle of the run, which must leave nothing behind."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx
import pytest
import torch

pytest.importorskip("diffusers", reason="diffusers is not installed (pip install diffusers)")

from cli_helpers import run_cli, snapshot  # noqa: E402  (tests/ is on sys.path)

from trt_gn import pipeline, spec  # noqa: E402


def _tensorrt_importable() -> bool:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return False
    return True


def _rtx_and_plugin() -> bool:
    """TensorRT-RTX importable and the plugin library found: the pipeline builds with TensorRT-RTX."""
    import importlib.util

    from trt_gn import abi

    if not any(importlib.util.find_spec(m) for m in ("tensorrt_rtx", "tensorrt_rtx_bindings")):
        return False
    try:
        abi.find_plugin_library()
    except FileNotFoundError:
        return False
    return True


@pytest.mark.skipif(_tensorrt_importable() or not _rtx_and_plugin(),
                    reason="needs TensorRT-RTX and the plugin library, and no TensorRT (which would build instead)")
def test_tensorrt_rtx_engine_in_the_report(runs, report):
    engine = report["engine"]
    assert engine["builder"] == "tensorrt-rtx" and engine["targets"] == ["8.0", "8.6", "8.9", "12.0"]
    assert engine["plugin_layers"] == engine["plugin_nodes"] == 14  # the tiny VAE decoder's GroupNorms
    assert (runs["default_dir"] / "trt-gn-out" / engine["plan"]).stat().st_size == engine["bytes"]
    text = (runs["default_dir"] / "trt-gn-out" / "report.md").read_text()
    assert "TensorRT-RTX 1." in text and "for compute capability 8.0, 8.6, 8.9, 12.0" in text
    assert report["environment"]["tensorrt_rtx"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three processes at once: the default run (no arguments at all), a second run into the folder
    the first one fills (started once that one is done), and a run that fails mid-way."""
    root = tmp_path_factory.mktemp("pipeline")
    default_dir, broken_dir = root / "default", root / "broken"
    default_dir.mkdir()
    broken_dir.mkdir()
    # Not a state dict: loading it fails inside the run, after the staging folder exists.
    (broken_dir / "weights.bin").write_bytes(b"this is not a pickled state dict\n")

    with ThreadPoolExecutor(max_workers=2) as pool:
        broken = pool.submit(run_cli, ["pipeline", "--weights", "weights.bin", "--out", "out"], broken_dir)
        default = run_cli(["pipeline"], default_dir)
        before_again = snapshot(default_dir)
        again = run_cli(["pipeline"], default_dir)
        after_again = snapshot(default_dir)
        broken = broken.result()
    return dict(default=default, default_dir=default_dir, again=again, before_again=before_again,
                after_again=after_again, broken=broken, broken_dir=broken_dir)


@pytest.fixture(scope="module")
def report(runs):
    assert runs["default"].returncode == 0, runs["default"].stdout + runs["default"].stderr
    return json.loads((runs["default_dir"] / "trt-gn-out" / "report.json").read_text())


def test_default_run_writes_a_complete_folder(runs, report):
    out = runs["default_dir"] / "trt-gn-out"
    name = pipeline.DEFAULT_MODEL
    assert sorted(os.listdir(runs["default_dir"])) == ["trt-gn-out"]  # no staging folder left
    assert {f"{name}.onnx", f"{name}.fused.onnx", "report.md", "report.json"} <= set(os.listdir(out))
    assert sorted(report["files"]) == sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert report["model"] == name and report["weights"] == "random (seeded)"
    assert report["passed"] is True
    assert runs["default"].stdout.rstrip().splitlines()[-1].startswith("PASSED: wrote trt-gn-out/")


def test_fused_count_equals_group_norm_count(runs, report):
    out = runs["default_dir"] / "trt-gn-out"
    name = pipeline.DEFAULT_MODEL
    fusion = report["fusion"]
    n_gn = report["group_norms"]["count"]
    assert n_gn == len(report["group_norms"]["calls"]) > 0
    assert fusion["fused"] == fusion["group_norms"] == n_gn and fusion["left"] == []
    # Independent of the report: the files themselves. The plain export holds one
    # InstanceNormalization per GroupNorm (torch's opset-18 form); the fused model has none left.
    original = onnx.load(str(out / f"{name}.onnx"))
    fused = onnx.load(str(out / f"{name}.fused.onnx"))
    assert sum(n.op_type == "InstanceNormalization" for n in original.graph.node) == n_gn
    # the output named by the recipe (not after the op that makes it), through the fusion too
    assert [o.name for o in original.graph.output] == [o.name for o in fused.graph.output] == ["image"]
    nodes = [n for n in fused.graph.node if n.domain == spec.ONNX_DOMAIN and n.op_type == spec.PLUGIN_NAME]
    assert len(nodes) == n_gn
    assert not [n for n in fused.graph.node if n.op_type in ("InstanceNormalization", "GroupNormalization")]
    silu = sum(onnx.helper.get_node_attr_value(n, spec.FIELD_ACTIVATION) == b"silu" for n in nodes)
    assert silu == fusion["with_silu"] > 0
    # the tiny VAE decoder: 32 groups, eps 1e-6 everywhere
    assert {(c["num_groups"], c["eps"]) for c in report["group_norms"]["calls"]} == {(32, 1e-6)}


def test_validation_passed_per_output(report):
    validation = report["validation"]
    assert validation["passed"] is True
    cases = {c["shape_case"] for c in validation["comparisons"]}
    assert cases == {"(1,4,8,8)", "(2,4,16,16)"}  # pipeline.SHAPE_CASES
    for c in validation["comparisons"]:
        assert c["passed"] and c["dtype"] == "float32"
        assert 0 <= c["max_abs"] <= c["atol"] and c["max_rel"] >= 0
        assert c["provider"] in ("CPU", "CUDA")


def test_steps_and_skips_named_with_reasons(runs, report):
    steps = {s["name"]: s for s in report["steps"]}
    for name in (pipeline.STEP_MODEL, pipeline.STEP_EXPORT, pipeline.STEP_FUSE, pipeline.STEP_VALIDATE):
        assert steps[name]["status"] == "ok", steps[name]
        assert steps[name]["seconds"] >= 0
    gpu_steps = (pipeline.STEP_KERNEL,)
    trt_steps = (pipeline.STEP_ENGINE, pipeline.STEP_TRT_COMPARE, pipeline.STEP_TRITON)
    skipped = {s["step"]: s["reason"] for s in report["skipped"]}
    stdout = runs["default"].stdout
    if not torch.cuda.is_available():
        assert skipped[pipeline.STEP_KERNEL] == "no CUDA GPU (torch.cuda.is_available() is False)"
        assert report["kernel_check"] is None
    else:
        assert steps[pipeline.STEP_KERNEL]["status"] == "ok", steps[pipeline.STEP_KERNEL]
    if not _tensorrt_importable() and _rtx_and_plugin():
        # TensorRT-RTX built the engine ahead of time; it is not run here, nor served by Triton's TensorRT backend.
        assert steps[pipeline.STEP_ENGINE]["status"] == "ok", steps[pipeline.STEP_ENGINE]
        for name in (pipeline.STEP_TRT_COMPARE, pipeline.STEP_TRITON):
            assert skipped[name].startswith("TensorRT is not installed"), skipped[name]
        assert report["tensorrt_comparison"] is None
    elif not _tensorrt_importable():
        for name in trt_steps:
            assert skipped[name].startswith("TensorRT is not installed"), skipped[name]
        assert report["engine"] is None and report["tensorrt_comparison"] is None
    for name in gpu_steps + trt_steps:
        if name in skipped:
            # one line on stdout per skipped step, with its reason
            assert f"skipped {name}: {skipped[name]}" in stdout.splitlines()
            assert f"- {name}: {skipped[name]}" in (runs["default_dir"] / "trt-gn-out" / "report.md").read_text()


def test_report_md(runs, report):
    text = (runs["default_dir"] / "trt-gn-out" / "report.md").read_text()
    assert text.startswith(f"# trt-gn pipeline: {pipeline.DEFAULT_MODEL}")
    assert "**PASSED**" in text
    n = report["group_norms"]["count"]
    assert f"fused {n} of {n} GroupNorms" in text
    for c in report["validation"]["comparisons"]:
        assert f"| {c['output']} | {c['dtype']} | {c['max_abs']:.3e} |" in text
    for s in report["steps"]:
        assert f"| {s['name']} | {s['status']} |" in text


def test_refuses_a_non_empty_output_folder(runs):
    proc = runs["again"]
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0] == "trt-gn pipeline: error: output folder trt-gn-out is not empty", proc.stderr
    assert lines[1:] == ["  hint: pass --overwrite to replace it, or choose another --out"]
    assert runs["after_again"] == runs["before_again"]  # untouched, nothing added next to it


def test_failure_mid_run_leaves_nothing(runs):
    proc = runs["broken"]
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 2 and lines[1].startswith("  hint: --weights must be a local diffusers model folder"), proc.stderr
    assert lines[0] == ("trt-gn pipeline: error: weights.bin: not a torch.save file (neither a zip archive nor a "
                        "pickle)"), proc.stderr
    assert sorted(os.listdir(runs["broken_dir"])) == ["weights.bin"]  # no out/, no staging folder


# --- the folder swap, in process ------------------------------------------------------------


def _folder(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def test_publish_into_a_new_or_empty_folder(tmp_path):
    stage = _folder(tmp_path / ".stage", {"report.md": "new"})
    pipeline.publish_folder(stage, tmp_path / "out", overwrite=False)
    assert sorted(os.listdir(tmp_path)) == ["out"] and (tmp_path / "out" / "report.md").read_text() == "new"
    stage = _folder(tmp_path / ".stage2", {"report.md": "newer"})
    (tmp_path / "empty").mkdir()
    pipeline.publish_folder(stage, tmp_path / "empty", overwrite=False)
    assert (tmp_path / "empty" / "report.md").read_text() == "newer"


def test_publish_overwrite_replaces_everything(tmp_path):
    out = _folder(tmp_path / "out", {"old.onnx": "old", "report.md": "old"})
    stage = _folder(tmp_path / ".stage", {"report.md": "new"})
    with pytest.raises(pipeline.PipelineError, match="was filled while the pipeline ran"):
        pipeline.publish_folder(stage, out, overwrite=False)
    assert sorted(os.listdir(out)) == ["old.onnx", "report.md"]
    pipeline.publish_folder(stage, out, overwrite=True)
    assert sorted(os.listdir(out)) == ["report.md"] and (out / "report.md").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["out"]  # neither the stage nor the old folder is left


def test_check_options_refusals(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    cases = [
        (dict(out=tmp_path / "full"), "is not empty"),
        (dict(out=tmp_path / "file"), "exists and is not a folder"),
        (dict(out=tmp_path / "missing" / "out"), "does not exist or is not a folder"),
        (dict(model="sd99-unet", out=tmp_path / "o"), "unknown model 'sd99-unet'"),
        (dict(precision="fp8", out=tmp_path / "o"), "unknown precision 'fp8'"),
        (dict(plugin_library=tmp_path / "nope.so", out=tmp_path / "o"), "plugin library"),
    ]
    for kwargs, message in cases:
        with pytest.raises(pipeline.PipelineError, match=message):
            pipeline.check_options(pipeline.PipelineOptions(**kwargs))
    assert pipeline.check_options(pipeline.PipelineOptions(out=tmp_path / "full", overwrite=True)) == tmp_path / "full"
    assert sorted(os.listdir(tmp_path)) == ["file", "full"]
