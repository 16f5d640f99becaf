"""`trt-gn triton` repositories in a real Triton Inference Server (tests/tritonserver.py).

(a) Every kind of config.pbtxt that `trt-gn triton` writes is loaded by the server. This server
build (nvidia-pytriton 0.7.0, tritonserver 2.51) has no TensorRT backend, so a tensorrt_plan model
gets as far as "unable to find backend library for backend 'tensorrt'", which Triton reports only
after it has parsed and validated the config; a broken config fails earlier, at parsing, and the
test shows both. Python-backend models load and become ready.
(b) A fused ONNX model served by `trt-gn triton --backend python` (onnxruntime in the Python
backend) is queried by examples/triton_client.py over HTTP and gRPC; the client compares the
answer with onnxruntime run directly.

Needs the server unpacked by `bash scripts/setup_tritonserver.sh` (skipped with the reason
otherwise) and, for the Python backend, onnxruntime and numpy in the Python whose libpython the
stub loads (this interpreter's). Engines and plugin files here are placeholder bytes: the
TensorRT backend, which would load them, is not in this server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tritonserver
from trt_gn import spec
from trt_gn.cli import main as cli_main

REPO_ROOT = Path(__file__).resolve().parents[1]
CLIENT = REPO_ROOT / "examples" / "triton_client.py"
NO_BACKEND = "unable to find backend library for backend 'tensorrt'"

pytestmark = pytest.mark.skipif(tritonserver.unavailable_reason() is not None,
                                reason=str(tritonserver.unavailable_reason()))


def _cli(argv):
    rc = cli_main(argv)
    assert rc == 0, argv


@pytest.fixture(scope="module")
def fused_vae(tmp_path_factory):
    d = tmp_path_factory.mktemp("triton_models")
    path = d / "tiny-vae-decoder.onnx"
    _cli(["export", "tiny-vae-decoder", str(path)])
    return path


@pytest.fixture(scope="module")
def repository(tmp_path_factory, fused_vae):
    """A repository with one model per kind of config `trt-gn triton` writes, and two broken ones."""
    d = tmp_path_factory.mktemp("triton_repo")
    plugin_dir = d / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / spec.PLUGIN_LIBRARY).write_bytes(b"placeholder: the server has no TensorRT backend")
    (plugin_dir / spec.PLUGIN_AUTOLOAD_LIBRARY).write_bytes(b"placeholder")
    plan = d / "vae.plan"
    plan.write_bytes(b"placeholder engine")
    repo = d / "models"
    common = ["--repository", str(repo), "--onnx", str(fused_vae), "--io-from", "onnx", "--plugin",
              str(plugin_dir / spec.PLUGIN_LIBRARY)]
    _cli(["triton", str(plan), "--model", "trt_batched", "--max-batch-size", "4", "--preferred-batch-size", "2",
          "--preferred-batch-size", "4", "--max-queue-delay-us", "50", *common])
    _cli(["triton", str(plan), "--model", "trt_unbatched", "--max-batch-size", "0", *common])
    _cli(["triton", str(plan), "--model", "trt_instances", "--max-batch-size", "2", "--no-dynamic-batching",
          "--instances", "2", "--gpus", "0", "--version", "3", *common])
    _cli(["triton", str(fused_vae), "--backend", "python", "--repository", str(repo), "--model", "py_vae"])
    _cli(["triton", str(fused_vae), "--backend", "python", "--repository", str(repo), "--model", "py_vae_batched",
          "--max-batch-size", "2", "--instances", "2"])
    # Broken copies of written configs: a misspelt field, and a data type Triton does not have.
    for name, source, old, new in (("broken_field", "trt_batched", "data_type:", "data_typo:"),
                                   ("broken_type", "py_vae", "TYPE_FP32", "TYPE_FP33")):
        (repo / name / "1").mkdir(parents=True)
        text = (repo / source / "config.pbtxt").read_text().replace(f'name: "{source}"', f'name: "{name}"')
        (repo / name / "config.pbtxt").write_text(text.replace(old, new, 1))
    return repo


def test_every_written_config_is_loaded_and_a_broken_one_fails_earlier(repository, tmp_path):
    with tritonserver.TritonServer(repository, log_file=tmp_path / "server.log") as server:
        results = {m: server.load(m) for m in sorted(p.name for p in repository.iterdir() if not p.name.startswith("."))}
        log = server.log()
    print(f"\nserver started in {server.start_seconds:.1f} s, stopped in {server.stop_seconds:.1f} s")
    for model, error in results.items():
        print(f"  {model}: {'READY' if error is None else error.strip()[:160]}")
    for model in ("trt_batched", "trt_unbatched", "trt_instances"):
        # Parsed and validated: the server went on to look for the TensorRT backend library.
        assert results[model] is not None and NO_BACKEND in results[model], results[model]
    for model in ("py_vae", "py_vae_batched"):
        assert results[model] is None, results[model]
    for model in ("broken_field", "broken_type"):
        assert results[model] is not None and NO_BACKEND not in results[model], results[model]
        assert "failed to poll from model repository" in results[model] or "failed to read" in results[model]
    assert "Error parsing text-format inference.ModelConfig" in log
    assert 'no field named "data_typo"' in log and "TYPE_FP33" in log
    assert not server.pid_alive() and server.shm_leftovers() == []


def _client(fused: Path, model: str, protocol: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLIENT), "--onnx", str(fused), "--model", model, "--protocol",
                           protocol, "--url", url, "--shape", "latent:2x4x16x16", "--atol", "1e-5", "--rtol", "1e-5"],
                          capture_output=True, text=True, timeout=300)


def _no_process_mentions(marker: str) -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                return False
        except OSError:
            continue
    return True


# Triton batching off (the batch is a tensor dimension) and on (max_batch_size 2, dynamic batcher).
MODELS = ("py_vae", "py_vae_batched")


def test_python_backend_serves_the_fused_model_over_http_and_grpc(repository, fused_vae, tmp_path):
    server = tritonserver.TritonServer(repository, log_file=tmp_path / "server.log")
    with server:
        pid = server.proc.pid
        started = time.monotonic()
        for model in MODELS:
            assert server.load(model) is None, server.log()[-2000:]
        load_seconds = time.monotonic() - started
        runs = {(m, p): _client(fused_vae, m, p, server.http_url if p == "http" else server.grpc_url)
                for m in MODELS for p in ("http", "grpc")}
        assert server.shm_leftovers(), "the Python backend's shared memory is under the server's prefix"
    print(f"\nserver pid {pid}: started in {server.start_seconds:.1f} s, {', '.join(MODELS)} loaded in "
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


def test_server_start_is_bounded_and_a_failed_start_leaves_nothing(tmp_path):
    missing = tmp_path / "no_such_repository"
    server = tritonserver.TritonServer(missing, model_control="none", start_timeout=30,
                                       log_file=tmp_path / "server.log")
    started = time.monotonic()
    with pytest.raises((RuntimeError, TimeoutError)):
        server.start()
    assert time.monotonic() - started < 45
    assert not server.pid_alive() and server.shm_leftovers() == []
