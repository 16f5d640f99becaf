"""A real Triton Inference Server for the tests: the tritonserver of the nvidia-pytriton wheel,
unpacked by scripts/setup_tritonserver.sh into .deps/tritonserver (or $TRT_GN_TRITONSERVER_HOME).

The command line and environment are the package's (trt_gn.tritonserver.launch, what `trt-gn serve`
runs), so the tests start the server the way a user does. ``TritonServer`` adds what tests need:
free localhost ports, explicit model control (``load``), a log file, a bounded start, and strict
configs by default (--disable-auto-complete-config: Triton checks each config.pbtxt as written;
with auto-complete it fills a tensorrt_plan config from the plan and checks it only after the
TensorRT backend is found). It always stops the server by its PID: SIGTERM, then SIGKILL of its
process group (the server runs in a session of its own, so the Python backend's stub processes go
with it), then removes the shared-memory regions it made (the Python backend's, named by a
per-server prefix). A server whose Python backend cannot start its stub ignores SIGTERM, hence the
SIGKILL.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from trt_gn import tritonserver

HOME_ENV = tritonserver.HOME_ENV
REPO_ROOT = Path(__file__).resolve().parents[1]


def server_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or REPO_ROOT / ".deps" / "tritonserver")


def unavailable_reason() -> str | None:
    """Why no server can be started here (None: it can)."""
    home = server_home()
    if not (home / "bin" / "tritonserver").is_file() or not (home / "VERSION").is_file():
        return (f"no tritonserver in {home}: run `bash scripts/setup_tritonserver.sh` (unpacks the one in the "
                f"nvidia-pytriton wheel) or set {HOME_ENV}")
    return tritonserver.Server(home).python_backend_problem()


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class TritonServer:
    """``with TritonServer(repo) as server:`` -> server.http_url, server.grpc_url, server.log()."""

    def __init__(self, repository: Path, *, model_control: str = "explicit", strict: bool = True,
                 start_timeout: float = 60.0, log_file: Path | None = None):
        self.repository = Path(repository)
        self.model_control = model_control
        self.strict = strict
        self.start_timeout = start_timeout
        self.log_file = Path(log_file) if log_file else self.repository.parent / "tritonserver.log"
        self.shm_prefix = f"trtgn{uuid.uuid4().hex[:12]}_"
        self.process: tritonserver.ServerProcess | None = None
        self.start_seconds = self.stop_seconds = None

    @property
    def proc(self):
        return self.process.proc if self.process else None

    # -- start / stop ----------------------------------------------------------------------
    def start(self) -> "TritonServer":
        http, grpc = free_ports(2)
        launch = tritonserver.launch(
            self.repository, tritonserver.Server(server_home()), http_port=http, grpc_port=grpc, metrics_port=None,
            model_control=self.model_control, strict_config=self.strict, python_shm_prefix=self.shm_prefix,
            extra_args=["--strict-readiness=false", "--exit-timeout-secs=5", "--log-verbose=0"])
        self.http_url, self.grpc_url = launch.http, launch.grpc
        self._log = open(self.log_file, "wb")
        started = time.monotonic()
        self.process = tritonserver.ServerProcess(launch, output=self._log).start()
        try:
            self.process.wait_for("/v2/health/live", timeout=self.start_timeout)
        except tritonserver.ServerError as exc:
            self.stop()
            raise RuntimeError(f"{exc.message}:\n{self.log()[-3000:]}") from None
        except TimeoutError as exc:
            self.stop()
            raise TimeoutError(f"{exc}:\n{self.log()[-3000:]}") from None
        self.start_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL of its process group); remove its shm."""
        if self.process is None:
            return
        started = time.monotonic()
        try:
            self.process.stop(timeout=10)
        finally:
            self._log.close()
            self.stop_seconds = time.monotonic() - started

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- helpers ------------------------------------------------------------------------------
    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def pid_alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def shm_leftovers(self) -> list[Path]:
        return sorted(Path("/dev/shm").glob(f"{self.shm_prefix}*"))

    def load(self, model: str) -> str | None:
        """Load one model (explicit model control): None when it is ready, else the server's error."""
        req = urllib.request.Request(f"http://{self.http_url}/v2/repository/models/{model}/load", method="POST",
                                     data=b"")
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return None if r.status == 200 else r.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.read().decode(errors="replace")
