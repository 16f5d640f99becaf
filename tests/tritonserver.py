"""A real Triton Inference Server for the tests: the tritonserver of the nvidia-pytriton wheel,
unpacked by scripts/setup_tritonserver.sh into .deps/tritonserver (or $TRT_GN_TRITONSERVER_HOME).

``TritonServer`` starts it on free localhost ports, waits (bounded) until it answers, and always
stops it by its PID: SIGTERM, then SIGKILL of its process group (the server runs in a session of
its own, so the Python backend's stub processes go with it), then removes the shared-memory
regions it made (the Python backend's, named by a per-server prefix). A server whose Python
backend cannot start its stub ignores SIGTERM, hence the SIGKILL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

HOME_ENV = "TRT_GN_TRITONSERVER_HOME"
PYTHON_ENV = "python-env"  # the Python backend's environment, made by scripts/setup_tritonserver.sh
REPO_ROOT = Path(__file__).resolve().parents[1]


def server_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or REPO_ROOT / ".deps" / "tritonserver")


def unavailable_reason() -> str | None:
    """Why no server can be started here (None: it can)."""
    home = server_home()
    if not (home / "bin" / "tritonserver").is_file() or not (home / "VERSION").is_file():
        return (f"no tritonserver in {home}: run `bash scripts/setup_tritonserver.sh` (unpacks the one in the "
                f"nvidia-pytriton wheel) or set {HOME_ENV}")
    stub_version = (home / "PYTHON_VERSION").read_text().strip() if (home / "PYTHON_VERSION").is_file() else "?"
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if stub_version != here:
        return (f"the Python backend stub in {home} is for Python {stub_version}, the tests run {here}: rerun "
                f"scripts/setup_tritonserver.sh with this python3")
    if not (home / PYTHON_ENV / "bin" / "python3").exists():
        return f"no {home / PYTHON_ENV} (the Python backend's numpy < 2 environment): rerun scripts/setup_tritonserver.sh"
    if not python_libdir():
        return f"this Python ({sys.executable}) has no shared libpython, which the Python backend stub needs"
    return None


def python_libdir() -> str | None:
    """The folder of this interpreter's shared libpython (the stub links libpython3.X.so.1.0)."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        return None
    libdir = sysconfig.get_config_var("LIBDIR")
    name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
    return libdir if libdir and (Path(libdir) / name).exists() else None


def _free_ports(n: int) -> list[int]:
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

    def __init__(self, repository: Path, *, model_control: str = "explicit", start_timeout: float = 60.0,
                 log_file: Path | None = None):
        self.repository = Path(repository)
        self.model_control = model_control
        self.start_timeout = start_timeout
        self.log_file = Path(log_file) if log_file else self.repository.parent / "tritonserver.log"
        self.shm_prefix = f"trtgn{uuid.uuid4().hex[:12]}_"
        self.proc: subprocess.Popen | None = None
        self.start_seconds = self.stop_seconds = None

    # -- start / stop ----------------------------------------------------------------------
    def start(self) -> "TritonServer":
        home = server_home()
        http, grpc, metrics = _free_ports(3)
        self.http_url, self.grpc_url = f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"
        env = dict(os.environ)
        # The server's bundled libraries, and the libpython the Python backend stub links.
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(home / "lib"), python_libdir(), env.get("LD_LIBRARY_PATH")) if p)
        # The stub's embedded interpreter finds its prefix through `python3` on PATH (it ignores
        # PYTHONPATH): the server's own environment (numpy < 2, onnxruntime) comes first.
        if (home / PYTHON_ENV / "bin" / "python3").exists():
            env["PATH"] = os.pathsep.join([str(home / PYTHON_ENV / "bin"), env.get("PATH", "")])
        cmd = [str(home / "bin" / "tritonserver"), f"--model-repository={self.repository}",
               f"--backend-directory={home / 'backends'}", f"--cache-directory={home / 'caches'}",
               "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1",
               f"--grpc-port={grpc}", "--allow-metrics=false", f"--metrics-port={metrics}",
               f"--model-control-mode={self.model_control}", "--strict-readiness=false",
               f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
               "--exit-timeout-secs=5", "--log-verbose=0"]
        self._log = open(self.log_file, "wb")
        started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        try:
            self._wait_live(started)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def _wait_live(self, started: float) -> None:
        url = f"http://{self.http_url}/v2/health/live"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {self.proc.returncode} before it was live:\n"
                                   + self.log()[-3000:])
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() - started > self.start_timeout:
                raise TimeoutError(f"tritonserver was not live after {self.start_timeout:.0f} s:\n"
                                   + self.log()[-3000:])
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL of its process group); remove its shm."""
        if self.proc is None:
            return
        started = time.monotonic()
        pid = self.proc.pid
        try:
            if self.proc.poll() is None:
                os.kill(pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            # The process group is the server's own session (start_new_session): its stubs too.
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if self.proc.poll() is None:
                self.proc.wait(timeout=10)
            self._log.close()
            for leftover in Path("/dev/shm").glob(f"{self.shm_prefix}*"):
                leftover.unlink(missing_ok=True)
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
        return self.proc is not None and self.proc.poll() is None

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
