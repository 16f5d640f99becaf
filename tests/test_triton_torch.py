"""`trt-gn triton RECIPE --backend pytorch`: the repository it writes, the model file's request
handling in-process, and the model served by the real tritonserver (tests/tritonserver.py, which
starts it with --disable-auto-complete-config: each config is checked as written).

Here, without a GPU, the server serves the tiny VAE decoder on KIND_CPU instances (trt_gn's op
runs its float64 reference there), in fp16 and bf16, with Triton's dynamic batcher combining
requests; the GPU configs are loaded to the point where Triton looks for a GPU. Serving on a GPU is
tested where torch sees one (skipped with the reason otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch

import trt_gn
import tritonserver
from cli_helpers import run_warm, snapshot
from trt_gn.lab import triton_load
from trt_gn.triton_models import torch_model
from trt_gn.triton_models.torch_model import InputSpec, RequestError, check_request, group_requests
from trt_gn.triton_torch import MODEL_TEMPLATE, TorchModelOptions, recipe_io, write_torch_repository
from trt_gn.triton import RepositoryOptions

SERVER_MISSING = tritonserver.unavailable_reason()
LATENT = [InputSpec("latent", "float16", (4, 16, 16))]


def _config(path: Path) -> str:
    return (path / "config.pbtxt").read_text()


def _params(text: str) -> dict:
    out, lines = {}, text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  key: "):
            out[json.loads(line[7:])] = json.loads(lines[i + 1].split("string_value: ", 1)[1].rsplit(" }", 1)[0])
    return out


# -- the repository ------------------------------------------------------------------------------

def test_writes_a_gpu_model_with_everything_the_stub_needs(tmp_path):
    result = write_torch_repository(tmp_path / "models", "vae", "sd15-vae-decoder",
                                    torch_options=TorchModelOptions(variant="stock"))
    text = _config(result.model_dir)
    assert 'backend: "python"' in text and "max_batch_size: 8" in text
    assert "dims: [ 4, 64, 64 ]" in text and "dims: [ 3, 512, 512 ]" in text and text.count("TYPE_FP16") == 2
    assert "kind: KIND_GPU" in text and "gpus:" not in text and "dynamic_batching {" in text
    params = _params(text)
    assert params == result.parameters
    assert params["recipe"] == "sd15-vae-decoder" and params["variant"] == "stock" and params["dtype"] == "fp16"
    assert params["channels_last"] == "true" and params["compile"] == "false" and params["weights"] == ""
    assert params["trt_gn_package"] == str(Path(trt_gn.__file__).resolve().parent)
    assert params["kernels_library"] == ""  # the stock variant loads no kernels
    torch_folder = str(Path(torch.__file__).resolve().parent.parent)
    assert torch_folder in params["python_path"].split(os.pathsep)
    assert result.model_py.read_bytes() == MODEL_TEMPLATE.read_bytes()
    assert sorted(p.name for p in result.model_dir.rglob("*")) == ["1", "config.pbtxt", "model.py"]


def test_gpus_memory_cap_queue_timeout_and_kernels_library(tmp_path):
    lib = tmp_path / "libtrt_gn_kernels.so"
    lib.write_bytes(b"the model loads it where it is served")
    result = write_torch_repository(
        tmp_path / "models", "vae", "tiny-vae-decoder", RepositoryOptions(gpus=[0, 1], max_batch_size=3),
        TorchModelOptions(dtype="bf16", compile=True, gpu_memory_limit_gib=2.5, queue_timeout_ms=1500,
                          kernels_library=lib, python_path=["/opt/a", "/opt/b"], seed=7))
    text = _config(result.model_dir)
    assert "kind: KIND_GPU\n    gpus: [ 0, 1 ]" in text and "max_batch_size: 3" in text
    assert "default_timeout_microseconds: 1500000" in text and "timeout_action: REJECT" in text
    assert text.count("TYPE_BF16") == 2 and "dims: [ 3, 32, 32 ]" in text  # two upsamplings: x2
    p = result.parameters
    assert p["kernels_library"] == str(lib.resolve()) and p["python_path"] == "/opt/a:/opt/b"
    assert p["gpu_memory_limit_gib"] == "2.5" and p["compile"] == "true" and p["seed"] == "7"


def test_unet_inputs():
    inputs, outputs = recipe_io("sdxl-unet", "fp16")
    assert [(t.name, t.dtype, t.shape) for t in inputs] == [
        ("sample", "FLOAT16", (None, 4, 128, 128)), ("timestep", "FLOAT", (None, 1)),
        ("encoder_hidden_states", "FLOAT16", (None, 77, 2048)), ("text_embeds", "FLOAT16", (None, 1280)),
        ("time_ids", "FLOAT16", (None, 6))]
    assert [(t.name, t.shape) for t in outputs] == [("noise_pred", (None, 4, 128, 128))]
    inputs, _ = recipe_io("sd15-unet", "bf16", latent_size=96)
    assert [t.name for t in inputs] == ["sample", "timestep", "encoder_hidden_states"]
    assert inputs[0].shape == (None, 4, 96, 96) and inputs[2].shape == (None, 77, 768)


# args after `trt-gn triton`, first stderr line, exit code
BAD = {
    "unknown-recipe": (["sd99-vae", "--backend", "pytorch"], "unknown model recipe 'sd99-vae'", 2),
    "no-batching": (["tiny-vae-decoder", "--backend", "pytorch", "--max-batch-size", "0"],
                    "--max-batch-size must be >= 1 with --backend pytorch (the model batches requests), got 0", 2),
    "dynamic-off": (["tiny-vae-decoder", "--backend", "pytorch", "--no-dynamic-batching"],
                    "--backend pytorch always batches requests dynamically", 2),
    "gpus-on-cpu": (["tiny-vae-decoder", "--backend", "pytorch", "--device", "cpu", "--gpus", "0"],
                    "--gpus needs --device gpu", 2),
    "cap-on-cpu": (["tiny-vae-decoder", "--backend", "pytorch", "--device", "cpu", "--gpu-memory-limit", "4"],
                   "--gpu-memory-limit needs --device gpu", 2),
    "cap-zero": (["tiny-vae-decoder", "--backend", "pytorch", "--variant", "stock", "--gpu-memory-limit", "0"],
                 "--gpu-memory-limit must be > 0 GiB, got 0.0", 2),
    "queue-timeout": (["tiny-vae-decoder", "--backend", "pytorch", "--variant", "stock", "--queue-timeout-ms", "0"],
                      "--queue-timeout-ms must be >= 1, got 0", 2),
    "unet-size": (["sd15-unet", "--backend", "pytorch", "--variant", "stock", "--latent-size", "60"],
                  "--latent-size 60: sd15-unet needs a multiple of 8 (it halves the latent 3 times)", 2),
    "vae-size": (["tiny-vae-decoder", "--backend", "pytorch", "--variant", "stock", "--latent-size", "0"],
                 "--latent-size must be >= 1, got 0", 2),
    "weights-missing": (["tiny-vae-decoder", "--backend", "pytorch", "--variant", "stock", "--weights", "w.safetensors"],
                        "--weights w.safetensors: no such file or folder", 2),
    "onnx-given": (["tiny-vae-decoder", "--backend", "pytorch", "--onnx", "m.onnx"],
                   "--onnx and --plugin belong to the TensorRT backend", 2),
    "io-from": (["tiny-vae-decoder", "--backend", "pytorch", "--io-from", "onnx"],
                "--io-from belongs to the TensorRT backend", 2),
    "kernels-missing": (["tiny-vae-decoder", "--backend", "pytorch", "--kernels-library", "no.so"],
                        "--kernels-library no.so is not a file", 2),
    "exists": (["tiny-vae-decoder", "--backend", "pytorch", "--device", "cpu", "--model", "old"],
               "repo/old already exists", 2),
}


def test_bad_arguments_name_the_problem_and_write_nothing(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    cases, before = {}, {}
    for name, (args, _, _) in BAD.items():
        folder = tmp_path / name
        (folder / "repo" / "old").mkdir(parents=True)
        (folder / "repo" / "old" / "config.pbtxt").write_text("kept")
        before[name] = snapshot(folder)
        cases[name] = (["triton", *args, "--repository", "repo"], folder)
    procs = run_warm(cases, logs)
    for name, (_, first, code) in BAD.items():
        proc = procs[name]
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == code, (name, proc.stderr)
        assert lines[0] == f"trt-gn triton: error: {first}", (name, proc.stderr)
        assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  hint: ")), proc.stderr
        assert snapshot(tmp_path / name) == before[name], name


def test_the_kernels_library_not_found_is_a_missing_dependency(tmp_path, monkeypatch):
    monkeypatch.setenv("TRT_GN_KERNELS_LIBRARY", str(tmp_path / "gone.so"))
    from trt_gn.errors import EXIT_MISSING
    from trt_gn.triton import RepositoryError

    with pytest.raises(RepositoryError) as info:
        write_torch_repository(tmp_path / "models", "vae", "tiny-vae-decoder")
    assert info.value.exit_code == EXIT_MISSING
    assert str(info.value) == (f"the trt_gn variant on a GPU needs the kernels library libtrt_gn_kernels.so, which "
                               f"is not found here (TRT_GN_KERNELS_LIBRARY={tmp_path / 'gone.so'} is not a file)")
    assert not (tmp_path / "models").exists()


def test_help_names_the_backend_and_its_options():
    from trt_gn.cli import build_parser

    text = next(a for a in build_parser()._actions if a.dest == "command").choices["triton"].format_help()
    for word in ("pytorch", "--variant", "--compile", "--gpu-memory-limit", "--queue-timeout-ms", "ENGINE.plan|MODEL.onnx|RECIPE"):
        assert word in text, word


# -- the model file, in-process ---------------------------------------------------------------------

def test_request_checks_name_the_tensor_and_what_was_expected():
    ok = torch.zeros(2, 4, 16, 16, dtype=torch.float16)
    assert check_request({"latent": ok}, LATENT, 4) == 2
    cases = [
        (ok.float(), "input 'latent': expected data type FP16, got FP32"),
        (ok.to(torch.bfloat16), "input 'latent': expected data type FP16, got BF16"),
        (ok[0], "input 'latent': expected 4 dimensions [batch, 4, 16, 16], got 3 [4, 16, 16]"),
        (torch.zeros(1, 3, 16, 16, dtype=torch.float16),
         "input 'latent': expected 4 channels, got 3 (expected shape [batch, 4, 16, 16], got [1, 3, 16, 16])"),
        (torch.zeros(1, 4, 16, 8, dtype=torch.float16),
         "input 'latent': expected 16 in dimension 3, got 8 (expected shape [batch, 4, 16, 16], got [1, 4, 16, 8])"),
        (torch.zeros(5, 4, 16, 16, dtype=torch.float16), "input 'latent': batch 5 is outside 1..4 (max_batch_size)"),
        (torch.zeros(0, 4, 16, 16, dtype=torch.float16), "input 'latent': batch 0 is outside 1..4 (max_batch_size)"),
    ]
    for tensor, message in cases:
        with pytest.raises(RequestError) as info:
            check_request({"latent": tensor}, LATENT, 4)
        assert str(info.value) == message
    with pytest.raises(RequestError, match=r"^input 'latent' is missing$"):
        check_request({}, LATENT, 4)
    two = LATENT + [InputSpec("timestep", "float32", (1,))]
    with pytest.raises(RequestError) as info:
        check_request({"latent": ok, "timestep": torch.zeros(3, 1)}, two, 4)
    assert str(info.value) == "input 'timestep': batch 3 differs from input 'latent''s batch 2"


def test_requests_are_grouped_in_order_within_the_limit():
    assert group_requests([1, 1, 1, 1], 4) == [[0, 1, 2, 3]]
    assert group_requests([2, 3, 1, 4], 4) == [[0], [1, 2], [3]]
    assert group_requests([9, 1], 4) == [[0], [1]]  # a request over the limit runs alone
    assert group_requests([], 4) == []


def _params_for(variant: str, dtype: str = "fp32", compile: bool = False) -> dict:
    return {"trt_gn_package": "", "kernels_library": "", "python_path": "", "recipe": "tiny-vae-decoder",
            "variant": variant, "dtype": dtype, "channels_last": "true", "compile": "true" if compile else "false",
            "weights": "", "seed": "0", "gpu_memory_limit_gib": ""}


@pytest.mark.parametrize("variant", ["stock", "trt_gn"])
def test_a_batch_is_split_back_to_its_requests(variant):
    """Requests of 1, 2 and 1 images run as one batch (and, with run_limit 2, as two): each answer is
    the model's output for that request's own input."""
    spec = [InputSpec("latent", "float32", (4, 16, 16))]
    model = torch_model.TorchModel(_params_for(variant), spec, ["image"], 4, "cpu", log=lambda _: None)
    model.warm_up()
    assert model.run_limit == 4
    reqs = [(model.example(n, seed=s)["latent"], n) for s, n in ((1, 1), (2, 2), (3, 1))]
    with torch.inference_mode():
        alone = [model.module(x.contiguous(memory_format=torch.channels_last)) for x, _ in reqs]
    for limit in (4, 2):
        model.run_limit = limit
        out = model.run_requests([({"latent": x}, n) for x, n in reqs])
        for got, want in zip(out, alone):
            assert not isinstance(got, str), got
            assert got.shape == want.shape and got.is_contiguous()
            # fp32 sums in a different order for another batch size: far below any mix-up (O(1))
            assert (got - want).abs().max() <= 1e-4 * want.abs().max()
    if variant == "trt_gn":
        assert any(type(m).__name__ == "GroupNormActND" for m in model.module.modules())
    model.close()


def test_the_stub_finds_the_configured_trt_gn_and_torch(tmp_path):
    """A bare interpreter (no site-packages, no PYTHONPATH), as the stub's: bootstrap() puts torch's
    folder on sys.path and imports trt_gn from the configured package folder."""
    package = tmp_path / "elsewhere" / "trt_gn"
    shutil.copytree(Path(trt_gn.__file__).resolve().parent, package, ignore=shutil.ignore_patterns("lib", "__pycache__"))
    params = _params_for("trt_gn") | {"trt_gn_package": str(package), "kernels_library": "/x/libtrt_gn_kernels.so",
                                      "python_path": str(Path(torch.__file__).resolve().parent.parent)}
    code = (f"import importlib.util, json, os, sys\n"
            f"spec = importlib.util.spec_from_file_location('model', {str(MODEL_TEMPLATE)!r})\n"
            f"m = importlib.util.module_from_spec(spec); sys.modules['model'] = m; spec.loader.exec_module(m)\n"
            f"m.bootstrap(json.loads({json.dumps(json.dumps(params))}))\n"
            f"import trt_gn, torch\n"
            f"print(trt_gn.__file__); print(os.environ['TRT_GN_KERNELS_LIBRARY'])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "TRT_GN_KERNELS_LIBRARY"}
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(package / "__init__.py"), "/x/libtrt_gn_kernels.so"]


def test_text_files_open_as_utf8_in_a_c_locale_interpreter():
    """The stub's interpreter starts in the C locale; torch.compile reads UTF-8 sources."""
    code = (f"import importlib.util, locale, sys\n"
            f"spec = importlib.util.spec_from_file_location('model', {str(MODEL_TEMPLATE)!r})\n"
            f"m = importlib.util.module_from_spec(spec); sys.modules['model'] = m; spec.loader.exec_module(m)\n"
            f"print(locale.getpreferredencoding(False)); print(m.utf8_locale()); print(locale.getpreferredencoding(False))\n")
    env = dict(os.environ, LC_ALL="C", PYTHONCOERCECLOCALE="0", PYTHONUTF8="0")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    before, warning, after = proc.stdout.split("\n")[:3]
    assert before != "UTF-8" and warning == "None" and after == "UTF-8", proc.stdout


