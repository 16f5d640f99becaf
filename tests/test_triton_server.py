"""`trt-gn triton` repositories and `trt-gn serve` in a real Triton Inference Server (tritonserver
2.51 of nvidia-pytriton 0.7.0, started by tests/tritonserver.py through trt_gn.tritonserver).

The models: the IO signatures of the SD 1.5 UNet (sample, timestep [batch], encoder_hidden_states
[batch, 77, 768]), the SDXL UNet (+ text_embeds [batch, 1280], time_ids [batch, 6]) and the SD 1.5
and SDXL VAE decoders (latent -> image), each exported by trt_gn's exporter from its recipe's
diffusers configuration with only the internal widths cut down (the keys the inputs and outputs
depend on are the recipe's; the test checks the exported signature against the full recipe's
example inputs), so that exports take seconds. The configs are written by `trt-gn triton`.

(a) Strict configs: with --disable-auto-complete-config, Triton checks each config.pbtxt as written.
Every tensorrt_plan config kind the CLI writes (batched with the dynamic batcher, unbatched,
several instances on given GPUs in another version folder) passes that check and gets as far as
"unable to find backend library for backend 'tensorrt'" (this server has no TensorRT backend); the
Python-backend ones (unbatched, batched, two instances) load and become ready; a KIND_GPU Python
model passes the config check and is refused by Triton's instance check (no GPU in this machine).
Broken configs fail with Triton's own errors: the old ``dims: [ ]`` for the UNet's [batch]
timestep ("must specify 'dims'"), a misspelt field, an unknown data type.
(b) Why strict: with auto-complete on (Triton's default) the broken ``dims: [ ]`` config also gets
as far as the backend lookup, like a valid one: there the lookup error proves nothing.
(c) Python-backend models answer: examples/triton_client.py queries each signature's unbatched and
batched model over HTTP (and two over gRPC) and compares with onnxruntime run directly; a [batch]
input goes as [batch, 1] under batching (the config's reshape).
(d) `trt-gn serve` starts the server on a Python-backend repository in a subprocess, says where it
listens once ready, answers, and stops on SIGTERM to its PID (exit 130, no server, stub or shared
memory left); the command `trt-gn triton --backend python` prints runs as printed (ports changed);
`trt-gn serve` refuses a TensorRT repository on this server, with the reason.
(e) A failed start is bounded and leaves nothing.

Needs the server unpacked by `bash scripts/setup_tritonserver.sh` (skipped with the reason
otherwise), diffusers for the exports. Engines and plugin files here are placeholder bytes: the
TensorRT backend, which would load them, is not in this server.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import tritonserver
from trt_gn import spec
from trt_gn.cli import main as cli_main
from trt_gn.engine import TensorSpec, read_onnx_io

REPO_ROOT = Path(__file__).resolve().parents[1]
CLIENT = REPO_ROOT / "examples" / "triton_client.py"
NO_BACKEND = "unable to find backend library for backend 'tensorrt'"
NO_GPU = "instance group py_gpu_sd15_vae_0 of model py_gpu_sd15_vae specifies invalid or unsupported gpu id 0"

pytestmark = pytest.mark.skipif(tritonserver.unavailable_reason() is not None,
                                reason=str(tritonserver.unavailable_reason()))

# The signatures served: recipe -> model-name stem.
SIGNATURES = {"sd15-unet": "sd15_unet", "sdxl-unet": "sdxl_unet", "sd15-vae-decoder": "sd15_vae",
              "sdxl-vae-decoder": "sdxl_vae"}
# What the inputs and outputs depend on stays the recipe's; these internal widths are cut down.
UNET_INTERNALS = dict(block_out_channels=(32, 64), layers_per_block=1, attention_head_dim=8,
                      down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                      up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), transformer_layers_per_block=1)
VAE_INTERNALS = dict(block_out_channels=(32,) * 4, layers_per_block=1)  # 4 blocks: 3 upsamplings, x8
BATCH, LATENT = 2, 16

# Every kind of config `trt-gn triton` writes: name suffix -> arguments.
TENSORRT_KINDS = {
    "batched": ["--max-batch-size", "4", "--preferred-batch-size", "2", "--preferred-batch-size", "4",
                "--max-queue-delay-us", "50"],
    "unbatched": ["--max-batch-size", "0"],
    "instances": ["--max-batch-size", "2", "--no-dynamic-batching", "--instances", "2", "--gpus", "0", "--version", "3"],
}
PYTHON_KINDS = {"py": [], "py_batched": ["--max-batch-size", "2"]}


def _cli(argv):
    assert cli_main(argv) == 0, argv


def _export_signature_model(recipe_name: str, path: Path) -> Path:
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel

    from trt_gn.onnx import export, recipes
    from trt_gn.pipeline import quiet
    from trt_gn.swap import swap_group_norms

    recipe = recipes.RECIPES[recipe_name]
    torch.manual_seed(0)
    if recipe.kind == "unet":
        model = recipes.UNetWrapper(UNet2DConditionModel(**dict(recipe.config, **UNET_INTERNALS)),
                                    sdxl="addition_embed_type" in recipe.config)
    else:
        model = recipes.VaeDecoder(AutoencoderKL(**dict(recipe.config, **VAE_INTERNALS)))
    model = model.eval()
    args, names, shapes = recipes.example_inputs(recipe_name, batch=BATCH, latent=LATENT)
    swap_group_norms(model)
    with quiet():
        export.export_model(model, args, path, dynamic_shapes=shapes, input_names=names,
                            output_names=recipe.output_names)
    return path


def _recipe_signature(recipe_name: str) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The full recipe's inputs and outputs: its example inputs, dynamic axes None; the output is
    shaped like the input image/latent with the configuration's out_channels."""
    from trt_gn.onnx import recipes

    recipe = recipes.RECIPES[recipe_name]
    args, names, shapes = recipes.example_inputs(recipe_name)
    inputs = [TensorSpec(n, "FLOAT", tuple(None if axis in dynamic else d for axis, d in enumerate(a.shape)))
              for a, n, dynamic in zip(args, names, shapes)]
    output = TensorSpec(recipe.output_names[0], "FLOAT", (None, recipe.config["out_channels"], None, None))
    return inputs, [output]


