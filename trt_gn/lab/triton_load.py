"""Load, bad requests and faults against models served by a local Triton server.

KServe v2 over HTTP with Triton's binary tensor data extension (FP16 and BF16 travel as raw bytes;
the JSON protocol cannot carry FP16), on the standard library's http.client, one keep-alive
connection per client thread. Only loopback addresses are accepted: this drives a server on this
machine. numpy makes the seeded random inputs and checks the answers.

    python -m trt_gn.lab.triton_load load --url 127.0.0.1:8000 --model vae_stock --model vae_trt_gn \\
        --concurrency 1,2,4,8,16 --seconds 30 --warmup 3 --out load.csv
    python -m trt_gn.lab.triton_load faults --url 127.0.0.1:8000 --model vae_faults --concurrency 8 \\
        --kill-stub --out faults.json
    python -m trt_gn.lab.triton_load compare --url 127.0.0.1:8000 --model vae_stock --model vae_trt_gn \\
        --recipe sd15-vae-decoder --out compare.json

load: for each model and concurrency, `--warmup` seconds unrecorded, then `--seconds` recorded;
a request counts when it ends inside the recorded window. Inputs are a few seeded random payloads;
each answer is compared with the answer the model gave for the same payload alone before the run
(``max_abs_diff``; above ``--atol`` it counts as a mismatch), so a request answered with another
request's image, or garbage, is caught. Throughput is images answered per second.

faults: a background load at ``--concurrency`` runs throughout; requests with a wrong data type, a
wrong rank, a wrong channel count, a batch over max_batch_size and a batch too large for the
instance's memory are sent, and two clients hang up mid-request (half a body sent; a whole request
sent and the connection closed unread). Each answer is recorded; the server must stay live and the
background requests must all succeed with the right output. With ``--kill-stub`` one instance's
Python backend stub process is then killed (SIGKILL): what the requests get, whether Triton recovers
by itself within ``--recover-wait`` s, else the model is unloaded and loaded through the repository API, and
the time until requests succeed again; every request is bounded by ``--timeout``.

compare: one request per payload to each model, and a float32 eager reference of the recipe (same
seed, so the same random weights) computed here with torch: each model's error against it, and the
models' difference from each other. Needs torch, diffusers and trt_gn's recipes.
"""

from __future__ import annotations

import argparse
import collections
import csv
import http.client
import json
import os
import signal
import socket
import statistics
import sys
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import EXIT_FAILED, Error

LOOPBACK = ("127.0.0.1", "localhost", "::1")
ITEM_SIZE = {"FP16": 2, "BF16": 2, "FP32": 4, "FP64": 8, "INT32": 4, "INT64": 8, "INT8": 1, "UINT8": 1}
CONFIG_TO_WIRE = {"TYPE_FP16": "FP16", "TYPE_BF16": "BF16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64",
                  "TYPE_INT32": "INT32", "TYPE_INT64": "INT64"}
STUB = b"triton_python_backend_stub"


class LoadError(Error):
    """The driver cannot do what it was asked (bad URL, model not served, a check that needs a server)."""

    exit_code = EXIT_FAILED


class InferError(Error):
    """The server answered an inference request with an error (``status``: HTTP status, 0 if none)."""

    exit_code = EXIT_FAILED

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Tensor:
    name: str
    datatype: str
    shape: list
    data: bytes


def parse_url(url: str) -> tuple[str, int]:
    parsed = urllib.parse.urlsplit(url if "//" in url else f"http://{url}")
    host, port = parsed.hostname or "", parsed.port or 8000
    if host not in LOOPBACK:
        raise LoadError(f"--url {url}: only a server on this machine (127.0.0.1) is driven")
    return host, port