# -- the real server --------------------------------------------------------------------------------

needs_server = pytest.mark.skipif(SERVER_MISSING is not None, reason=str(SERVER_MISSING))


def _write(repo: Path, name: str, *args: str) -> None:
    from trt_gn.cli import main

    assert main(["triton", "tiny-vae-decoder", "--backend", "pytorch", "--repository", str(repo), "--model", name,
                 *args]) == 0


@pytest.fixture(scope="module")
def cpu_repository(tmp_path_factory):
    repo = tmp_path_factory.mktemp("torch_models") / "models"
    # A long queue delay with a preferred batch of 4: four requests sent together run as one batch.
    batching = ["--max-batch-size", "4", "--preferred-batch-size", "4", "--max-queue-delay-us", "1000000"]
    _write(repo, "stock_fp16", "--device", "cpu", "--variant", "stock", *batching)
    _write(repo, "trt_gn_bf16", "--device", "cpu", "--dtype", "bf16", *batching)
    _write(repo, "on_gpu", "--variant", "stock", "--gpus", "0", "--queue-timeout-ms", "5000")
    _write(repo, "on_every_gpu", "--variant", "stock")
    return repo


def _stats(server, model: str) -> dict:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats", timeout=10) as r:
        return json.loads(r.read())["model_stats"][0]