@pytest.fixture(scope="module")
def signature_models(tmp_path_factory):
    """recipe -> exported ONNX model with that recipe's inputs and outputs."""
    pytest.importorskip("diffusers", reason="diffusers is not installed (the exports need it)")
    d = tmp_path_factory.mktemp("signature_models")
    return {recipe: _export_signature_model(recipe, d / f"{stem}.onnx") for recipe, stem in SIGNATURES.items()}


def test_exported_models_carry_the_recipes_signatures(signature_models):
    for recipe, path in signature_models.items():
        assert read_onnx_io(path) == _recipe_signature(recipe), recipe
    inputs, _ = read_onnx_io(signature_models["sdxl-unet"])
    assert [t.name for t in inputs] == ["sample", "timestep", "encoder_hidden_states", "text_embeds", "time_ids"]


@pytest.fixture(scope="module")
def repository(tmp_path_factory, signature_models):
    """One model per signature and config kind, written by `trt-gn triton`, and broken copies."""
    d = tmp_path_factory.mktemp("triton_repo")
    plugin_dir = d / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / spec.PLUGIN_LIBRARY).write_bytes(b"placeholder: the server has no TensorRT backend")
    (plugin_dir / spec.PLUGIN_AUTOLOAD_LIBRARY).write_bytes(b"placeholder")
    plan = d / "model.plan"
    plan.write_bytes(b"placeholder engine")
    repo = d / "models"
    for recipe, stem in SIGNATURES.items():
        onnx_model = signature_models[recipe]
        for kind, args in TENSORRT_KINDS.items():
            _cli(["triton", str(plan), "--model", f"trt_{stem}_{kind}", "--repository", str(repo), "--onnx",
                  str(onnx_model), "--io-from", "onnx", "--plugin", str(plugin_dir / spec.PLUGIN_LIBRARY), *args])
        for kind, args in PYTHON_KINDS.items():
            _cli(["triton", str(onnx_model), "--backend", "python", "--repository", str(repo),
                  "--model", f"{kind}_{stem}", *args])
    vae = signature_models["sd15-vae-decoder"]
    _cli(["triton", str(vae), "--backend", "python", "--repository", str(repo), "--model", "py_instances_sd15_vae",
          "--max-batch-size", "2", "--instances", "2"])
    _cli(["triton", str(vae), "--backend", "python", "--repository", str(repo), "--model", "py_gpu_sd15_vae",
          "--gpus", "0"])
    # Broken copies of written configs: the old empty dims of a [batch] input, a misspelt field, a data
    # type Triton does not have.
    for name, source, old, new in (
            ("broken_dims", "trt_sd15_unet_batched", "dims: [ 1 ]\n    reshape: { shape: [ ] }", "dims: [ ]"),
            ("broken_field", "trt_sd15_vae_batched", "data_type:", "data_typo:"),
            ("broken_type", "py_sd15_vae", "TYPE_FP32", "TYPE_FP33")):
        text = (repo / source / "config.pbtxt").read_text()
        assert old in text, (source, old)
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.plan").write_bytes(b"placeholder engine")
        (repo / name / "config.pbtxt").write_text(text.replace(f'name: "{source}"', f'name: "{name}"')
                                                  .replace(old, new, 1))
    return repo


