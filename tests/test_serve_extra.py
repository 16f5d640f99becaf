"""The Triton image's Python set, in a clean venv: trt_gn installed without its dependencies plus
exactly the pinned `serve` extra, the way docker/Dockerfile installs them (scripts/extra_requirements.py
reads the extra from the installed package's metadata).

There, `trt-gn build --help` and `trt-gn triton --help` run (the image runs the same at build time),
`trt-gn triton` writes a TensorRT-backend repository, `trt-gn build` checks every argument and stops
only at the missing TensorRT (the image has TensorRT's bindings; this venv does not), and a command
that needs more than the extra (`fuse`: onnx-ir) says which module is missing. torch, onnx-ir,
onnxscript and diffusers are absent from the venv: nothing imports them through a leak.

The wheel is built from this repository without its native code (`-Cwheel.cmake=false`): the
commands here load no native library. The repository write copies the plugin files it is given, so
placeholder files stand in for them (as in tests/test_triton.py), and the engine is not read
(`--io-from onnx`): what is tested is that the package set imports and runs the code.
Needs the package index (or pip's cache) that `pip install` uses: where pip cannot fetch the
build requirements from it, the tests skip with pip's reason, except on CI (CI=true), where they fail.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from trt_gn import spec

REPO = Path(__file__).resolve().parents[1]
EXTRA_REQUIREMENTS = REPO / "scripts" / "extra_requirements.py"
# Never in the image's set: what `build`/`triton` must not import.
ABSENT = ("torch", "onnx_ir", "onnxscript", "diffusers", "onnxruntime", "polygraphy")

pytestmark = pytest.mark.skipif(not (REPO / "pyproject.toml").is_file(), reason="needs the repository (pyproject.toml)")


def _run(argv, timeout=600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kwargs)


def _ok(argv, **kwargs) -> subprocess.CompletedProcess:
    proc = _run(argv, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _pyproject() -> dict:
    import tomllib  # Python >= 3.11

    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _serve_extra() -> list[str]:
    """The `serve` extra as pyproject.toml declares it."""
    return _pyproject()["project"]["optional-dependencies"]["serve"]


def _require_the_index(folder: Path) -> None:
    """Skips (fails on CI) where pip cannot fetch the build requirements, which building the wheel
    needs first: a machine without the package index, such as the GPU machine."""
    requires = _pyproject()["build-system"]["requires"]
    proc = _run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--retries", "1", "--timeout", "20",
                 "-d", folder, *requires], timeout=300)
    if proc.returncode == 0:
        return
    why = f"pip download {' '.join(requires)} failed: {(proc.stderr.strip().splitlines() or ['no message'])[-1]}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"the package index must be reachable on CI: {why}")
    pytest.skip(f"the package index is not reachable ({why})")


def _dist_name(requirement: str) -> str:
    return requirement.split("==")[0].strip().lower().replace("_", "-")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-extra")
    _require_the_index(root / "build-requirements")
    wheels = root / "wheels"
    _ok([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-Cwheel.cmake=false", "-w", wheels, REPO])
    wheel, = wheels.glob("trt_gn-*.whl")
    _ok([sys.executable, "-m", "venv", root / "venv"])  # no --system-site-packages: nothing leaks in
    python = root / "venv" / "bin" / "python"
    pip = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-input"]
    _ok(pip + [wheel])
    listed = _ok([python, EXTRA_REQUIREMENTS, "serve"]).stdout
    (root / "serve.txt").write_text(listed)
    _ok(pip + ["-r", root / "serve.txt"])
    return {"python": python, "bin": root / "venv" / "bin", "listed": listed.split(), "root": root}


def test_the_extra_is_pinned_and_listed_from_the_installed_metadata(venv):
    declared = _serve_extra()
    assert all("==" in r and ";" not in r for r in declared), f"every serve requirement pinned: {declared}"
    assert venv["listed"] == declared


def test_the_venv_holds_exactly_trt_gn_and_the_extra(venv):
    code = "import importlib.metadata as m; print('\\n'.join(sorted(d.metadata['Name'].lower().replace('_', '-') " \
           "for d in m.distributions())))"
    installed = set(_ok([venv["python"], "-c", code]).stdout.split())
    expected = {"trt-gn"} | {_dist_name(r) for r in _serve_extra()}
    assert installed - {"pip", "setuptools"} == expected  # pip (and setuptools on 3.11) come with any venv
    found = _ok([venv["python"], "-c", "import importlib.util as u, sys; "
                 f"print([m for m in {ABSENT!r} if u.find_spec(m)])"]).stdout.strip()
    assert found == "[]", f"not in the serve extra but importable in the venv: {found}"


def test_the_extra_is_closed(venv):
    """Every package of the extra has its own dependencies in it (pip check, as the image runs it)."""
    proc = _ok([venv["python"], EXTRA_REQUIREMENTS, "serve", "--check"])
    assert "the 'serve' extra is complete" in proc.stdout


@pytest.mark.parametrize("command", ["build", "triton"])
def test_help_runs(venv, command):
    proc = _ok([venv["bin"] / "trt-gn", command, "--help"], cwd=venv["root"])
    assert proc.stdout.startswith(f"usage: trt-gn {command} ")


def _onnx_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["batch", 4, "height", "width"])
    y = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 4, "height", "width"])
    graph = helper.make_graph([helper.make_node("Identity", ["latent"], ["image"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_triton_writes_a_tensorrt_repository(venv, tmp_path):
    model = _onnx_model(tmp_path / "vae.onnx")
    plan = tmp_path / "vae.plan"
    plan.write_bytes(b"placeholder engine bytes")
    plugin = tmp_path / spec.PLUGIN_LIBRARY
    plugin.write_bytes(b"placeholder plugin bytes")
    (tmp_path / spec.PLUGIN_AUTOLOAD_LIBRARY).write_bytes(b"placeholder shim bytes")
    repo = tmp_path / "models"
    proc = _ok([venv["bin"] / "trt-gn", "triton", plan, "--repository", repo, "--model", "vae", "--onnx", model,
                "--io-from", "onnx", "--plugin", plugin, "--max-batch-size", "4"], cwd=tmp_path)
    assert "vae" in proc.stdout
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file())
    assert files == sorted(["vae/1/model.plan", "vae/config.pbtxt", f"vae/{spec.PLUGIN_LIBRARY}",
                            f"vae/{spec.PLUGIN_AUTOLOAD_LIBRARY}"])
    config = (repo / "vae" / "config.pbtxt").read_text()
    assert 'platform: "tensorrt_plan"' in config and "max_batch_size: 4" in config
    assert (repo / "vae" / "1" / "model.plan").read_bytes() == plan.read_bytes()


def test_build_checks_everything_and_stops_at_tensorrt(venv, tmp_path):
    model = _onnx_model(tmp_path / "vae.onnx")
    before = hashlib.sha256(model.read_bytes()).hexdigest()
    plugin = tmp_path / spec.PLUGIN_LIBRARY
    plugin.write_bytes(b"placeholder plugin bytes")
    proc = _run([venv["bin"] / "trt-gn", "build", model, "-o", tmp_path / "vae.plan", "--plugin", plugin,
                 "--batch", "1:1:2", "--height", "8:16:32", "--width", "8:16:32"], cwd=tmp_path)
    err = proc.stderr.splitlines()
    assert proc.returncode == 3, proc.stderr
    assert err[0].startswith("trt-gn build: error: TensorRT is not installed (import tensorrt failed:"), err
    assert "--builder tensorrt-rtx" in err[1], err  # the builder that works without TensorRT and a GPU
    assert sorted(os.listdir(tmp_path)) == sorted(["vae.onnx", spec.PLUGIN_LIBRARY])
    assert hashlib.sha256(model.read_bytes()).hexdigest() == before


def test_a_command_beyond_the_extra_names_the_missing_module(venv, tmp_path):
    model = _onnx_model(tmp_path / "m.onnx")
    proc = _run([venv["bin"] / "trt-gn", "fuse", model, tmp_path / "out.onnx"], cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines()[0] == ("trt-gn fuse: error: needs the Python module 'onnx_ir', which is not "
                                           "installed"), proc.stderr
    assert not (tmp_path / "out.onnx").exists()



def test_registering_the_subcommands_imports_no_dependency():
    """`trt-gn --help` and every subcommand's start-up import no third-party package but torch (which
    `import trt_gn` imports where it is installed, to register the op): each subcommand imports its
    dependencies when it runs."""
    code = ("import sys, trt_gn.cli; trt_gn.cli.build_parser(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))")
    heavy = ["onnx", "onnx_ir", "onnxscript", "onnxruntime", "diffusers", "rich", "polygraphy", "tensorrt",
             "tensorrt_rtx", "tensorrt_rtx_bindings"]
    proc = _ok([sys.executable, "-c", code, *heavy], cwd=REPO / "tests")
    assert proc.stdout.strip() == "[]", f"imported while registering the subcommands: {proc.stdout}"