@needs_server
def test_served_on_the_cpu_batched_with_clear_errors(cpu_repository, tmp_path):
    with tritonserver.TritonServer(cpu_repository, log_file=tmp_path / "server.log") as server:
        loaded = {m: server.load(m) for m in ("stock_fp16", "trt_gn_bf16", "on_gpu", "on_every_gpu")}
        url = server.http_url
        client = triton_load.Client(url, timeout=120)
        ios = {m: triton_load.model_io(client, m) for m in ("stock_fp16", "trt_gn_bf16")}
        answers, refs, errors = {}, {}, {}
        for m, io in ios.items():
            pays = [triton_load.payload(io, 1, seed) for seed in range(4)]
            refs[m] = triton_load.references(url, io, pays, 120)  # each alone: batch 1
            got = [None] * 4

            def send(i, io=io, pays=pays, got=got):
                got[i] = triton_load.Client(url, 120).infer(io.name, pays[i], io.outputs)["image"]

            threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            answers[m] = got
            batch_sizes = {b["batch_size"] for b in _stats(server, m)["batch_stats"]}
            name, datatype, dims = io.inputs[0]
            bad = {"dtype": triton_load.payload(io, 1, 9, latent=("FP32", [1] + dims)),
                   "rank": triton_load.payload(io, 1, 9, latent=(datatype, [1] + dims[:-1])),
                   "channels": triton_load.payload(io, 1, 9, latent=(datatype, [1, 3] + dims[1:])),
                   "batch": triton_load.payload(io, 5, 9)}
            errors[m] = {k: triton_load.send_bad(url, io, v, 30) for k, v in bad.items()}
            assert batch_sizes >= {1, 4}, batch_sizes  # alone, then the four together
        log = server.log()
    assert loaded["stock_fp16"] is None and loaded["trt_gn_bf16"] is None, loaded
    # The KIND_GPU configs pass the strict parse; only the missing GPU stops them here.
    if not torch.cuda.is_available():
        assert "instance group on_gpu_0 of model on_gpu specifies invalid or unsupported gpu id 0" in loaded["on_gpu"]
        assert "has kind KIND_GPU but no GPUs are available" in loaded["on_every_gpu"], loaded["on_every_gpu"]
    for m in ios:
        for got, want in zip(answers[m], refs[m]):
            # The same image alone and in a batch of four: CPU kernels may sum in another order
            # for another batch size; a request answered with another's image differs by O(1).
            assert triton_load.max_abs_diff(got, want) <= 0.02, m
        assert len({a.data for a in answers[m]}) == 4  # four inputs, four different images
        e = errors[m]
        wire = "FP16" if m == "stock_fp16" else "BF16"
        assert e["dtype"]["status"] == 400 and f"inference input 'latent' data-type is 'FP32', but model '{m}' " \
            f"expects '{wire}'" in e["dtype"]["error"]
        assert e["rank"]["status"] == 400 and "unexpected shape for input 'latent'" in e["rank"]["error"] \
            and "Expected [-1,4,16,16], got [1,4,16]" in e["rank"]["error"]
        assert e["channels"]["status"] == 400 and "Expected [-1,4,16,16], got [1,3,16,16]" in e["channels"]["error"]
        assert e["batch"]["status"] == 400 and f"batch-size must be <= 4 for '{m}'" in e["batch"]["error"]
    assert "trt_gn_bf16_0_0: replaced 14 GroupNorm(s)" in log and "warmed batch sizes 1..4" in log