def _models(repository: Path) -> list[str]:
    return sorted(p.name for p in repository.iterdir() if not p.name.startswith("."))


def _load_all(repository: Path, log_file: Path, strict: bool = True, only=None) -> tuple[dict, str, object]:
    with tritonserver.TritonServer(repository, log_file=log_file, strict=strict) as server:
        results = {m: server.load(m) for m in (only or _models(repository))}
        log = server.log()
    print(f"\n{'strict' if strict else 'auto-complete'}: server started in {server.start_seconds:.1f} s, "
          f"stopped in {server.stop_seconds:.1f} s")
    for model, error in results.items():
        print(f"  {model}: {'READY' if error is None else error.strip()[:200]}")
    return results, log, server


def test_strict_configs_pass_and_broken_ones_fail_with_tritons_errors(repository, tmp_path):
    results, log, server = _load_all(repository, tmp_path / "server.log")
    tensorrt = [f"trt_{stem}_{kind}" for stem in SIGNATURES.values() for kind in TENSORRT_KINDS]
    python = [f"{kind}_{stem}" for stem in SIGNATURES.values() for kind in PYTHON_KINDS] + ["py_instances_sd15_vae"]
    assert set(tensorrt + python + ["py_gpu_sd15_vae", "broken_dims", "broken_field", "broken_type"]) == set(results)
    for model in tensorrt:
        # Checked as written, then the server went on to look for the TensorRT backend library.
        assert results[model] is not None and NO_BACKEND in results[model], (model, results[model])
    for model in python:
        assert results[model] is None, (model, results[model])
    # A KIND_GPU config is checked as written too; this server has no GPU, so Triton itself refuses
    # the instance (model.py's own refusal without a CUDA provider is tests/test_triton.py's).
    assert results["py_gpu_sd15_vae"] is not None and NO_GPU in results["py_gpu_sd15_vae"], results["py_gpu_sd15_vae"]
    for model in ("broken_dims", "broken_field", "broken_type"):
        assert results[model] is not None and NO_BACKEND not in results[model], (model, results[model])
    assert "model input 'timestep' must specify 'dims' for broken_dims" in log
    assert "Error parsing text-format inference.ModelConfig" in log
    assert 'no field named "data_typo"' in log and "TYPE_FP33" in log
    assert not server.pid_alive() and server.shm_leftovers() == []


def test_without_strict_mode_a_broken_config_also_reaches_the_backend_lookup(repository, tmp_path):
    results, _, _ = _load_all(repository, tmp_path / "server.log", strict=False,
                              only=["trt_sd15_unet_batched", "broken_dims"])
    assert all(error is not None and NO_BACKEND in error for error in results.values()), results