def encode_infer(inputs: list, outputs: list) -> tuple[bytes, int]:
    """(body, JSON header length) of an inference request with every tensor as binary data."""
    header = {"inputs": [{"name": t.name, "shape": list(t.shape), "datatype": t.datatype,
                          "parameters": {"binary_data_size": len(t.data)}} for t in inputs],
              "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in outputs]}
    head = json.dumps(header).encode()
    return head + b"".join(t.data for t in inputs), len(head)


def decode_infer(body: bytes, header_length: int | None) -> dict:
    """Output tensors of an inference response (binary data after the JSON header)."""
    n = len(body) if header_length is None else header_length
    header = json.loads(body[:n])
    out, offset = {}, n
    for o in header.get("outputs", []):
        size = o.get("parameters", {}).get("binary_data_size")
        if size is None:
            raise InferError(0, f"output '{o['name']}' came back as JSON, not binary data")
        out[o["name"]] = Tensor(o["name"], o["datatype"], list(o["shape"]), body[offset:offset + size])
        offset += size
    return out


class Client:
    """One HTTP/1.1 keep-alive connection to the server (not shared between threads)."""

    def __init__(self, url: str, timeout: float = 60.0):
        self.host, self.port = parse_url(url)
        self.timeout = timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        """(status, headers, body); a broken connection is reopened for the next call."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            response = self.conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def get_json(self, path: str):
        status, _, body = self.request("GET", path)
        if status != 200:
            raise LoadError(f"GET {path}: HTTP {status} {body[:300].decode(errors='replace')}")
        return json.loads(body)

    def infer(self, model: str, inputs: list, outputs: list) -> dict:
        body, head = encode_infer(inputs, outputs)
        headers = {"Inference-Header-Content-Length": str(head), "Content-Type": "application/octet-stream"}
        status, rheaders, rbody = self.request("POST", f"/v2/models/{model}/infer", body, headers)
        if status != 200:
            try:
                message = json.loads(rbody).get("error", "")
            except ValueError:
                message = rbody[:500].decode(errors="replace")
            raise InferError(status, message)
        length = next((v for k, v in rheaders.items() if k.lower() == "inference-header-content-length"), None)
        return decode_infer(rbody, None if length is None else int(length))


@dataclass
class ModelIO:
    name: str
    max_batch_size: int
    inputs: list  # (name, datatype, dims without batch)
    outputs: list  # names


def model_io(client: Client, model: str) -> ModelIO:
    config = client.get_json(f"/v2/models/{model}/config")
    inputs = [(i["name"], CONFIG_TO_WIRE[i["data_type"]], [int(d) for d in i["dims"]]) for i in config["input"]]
    return ModelIO(model, int(config.get("max_batch_size", 0)), inputs, [o["name"] for o in config["output"]])


def _np():
    import numpy as np

    return np


def random_tensor(name: str, datatype: str, shape: list, seed: int) -> Tensor:
    """Seeded standard-normal data (a timestep: integers 0..999) of `datatype` as little-endian bytes."""
    np = _np()
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1000, size=shape).astype(np.float32) if name == "timestep" else \
        rng.standard_normal(size=shape, dtype=np.float32)
    if datatype == "BF16":  # round to nearest even on the upper 16 bits
        bits = values.view(np.uint32)
        data = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
    else:
        data = values.astype({"FP16": "<f2", "FP32": "<f4", "FP64": "<f8"}[datatype]).tobytes()
    return Tensor(name, datatype, list(shape), data)


def to_float32(t: Tensor):
    np = _np()
    if t.datatype == "BF16":
        return (np.frombuffer(t.data, "<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(t.data, {"FP16": "<f2", "FP32": "<f4", "FP64": "<f8"}[t.datatype]).astype(np.float32)


def payload(io: ModelIO, batch: int, seed: int, **overrides) -> list:
    """One request's inputs: seeded random tensors of `batch` images (overrides: name -> (datatype, shape))."""
    tensors = []
    for k, (name, datatype, dims) in enumerate(io.inputs):
        datatype, shape = overrides.get(name, (datatype, [batch] + [d if d > 0 else 1 for d in dims]))
        tensors.append(random_tensor(name, datatype, shape, seed * 1000 + k))
    return tensors


def max_abs_diff(a: Tensor, b: Tensor) -> float:
    if a.shape != b.shape or a.datatype != b.datatype:
        return float("inf")
    if a.data == b.data:
        return 0.0
    np = _np()
    return float(np.max(np.abs(to_float32(a) - to_float32(b))))


@dataclass
class Record:
    start: float
    end: float
    images: int
    ok: bool
    error: str = ""
    diff: float = 0.0
    status: int = 0


class LoadRunner:
    """`concurrency` threads each sending one request after another, round-robin over payloads, until
    stop(); every request recorded (monotonic start and end, outcome, difference from the reference)."""

    def __init__(self, url: str, io: ModelIO, payloads: list, references: list, *, concurrency: int,
                 timeout: float, atol: float):
        self.url, self.io, self.payloads, self.references = url, io, payloads, references
        self.concurrency, self.timeout, self.atol = concurrency, timeout, atol
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(concurrency)]

    def start(self) -> "LoadRunner":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> list:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 10)
        return self.records

    def _worker(self, index: int) -> None:
        client = Client(self.url, self.timeout)
        k = index
        while not self._stop.is_set():
            which = k % len(self.payloads)
            k += self.concurrency
            inputs = self.payloads[which]
            start = time.monotonic()
            try:
                out = client.infer(self.io.name, inputs, self.io.outputs)[self.io.outputs[0]]
                diff = max_abs_diff(out, self.references[which])
                rec = Record(start, time.monotonic(), inputs[0].shape[0], diff <= self.atol, "" if diff <= self.atol
                             else f"output differs from the reference by {diff:.3g}", diff, 200)
            except InferError as exc:
                rec = Record(start, time.monotonic(), inputs[0].shape[0], False, exc.message, status=exc.status)
            except (OSError, http.client.HTTPException) as exc:
                rec = Record(start, time.monotonic(), inputs[0].shape[0], False, f"{type(exc).__name__}: {exc}")
            with self._lock:
                self.records.append(rec)
            if not rec.ok:
                time.sleep(0.05)  # a failing server answers at once: no flood of retries
        client.close()