@needs_server
def test_a_killed_stub_fails_fast_until_the_model_is_loaded_again(cpu_repository, tmp_path):
    """tritonserver 2.51 does not restart a Python backend stub, and still calls the model ready: its
    requests fail at once, naming the stub, until the model is unloaded and loaded again (the
    repository API; a load alone keeps the loaded model), and then succeed."""
    with tritonserver.TritonServer(cpu_repository, log_file=tmp_path / "server.log") as server:
        assert server.load("stock_fp16") is None
        client = triton_load.Client(server.http_url, timeout=60)
        io = triton_load.model_io(client, "stock_fp16")
        pays = [triton_load.payload(io, 1, 0)]
        ref = triton_load.references(server.http_url, io, pays, 60)[0]
        pids = triton_load.stub_pids("stock_fp16_0_0")
        assert len(pids) == 1
        os.kill(pids[0], 9)
        time.sleep(1)
        started = time.monotonic()
        with pytest.raises(triton_load.InferError) as info:
            client.infer("stock_fp16", pays[0], io.outputs)
        assert time.monotonic() - started < 10
        assert info.value.message == "Stub process 'stock_fp16_0_0' is not healthy."
        assert triton_load.model_ready(server.http_url, "stock_fp16") == 200
        ok, message, _ = triton_load.reload_model(server.http_url, "stock_fp16")
        assert ok, message
        out = client.infer("stock_fp16", pays[0], io.outputs)["image"]
        assert triton_load.max_abs_diff(out, ref) == 0.0
        assert triton_load.stub_pids("stock_fp16_0_0") not in ([], pids)
        client.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="serving on a GPU needs a CUDA device")