def _client(onnx_model: Path, model: str, protocol: str, url: str) -> subprocess.CompletedProcess:
    shapes = [f"{t.name}:{'x'.join(str(BATCH if d is None and axis == 0 else LATENT if d is None else d) for axis, d in enumerate(t.shape))}"
              for t in read_onnx_io(onnx_model)[0]]
    # Served by the same onnxruntime build as the reference, on the same model: the only difference
    # is the server's thread count (reduction order), far below 1e-5 for these fp32 models.
    return subprocess.run([sys.executable, str(CLIENT), "--onnx", str(onnx_model), "--model", model, "--protocol",
                           protocol, "--url", url, *[a for s in shapes for a in ("--shape", s)], "--atol", "1e-5",
                           "--rtol", "1e-5"], capture_output=True, text=True, timeout=300)


def _no_process_mentions(marker: str) -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                return False
        except OSError:
            continue
    return True


def test_python_backend_models_answer_at_every_signature(repository, signature_models, tmp_path):
    queries = [(recipe, f"{kind}_{stem}", "http") for recipe, stem in SIGNATURES.items() for kind in PYTHON_KINDS]
    queries += [("sdxl-unet", "py_batched_sdxl_unet", "grpc"), ("sd15-vae-decoder", "py_instances_sd15_vae", "grpc")]
    server = tritonserver.TritonServer(repository, log_file=tmp_path / "server.log")
    with server:
        pid = server.proc.pid
        started = time.monotonic()
        for model in sorted({m for _, m, _ in queries}):
            assert server.load(model) is None, server.log()[-2000:]
        load_seconds = time.monotonic() - started
        runs = {(m, p): _client(signature_models[r], m, p, server.http_url if p == "http" else server.grpc_url)
                for r, m, p in queries}
        assert server.shm_leftovers(), "the Python backend's shared memory is under the server's prefix"
    print(f"\nserver pid {pid}: started in {server.start_seconds:.1f} s, {len(runs)} models loaded in "
          f"{load_seconds:.1f} s, stopped in {server.stop_seconds:.1f} s")
    for (model, protocol), run in runs.items():
        print(f"--- examples/triton_client.py --model {model} --protocol {protocol} (rc {run.returncode})\n"
              f"{run.stdout.strip()}")
        assert run.returncode == 0, run.stdout + run.stderr
        assert " pass" in run.stdout and "FAIL" not in run.stdout, run.stdout
    # Stopped by its PID: no server, no stub of it, no shared memory left.
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert _no_process_mentions(server.shm_prefix)
    assert server.shm_leftovers() == []


@pytest.fixture(scope="module")
def python_repository(tmp_path_factory, signature_models):
    """A repository `trt-gn serve` can serve here: the SD 1.5 UNet on the Python backend, batched."""
    repo = tmp_path_factory.mktemp("serve") / "models"
    _cli(["triton", str(signature_models["sd15-unet"]), "--backend", "python", "--repository", str(repo),
          "--model", "unet", "--max-batch-size", "2"])
    return repo


def _wait_for_line(proc: subprocess.Popen, pattern: str, timeout: float) -> re.Match:
    """Read proc's stdout until a line matches."""
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"exited with {proc.wait()} before {pattern!r}:\n{''.join(lines)}")
        lines.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    pytest.fail(f"no {pattern!r} within {timeout} s:\n{''.join(lines)}")