def references(url: str, io: ModelIO, payloads: list, timeout: float) -> list:
    """The model's answer to each payload sent alone."""
    client = Client(url, timeout)
    try:
        return [client.infer(io.name, p, io.outputs)[io.outputs[0]] for p in payloads]
    finally:
        client.close()


def percentile(values: list, q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class LoadRow:
    model: str
    concurrency: int
    seconds: float
    requests: int
    images: int
    images_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    mismatches: int
    max_abs_diff: float
    error_examples: str = ""


def summarize(model: str, concurrency: int, records: list, window: tuple) -> LoadRow:
    lo, hi = window
    inside = [r for r in records if lo <= r.end <= hi]
    ok = [r for r in inside if r.ok]
    failed = [r for r in inside if not r.ok]
    mismatches = [r for r in failed if r.status == 200]
    lat = [(r.end - r.start) * 1000.0 for r in ok]
    examples = "; ".join(f"{n}x {m[:160]}" for m, n in collections.Counter(r.error for r in failed).most_common(3))
    return LoadRow(model, concurrency, round(hi - lo, 3), len(inside), sum(r.images for r in ok),
                   round(sum(r.images for r in ok) / (hi - lo), 2), round(percentile(lat, 50), 2),
                   round(percentile(lat, 95), 2), round(percentile(lat, 99), 2), round(max(lat, default=0.0), 2),
                   len(failed), len(mismatches), max((r.diff for r in inside if r.status == 200), default=0.0),
                   examples)


def run_load(url: str, io: ModelIO, payloads: list, refs: list, *, concurrency: int, seconds: float, warmup: float,
             timeout: float, atol: float) -> LoadRow:
    runner = LoadRunner(url, io, payloads, refs, concurrency=concurrency, timeout=timeout, atol=atol).start()
    start = time.monotonic()
    time.sleep(warmup + seconds)
    records = runner.stop()
    return summarize(io.name, concurrency, records, (start + warmup, start + warmup + seconds))


# -- bad requests and faults ----------------------------------------------------------------------

def send_bad(url: str, io: ModelIO, inputs: list, timeout: float) -> dict:
    """Send one request that should be refused: {status, error, seconds}."""
    client = Client(url, timeout)
    start = time.monotonic()
    try:
        client.infer(io.name, inputs, io.outputs)
        return {"status": 200, "error": "", "seconds": round(time.monotonic() - start, 3)}
    except InferError as exc:
        return {"status": exc.status, "error": exc.message, "seconds": round(time.monotonic() - start, 3)}
    except (OSError, http.client.HTTPException) as exc:
        return {"status": 0, "error": f"{type(exc).__name__}: {exc}", "seconds": round(time.monotonic() - start, 3)}
    finally:
        client.close()


def hang_up(url: str, io: ModelIO, inputs: list, *, whole: bool) -> dict:
    """Send half a request body (or a whole request) on a raw socket and close it without reading."""
    host, port = parse_url(url)
    body, head = encode_infer(inputs, io.outputs)
    request = (f"POST /v2/models/{io.name}/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Inference-Header-Content-Length: {head}\r\nContent-Type: application/octet-stream\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode()
    sent = body if whole else body[:len(body) // 2]
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(request + sent)
        time.sleep(0.2)
    return {"sent_bytes": len(sent), "body_bytes": len(body)}


def server_live(url: str) -> bool:
    client = Client(url, 5)
    try:
        return client.request("GET", "/v2/health/live")[0] == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        client.close()


def stub_pids(instance: str) -> list:
    """PIDs of the Python backend stub processes serving model instance `instance` (by its argv)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(STUB) and instance.encode() in argv:
            pids.append(int(cmdline.parent.name))
    return sorted(pids)


def reload_model(url: str, model: str, timeout: float = 600) -> tuple[bool, str, float]:
    """Unload and load `model` through the repository API (a load alone leaves a loaded model whose
    files did not change as it is, dead stub included): (ok, the server's answer, seconds)."""
    client = Client(url, timeout)
    start = time.monotonic()
    try:
        for action in ("unload", "load"):
            status, _, body = client.request("POST", f"/v2/repository/models/{model}/{action}")
            if status != 200:
                return False, f"{action}: HTTP {status} {body.decode(errors='replace')[:500]}", \
                    round(time.monotonic() - start, 2)
        return True, "", round(time.monotonic() - start, 2)
    finally:
        client.close()


def model_ready(url: str, model: str) -> int:
    client = Client(url, 10)
    try:
        return client.request("GET", f"/v2/models/{model}/ready")[0]
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        client.close()


def run_faults(url: str, io: ModelIO, *, concurrency: int, timeout: float, atol: float, oom_batch: int | None,
               kill_stub: bool, recover_wait: float, log=print) -> dict:
    pays = [payload(io, 1, seed) for seed in range(4)]
    refs = references(url, io, pays, timeout)
    name, datatype, dims = io.inputs[0]
    batch_shape = [1] + dims
    cases = {
        "wrong dtype": {name: ("FP32" if datatype != "FP32" else "FP16", batch_shape)},
        "wrong rank": {name: (datatype, batch_shape[:-1])},
        "wrong channels": {name: (datatype, [1, dims[0] + 1] + dims[1:])},
        "batch over max_batch_size": {name: (datatype, [io.max_batch_size + 1] + dims)},
    }
    if oom_batch:
        cases["batch too large for GPU memory"] = {name: (datatype, [oom_batch] + dims)}
    report = {"model": io.name, "concurrency": concurrency, "max_batch_size": io.max_batch_size, "faults": {}}
    runner = LoadRunner(url, io, pays, refs, concurrency=concurrency, timeout=timeout, atol=atol).start()
    t0 = time.monotonic()
    time.sleep(3)
    for label, override in cases.items():
        batch = override[name][1][0]
        bad = payload(io, batch, 99, **override)
        # every other input of the request fits the bad one's batch
        bad = [t if t.name == name else random_tensor(t.name, t.datatype, [batch] + t.shape[1:], 7) for t in bad]
        result = send_bad(url, io, bad, timeout)
        result["shape"] = override[name][1]
        result["datatype"] = override[name][0]
        report["faults"][label] = result
        log(f"  {label}: HTTP {result['status']} in {result['seconds']} s: {result['error'][:300]}")
        time.sleep(1)
    for label, whole in (("hang up mid-body", False), ("hang up before the answer", True)):
        result = hang_up(url, io, pays[0], whole=whole)
        time.sleep(1)
        result["server_live_after"] = server_live(url)
        report["faults"][label] = result
        log(f"  {label}: sent {result['sent_bytes']} of {result['body_bytes']} bytes; live after: "
            f"{result['server_live_after']}")
    time.sleep(2)
    t_faults = time.monotonic()
    if kill_stub:
        report["stub_kill"] = _kill_stub(url, io, runner, recover_wait, timeout, log)
    records = runner.stop()
    before = [r for r in records if r.end <= t_faults]
    after_kill = [r for r in records if r.start > t_faults]
    report["background"] = {
        "during_bad_requests": asdict(summarize(io.name, concurrency, before, (t0, t_faults))),
        "records_after_kill": len(after_kill),
        "max_latency_s": round(max(((r.end - r.start) for r in records), default=0.0), 3),
        "timeout_s": timeout,
        "over_timeout": sum(1 for r in records if r.end - r.start > timeout),
    }
    report["server_live_at_end"] = server_live(url)
    return report


def _kill_stub(url: str, io: ModelIO, runner: LoadRunner, recover_wait: float, timeout: float, log) -> dict:
    instance = f"{io.name}_0_0"
    pids = stub_pids(instance)
    if not pids:
        raise LoadError(f"no Python backend stub process of instance {instance} found")
    t_kill = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    log(f"  killed the stub of {instance} (pid {', '.join(map(str, pids))})")
    out = {"instance": instance, "pids": pids}
    time.sleep(1)
    out["model_ready_after_kill"] = model_ready(url, io.name)  # HTTP status of the readiness check

    def first(after: float, ok: bool):
        with runner._lock:
            return min((r.end for r in runner.records if r.start > after and r.ok == ok), default=None)

    deadline = t_kill + recover_wait
    while time.monotonic() < deadline and first(t_kill, True) is None:
        time.sleep(0.2)
    recovered = first(t_kill, True)
    out["recovered_by_itself"] = recovered is not None
    if recovered is None:
        t_reload = time.monotonic()
        ok, message, seconds = reload_model(url, io.name)
        out["reload"] = {"ok": ok, "seconds": seconds, "answer": message, "started_s": round(t_reload - t_kill, 3)}
        log(f"  no success within {recover_wait:.0f} s of the kill (readiness still HTTP "
            f"{out['model_ready_after_kill']}): unloaded and loaded again in {seconds} s (ok: {ok})")
        limit = time.monotonic() + 60
        while time.monotonic() < limit and first(t_reload, True) is None:
            time.sleep(0.2)
    time.sleep(5)
    with runner._lock:
        after = [r for r in runner.records if r.start > t_kill or r.end > t_kill]
    ok_after = [r.end for r in after if r.ok]
    errors = [r for r in after if not r.ok]
    out["first_error_s"] = round(min((r.end for r in errors), default=t_kill) - t_kill, 3) if errors else None
    out["first_success_s"] = round(min(ok_after) - t_kill, 3) if ok_after else None
    out["last_error_s"] = round(max(r.end for r in errors) - t_kill, 3) if errors else None
    out["errors"] = len(errors)
    out["error_kinds"] = dict(collections.Counter(r.error[:200] for r in errors).most_common(5))
    out["successes_after"] = len(ok_after)
    log(f"  after the kill: {len(errors)} failed requests (last {out['last_error_s']} s after it), first success "
        f"{out['first_success_s']} s after it; errors: {out['error_kinds']}")
    return out


# -- images against a float32 reference ---------------------------------------------------------

def compare(url: str, models: list, recipe: str, *, seed: int, payloads: int, timeout: float) -> dict:
    import numpy as np
    import torch

    from ..onnx.recipes import build

    client = Client(url, timeout)
    ios = [model_io(client, m) for m in models]
    pays = [payload(ios[0], 1, s) for s in range(payloads)]
    answers = {io.name: [to_float32(client.infer(io.name, p, io.outputs)[io.outputs[0]]) for p in pays] for io in ios}
    client.close()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build(recipe, dtype=torch.float32, seed=seed).to(device)
    ref = []
    # float32 arithmetic: PyTorch's default lets cuDNN run float32 convolutions in TF32 (fp16's mantissa)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.inference_mode():
            for p in pays:
                x = torch.from_numpy(to_float32(p[0]).reshape(p[0].shape)).to(device)
                ref.append(model(x).cpu().numpy().reshape(-1))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    out = {"recipe": recipe, "seed": seed, "payloads": payloads, "reference": f"float32 eager on {device}, TF32 off",
           "models": {}}

    def errors(a, b):
        return {"max_abs": float(max(np.max(np.abs(x - y)) for x, y in zip(a, b))),
                "rel_l2": float(max(np.linalg.norm(x - y) / np.linalg.norm(y) for x, y in zip(a, b)))}

    for io in ios:
        out["models"][io.name] = errors(answers[io.name], ref)
    if len(ios) == 2:
        out["between"] = errors(answers[ios[1].name], answers[ios[0].name])
    return out


def metrics(url: str) -> list:
    """Triton's /metrics lines on inference counts and GPUs (port: --metrics-url)."""
    client = Client(url, 10)
    try:
        status, _, body = client.request("GET", "/metrics")
    finally:
        client.close()
    if status != 200:
        return []
    return [line for line in body.decode(errors="replace").splitlines()
            if line.startswith(("nv_inference_count", "nv_inference_exec_count", "nv_gpu_utilization",
                                "nv_gpu_memory_used_bytes"))]


# -- command line --------------------------------------------------------------------------------

def _ints(text: str) -> list:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': give integers >= 1")
    return values


def _seconds(minimum: float, strict: bool):
    """argparse type: a number of seconds > minimum (strict) or >= minimum."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
        if not (value > minimum if strict else value >= minimum) or value != value:
            raise argparse.ArgumentTypeError(f"'{text}': give seconds {'>' if strict else '>='} {minimum:g}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trt_gn.lab.triton_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default="127.0.0.1:8000", help="the server's HTTP address (default: 127.0.0.1:8000)")
    common.add_argument("--model", action="append", required=True, help="model name (repeatable)")
    common.add_argument("--timeout", type=float, default=60.0, help="seconds a request may take (default: 60)")
    common.add_argument("--out", required=True, help="file written with the results")
    p = sub.add_parser("load", parents=[common], help="throughput and latency at several concurrencies")
    p.add_argument("--concurrency", type=_ints, default=[1, 2, 4, 8, 16])
    p.add_argument("--seconds", type=_seconds(0, strict=True), default=30.0, help="recorded seconds per concurrency (default: 30)")
    p.add_argument("--warmup", type=_seconds(0, strict=False), default=3.0, help="unrecorded seconds before (default: 3)")
    p.add_argument("--payloads", type=int, default=8, help="distinct seeded inputs (default: 8)")
    p.add_argument("--atol", type=float, default=0.05, help="largest |answer - reference| (default: 0.05)")
    p = sub.add_parser("faults", parents=[common], help="bad requests, hang-ups and a killed stub under load")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--atol", type=float, default=0.05)
    p.add_argument("--oom-batch", type=int, help="batch of the request meant to exhaust the instance's GPU memory")
    p.add_argument("--kill-stub", action="store_true", help="kill the stub of the model's first instance")
    p.add_argument("--recover-wait", type=float, default=20.0, help="seconds to wait for Triton to recover by "
                   "itself before loading the model again (default: 20)")
    p = sub.add_parser("compare", parents=[common], help="images against a float32 reference")
    p.add_argument("--recipe", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--payloads", type=int, default=4)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    try:
        client = Client(args.url, args.timeout)
        ios = {m: model_io(client, m) for m in args.model}
        client.close()
        if args.command == "load":
            rows = []
            pays = {m: [payload(ios[m], 1, seed) for seed in range(args.payloads)] for m in args.model}
            refs = {m: references(args.url, ios[m], pays[m], args.timeout) for m in args.model}
            with open(out, "w", newline="") as f:  # a row per measurement as it ends: a cut-off run keeps them
                writer = csv.DictWriter(f, fieldnames=list(LoadRow.__dataclass_fields__), lineterminator="\n")
                writer.writeheader()
                for c in args.concurrency:  # the models in turn at each concurrency: drift hits them alike
                    for m in args.model:
                        row = run_load(args.url, ios[m], pays[m], refs[m], concurrency=c, seconds=args.seconds,
                                       warmup=args.warmup, timeout=args.timeout, atol=args.atol)
                        rows.append(row)
                        writer.writerow(asdict(row))
                        f.flush()
                        print(f"{m} c={c}: {row.images_per_s:.1f} images/s, p50 {row.p50_ms:.1f} p95 {row.p95_ms:.1f} "
                              f"p99 {row.p99_ms:.1f} ms, {row.requests} requests, {row.errors} errors, max diff "
                              f"{row.max_abs_diff:.3g}{' (' + row.error_examples + ')' if row.errors else ''}",
                              flush=True)
            return 0 if all(r.errors == 0 for r in rows) else 1
        if args.command == "faults":
            report = {m: run_faults(args.url, ios[m], concurrency=args.concurrency, timeout=args.timeout,
                                    atol=args.atol, oom_batch=args.oom_batch, kill_stub=args.kill_stub,
                                    recover_wait=args.recover_wait) for m in args.model}
            out.write_text(json.dumps(report, indent=1) + "\n")
            bg = [r["background"]["during_bad_requests"] for r in report.values()]
            return 0 if all(b["errors"] == 0 for b in bg) and all(r["server_live_at_end"] for r in report.values()) \
                else 1
        report = compare(args.url, args.model, args.recipe, seed=args.seed, payloads=args.payloads,
                         timeout=args.timeout)
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(json.dumps(report, indent=1))
        return 0
    except (LoadError, InferError, OSError, http.client.HTTPException) as exc:
        print(f"triton_load {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