@needs_server
def test_served_on_the_gpu_of_its_instance(tmp_path):
    repo = tmp_path / "models"
    _write(repo, "gpu_trt_gn", "--gpus", "0", "--max-batch-size", "2")
    with tritonserver.TritonServer(repo, log_file=tmp_path / "server.log") as server:
        assert server.load("gpu_trt_gn") is None, server.log()[-2000:]
        io = triton_load.model_io(triton_load.Client(server.http_url), "gpu_trt_gn")
        pays = [triton_load.payload(io, 1, 0)]
        got = triton_load.references(server.http_url, io, pays, 60)[0]
        log = server.log()
    assert "gpu_trt_gn_0_0: tiny-vae-decoder (trt_gn, fp16, channels_last) on cuda:0" in log
    spec = [InputSpec("latent", "float16", (4, 16, 16))]
    model = torch_model.TorchModel(_params_for("stock", "fp16"), spec, ["image"], 1, "cuda:0", log=lambda _: None)
    x = torch.from_numpy(triton_load.to_float32(pays[0][0]).reshape(1, 4, 16, 16)).half()
    want = model.run_requests([({"latent": x}, 1)])[0].float().numpy().reshape(-1)
    assert float(abs(triton_load.to_float32(got) - want).max()) <= 0.02


@pytest.mark.parametrize("args, message", [
    (["--seconds", "-2"], "argument --seconds: '-2': give seconds > 0"),
    (["--seconds", "0"], "argument --seconds: '0': give seconds > 0"),
    (["--warmup", "nan"], "argument --warmup: 'nan': give seconds >= 0"),
    (["--seconds", "x"], "argument --seconds: 'x' is not a number of seconds"),
])
def test_the_load_driver_refuses_durations_it_cannot_measure(args, message):
    proc = subprocess.run([sys.executable, "-m", "trt_gn.lab.triton_load", "load", "--url", "127.0.0.1:1",
                           "--model", "m", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == f"python -m trt_gn.lab.triton_load load: error: {message}"