def _ready(url: str, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{url}{path}", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_serve_starts_answers_and_stops_on_sigterm(python_repository, signature_models, tmp_path):
    http, grpc, metrics = tritonserver.free_ports(3)
    log = tmp_path / "serve.stderr"
    with open(log, "w") as stderr:  # the server's log: a file, so that no pipe fills up
        proc = subprocess.Popen([sys.executable, "-m", "trt_gn.cli", "serve", str(python_repository), "--http-port",
                                 str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                                 "--exit-timeout", "5"], stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env=_serve_env())
    try:
        ready = _wait_for_line(proc, r"^tritonserver is ready \(pid (\d+)\): HTTP http://127\.0\.0\.1:(\d+), "
                                     r"gRPC 127\.0\.0\.1:(\d+), metrics http://127\.0\.0\.1:(\d+)/metrics", 180)
        server_pid = int(ready.group(1))
        assert [int(p) for p in ready.groups()[1:]] == [http, grpc, metrics]
        assert _ready(f"127.0.0.1:{http}", "/v2/health/ready") and _ready(f"127.0.0.1:{http}", "/v2/models/unet/ready")
        run = _client(signature_models["sd15-unet"], "unet", "http", f"127.0.0.1:{http}")
        print(run.stdout)
        assert run.returncode == 0 and " pass" in run.stdout, run.stdout + run.stderr
        os.kill(proc.pid, signal.SIGTERM)  # stopped by its PID
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = log.read_text()
    assert code == 130, stderr[-2000:]
    assert f"stopped tritonserver (pid {server_pid})" in stderr
    with pytest.raises(ProcessLookupError):
        os.kill(server_pid, 0)
    prefix = f"trtgn_serve{proc.pid}_"
    assert _no_process_mentions(prefix) and not list(Path("/dev/shm").glob(f"{prefix}*"))
    assert not _ready(f"127.0.0.1:{http}", "/v2/health/live")


def _serve_env() -> dict:
    """This environment, with the tests' server made the one `trt-gn serve` finds."""
    return dict(os.environ, **{tritonserver.HOME_ENV: str(tritonserver.server_home())})


def test_the_command_triton_prints_serves_as_printed(python_repository, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(tritonserver.HOME_ENV, str(tritonserver.server_home()))
    onnx_model = python_repository / "unet" / "1" / "model.onnx"
    repo = tmp_path / "printed"
    _cli(["triton", str(onnx_model), "--backend", "python", "--repository", str(repo), "--model", "unet"])
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == ["serve it with:", f"  trt-gn serve {repo}"]
    assert out[3] == f"which runs the tritonserver in {tritonserver.server_home().resolve()}:"
    command = out[4].strip()
    assert command.split()[-1] == "--disable-auto-complete-config"
    http, grpc, metrics = tritonserver.free_ports(3)
    # As printed, on free ports (a repeated flag: the last one counts) and with a shared-memory prefix
    # of its own, so that what it leaves can be found.
    prefix = f"trtgn_printed{os.getpid()}_"
    log = tmp_path / "printed.log"
    with open(log, "w") as output:
        proc = subprocess.Popen(["sh", "-c", f"{command} --http-port={http} --grpc-port={grpc} "
                                             f"--metrics-port={metrics} --exit-timeout-secs=5 "
                                             f"--backend-config=python,shm-region-prefix-name={prefix}"],
                                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _ready(f"127.0.0.1:{http}", "/v2/models/unet/ready"):
            assert proc.poll() is None, f"the printed command exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the printed command's server was not ready in 120 s"
            time.sleep(0.5)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the shell and the server: its own session
            proc.wait(timeout=30)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for leftover in Path("/dev/shm").glob(f"{prefix}*"):
                leftover.unlink(missing_ok=True)


def test_serve_refuses_what_this_server_cannot_serve(repository, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(tritonserver.HOME_ENV, str(tritonserver.server_home()))
    home = tritonserver.server_home().resolve()
    tensorrt_repo = tmp_path / "trt"
    shutil.copytree(repository / "trt_sd15_vae_batched", tensorrt_repo / "vae")
    (tensorrt_repo / "vae" / "config.pbtxt").write_text(
        (tensorrt_repo / "vae" / "config.pbtxt").read_text().replace("trt_sd15_vae_batched", "vae"))
    assert cli_main(["serve", str(tensorrt_repo)]) == 3
    assert capsys.readouterr().err.splitlines() == [
        f"trt-gn serve: error: the repository's tensorrt models (vae) need Triton's tensorrt backend, which "
        f"{home}/backends does not have",
        "  hint: serve it in NVIDIA's Triton container (nvcr.io/nvidia/tritonserver), or serve the fused ONNX model "
        "with `trt-gn triton MODEL.onnx --backend python`"]
    assert cli_main(["serve", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"trt-gn serve: error: model repository {tmp_path / 'missing'} does not exist",
        "  hint: write one with `trt-gn triton`"]


def test_server_start_is_bounded_and_a_failed_start_leaves_nothing(tmp_path):
    missing = tmp_path / "no_such_repository"
    server = tritonserver.TritonServer(missing, model_control="none", start_timeout=30,
                                       log_file=tmp_path / "server.log")
    started = time.monotonic()
    with pytest.raises((RuntimeError, TimeoutError)):
        server.start()
    assert time.monotonic() - started < 45
    assert not server.pid_alive() and server.shm_leftovers() == []
