"""How to start a Triton Inference Server on a model repository written by `trt-gn triton`: the one
place that knows the server's command line and environment (`trt-gn serve`, the command
`trt-gn triton` prints, and the tests' real server all use it).

Two kinds of server:

- NVIDIA's Triton container (``/opt/tritonserver``): ``tritonserver`` on PATH with its backends
  in their default folder; nothing beyond the flags is needed.
- The server ``scripts/setup_tritonserver.sh`` unpacks from the nvidia-pytriton wheel (into a
  checkout's ``.deps/tritonserver``, or ``$TRT_GN_TRITONSERVER_HOME``): its shared libraries are in
  ``lib/`` (LD_LIBRARY_PATH), its Python backend stub links this interpreter's libpython
  (LD_LIBRARY_PATH) and embeds a Python that finds its prefix through ``python3`` on PATH, so the
  folder's ``python-env/bin`` (numpy < 2 and onnxruntime for the models) comes first on PATH; the
  backends are in ``backends/`` (``--backend-directory``). It has no TensorRT backend.

Repository models served by the TensorRT backend get the plugin through
``--backend-config=tensorrt,plugins=...``: the self-registering shim that `trt-gn triton` copies next
to each such model's config.pbtxt (one per distinct file: the plugin registers its creators once
per process).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from . import spec
from .errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_MISSING, Error

HOME_ENV = "TRT_GN_TRITONSERVER_HOME"
PYTHON_ENV = "python-env"  # the Python backend's environment in a setup_tritonserver.sh folder
SETUP_SCRIPT = "scripts/setup_tritonserver.sh"
CONTAINER_HOME = Path("/opt/tritonserver")
MODEL_CONTROL_MODES = ("none", "poll", "explicit")
DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}  # Triton's own defaults
_CHECKOUT = Path(__file__).resolve().parents[1]
_PLATFORM_RE = re.compile(r'^\s*platform\s*:\s*"tensorrt_plan"', re.M)
_BACKEND_PYTHON_RE = re.compile(r'^\s*backend\s*:\s*"python"', re.M)


class ServerError(Error):
    """No usable tritonserver here, or it cannot serve the repository."""

    exit_code = EXIT_MISSING


@dataclass(frozen=True)
class Server:
    """A tritonserver installation: ``home/bin/tritonserver`` and ``home/backends``."""

    home: Path

    @property
    def executable(self) -> Path:
        return self.home / "bin" / "tritonserver"

    @property
    def unpacked(self) -> bool:
        """Unpacked by scripts/setup_tritonserver.sh (bundled lib/, a stub for one Python, python-env/)."""
        return (self.home / "PYTHON_VERSION").is_file()

    def python_backend_problem(self) -> str | None:
        """Why this server's Python backend cannot run models here (None: it can)."""
        if not self.unpacked:
            return None  # NVIDIA's container: the backend brings its own Python
        stub = (self.home / "PYTHON_VERSION").read_text().strip()
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"
        if stub != here:
            return (f"the Python backend stub in {self.home} is for Python {stub}, but this is Python {here}: "
                    f"rerun {SETUP_SCRIPT} with this python3")
        if not (self.home / PYTHON_ENV / "bin" / "python3").exists():
            return f"{self.home / PYTHON_ENV} (the Python backend's numpy < 2 environment) is missing: rerun {SETUP_SCRIPT}"
        if not python_libdir():
            return f"this Python ({sys.executable}) has no shared libpython, which the Python backend stub links"
        return None


def python_libdir() -> str | None:
    """The folder of this interpreter's shared libpython (the unpacked server's stub links it)."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        return None
    libdir = sysconfig.get_config_var("LIBDIR")
    name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
    return libdir if libdir and (Path(libdir) / name).exists() else None


def _candidates(home: str | os.PathLike | None) -> list[tuple[str, Path]]:
    if home is not None:
        return [("--home", Path(home))]
    if os.environ.get(HOME_ENV):
        return [(HOME_ENV, Path(os.environ[HOME_ENV]))]
    found = [("the checkout", _CHECKOUT / ".deps" / "tritonserver")]
    on_path = shutil.which("tritonserver")
    if on_path:
        found.append(("PATH", Path(on_path).resolve().parent.parent))
    found.append(("NVIDIA's container", CONTAINER_HOME))
    return found


def find_server(home: str | os.PathLike | None = None) -> Server:
    """The tritonserver to use: ``home``, else $TRT_GN_TRITONSERVER_HOME, else the checkout's
    .deps/tritonserver, else ``tritonserver`` on PATH, else /opt/tritonserver. An explicit choice
    (``home`` or the variable) is never replaced by another server."""
    candidates = _candidates(home)
    for _, path in candidates:
        if (path / "bin" / "tritonserver").is_file():
            return Server(path.resolve())
    if len(candidates) == 1:
        source, path = candidates[0]
        raise ServerError(f"{source} {path}: no bin/tritonserver there",
                          f"give the folder that holds bin/tritonserver, or run `bash {SETUP_SCRIPT} DIR`")
    looked = ", ".join(str(p) for _, p in candidates)
    raise ServerError(f"no tritonserver found (looked in {looked})",
                      f"run `bash {SETUP_SCRIPT}` in a trt_gn checkout, set {HOME_ENV}, or use NVIDIA's Triton "
                      f"container (nvcr.io/nvidia/tritonserver)")


@dataclass(frozen=True)
class RepositoryModels:
    """What a model repository holds, as far as starting the server needs to know."""

    python: tuple[str, ...]  # models served by the Python backend
    tensorrt: tuple[str, ...]  # models on platform tensorrt_plan
    plugin_shims: tuple[Path, ...]  # the distinct autoload shims beside tensorrt_plan models, under the repository


def scan_repository(repository: str | os.PathLike) -> RepositoryModels:
    python, tensorrt, shims, seen = [], [], [], set()
    for config in sorted(Path(repository).glob("*/config.pbtxt")):
        model = config.parent
        text = config.read_text(errors="replace")
        if _BACKEND_PYTHON_RE.search(text):
            python.append(model.name)
        elif _PLATFORM_RE.search(text):
            tensorrt.append(model.name)
            shim = model / spec.PLUGIN_AUTOLOAD_LIBRARY
            if shim.is_file():
                digest = hashlib.sha256(shim.read_bytes()).hexdigest()
                if digest not in seen:
                    seen.add(digest)
                    shims.append(shim)
    return RepositoryModels(tuple(python), tuple(tensorrt), tuple(shims))


@dataclass
class Launch:
    """A tritonserver command: ``argv``, the variables ``env_prefix`` puts in front of the current
    ones (``environment()`` is the whole environment to start it with), and where it listens."""

    argv: list[str]
    env_prefix: dict[str, str] = field(default_factory=dict)
    http: str = ""  # host:port
    grpc: str = ""
    metrics: str | None = None
    shm_prefix: str | None = None  # the Python backend's shared-memory region prefix, where one was set

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        for name, prefix in self.env_prefix.items():
            env[name] = os.pathsep.join(p for p in (prefix, env.get(name)) if p)
        return env

    def shell_command(self) -> str:
        """The command as one shell line (sh, bash): the variables extend the caller's own."""
        assignments = [f"{name}={shlex.quote(prefix)}${{{name}:+:${name}}}" for name, prefix in self.env_prefix.items()]
        return " ".join(assignments + [shlex.quote(a) for a in self.argv])


def launch(repository: str | os.PathLike, server: Server, *, address: str = "127.0.0.1",
           http_port: int = DEFAULT_PORTS["http"], grpc_port: int = DEFAULT_PORTS["grpc"],
           metrics_port: int | None = DEFAULT_PORTS["metrics"], model_control: str = "none",
           strict_config: bool = True, models: RepositoryModels | None = None,
           python_shm_prefix: str | None = None, extra_args: Sequence[str] = ()) -> Launch:
    """The command that serves ``repository`` with ``server``.

    ``strict_config``: --disable-auto-complete-config, so Triton checks each config.pbtxt as written
    (the configs `trt-gn triton` writes are complete; with auto-complete a tensorrt_plan config is
    only checked once the TensorRT backend has opened the plan). ``metrics_port`` None: no metrics.
    ``python_shm_prefix``: the Python backend's shared-memory region prefix (one per server, so two
    servers on one machine never share regions and leftovers can be found).
    """
    if model_control not in MODEL_CONTROL_MODES:
        raise Error(f"unknown model control mode '{model_control}'", f"choose one of {', '.join(MODEL_CONTROL_MODES)}")
    repository = Path(repository).resolve()
    models = models if models is not None else scan_repository(repository)
    argv = [str(server.executable), f"--model-repository={repository}",
            f"--backend-directory={server.home / 'backends'}"]
    if (server.home / "caches").is_dir():
        argv.append(f"--cache-directory={server.home / 'caches'}")
    argv += [f"--http-address={address}", f"--http-port={int(http_port)}", f"--grpc-address={address}",
             f"--grpc-port={int(grpc_port)}"]
    if metrics_port is None:
        argv.append("--allow-metrics=false")
    else:
        argv += [f"--metrics-address={address}", f"--metrics-port={int(metrics_port)}"]
    argv.append(f"--model-control-mode={model_control}")
    if strict_config:
        argv.append("--disable-auto-complete-config")
    if models.plugin_shims:
        argv.append(f"--backend-config=tensorrt,plugins={';'.join(str(s.resolve()) for s in models.plugin_shims)}")
    if python_shm_prefix:
        argv.append(f"--backend-config=python,shm-region-prefix-name={python_shm_prefix}")
    argv += list(extra_args)

    env_prefix = {}
    if server.unpacked:
        # The bundled libraries, and the libpython the Python backend stub links.
        env_prefix["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(server.home / "lib"), python_libdir()) if p)
        # The stub's embedded interpreter finds its prefix through `python3` on PATH (it ignores
        # PYTHONPATH): the server's own environment (numpy < 2, onnxruntime) comes first.
        env_prefix["PATH"] = str(server.home / PYTHON_ENV / "bin")
    host = "127.0.0.1" if address in ("0.0.0.0", "") else address
    return Launch(argv=argv, env_prefix=env_prefix, http=f"{host}:{int(http_port)}", grpc=f"{host}:{int(grpc_port)}",
                  metrics=None if metrics_port is None else f"{host}:{int(metrics_port)}",
                  shm_prefix=python_shm_prefix)


def check_backends(server: Server, models: RepositoryModels) -> None:
    """Refuse a repository whose models need a backend this server does not have."""
    for backend, names in (("python", models.python), ("tensorrt", models.tensorrt)):
        if names and not (server.home / "backends" / backend).is_dir():
            hint = ("serve it in NVIDIA's Triton container (nvcr.io/nvidia/tritonserver), or serve the fused ONNX "
                    "model with `trt-gn triton MODEL.onnx --backend python`" if backend == "tensorrt"
                    else "use a tritonserver with the Python backend (NVIDIA's container has it)")
            raise ServerError(f"the repository's {backend} models ({', '.join(names)}) need Triton's {backend} "
                              f"backend, which {server.home / 'backends'} does not have", hint)
    if models.python:
        problem = server.python_backend_problem()
        if problem:
            raise ServerError(problem)


def container_command(repository: str | os.PathLike, models: RepositoryModels | None = None) -> str:
    """The command for NVIDIA's Triton container, where ``tritonserver`` is on PATH."""
    repository = Path(repository)
    models = models if models is not None else scan_repository(repository)
    words = ["tritonserver", f"--model-repository={repository}"]
    if models.plugin_shims:
        words.append(f"--backend-config=tensorrt,plugins={';'.join(str(s) for s in models.plugin_shims)}")
    return " ".join(shlex.quote(w) for w in words)


class ServerProcess:
    """A tritonserver started from a ``Launch``, in a session of its own (so the Python backend's
    stub processes go with it), always stopped by its PID: SIGTERM, then SIGKILL of its process
    group, then removal of the Python backend's shared-memory regions left under its prefix."""

    def __init__(self, launch: Launch, *, output=None):
        self.launch = launch
        self.output = output  # a file for stdout and stderr; None: this process's own
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self) -> "ServerProcess":
        self.proc = subprocess.Popen(self.launch.argv, env=self.launch.environment(), stdout=self.output,
                                     stderr=subprocess.STDOUT if self.output is not None else None,
                                     start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def answers(self, path: str) -> bool:
        """GET http://<http><path> answered 200."""
        try:
            with urllib.request.urlopen(f"http://{self.launch.http}{path}", timeout=1) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def wait_for(self, path: str, timeout: float | None = None) -> None:
        """Until GET ``path`` answers 200; ServerError if the server exits first, TimeoutError after ``timeout`` s."""
        started = time.monotonic()
        while not self.answers(path):
            if self.proc.poll() is not None:
                raise ServerError(f"tritonserver exited with code {self.proc.returncode} before {path} answered",
                                  "its log says why", exit_code=EXIT_FAILED)
            if timeout is not None and time.monotonic() - started > timeout:
                raise TimeoutError(f"tritonserver did not answer {path} within {timeout:.0f} s")
            time.sleep(0.2)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            try:  # the server's own session: its stubs too (a server whose stub failed ignores SIGTERM)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if self.proc.poll() is None:
                self.proc.wait(timeout=10)
            for leftover in self.shm_leftovers():
                leftover.unlink(missing_ok=True)

    def shm_leftovers(self) -> list[Path]:
        if not self.launch.shm_prefix:
            return []
        return sorted(Path("/dev/shm").glob(f"{self.launch.shm_prefix}*"))


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run_foreground(launch: Launch, *, stop_timeout: float) -> int:
    """Start the server, say where it listens once it is ready, and wait for it: 0 when it stops by
    itself without error; Ctrl-C or SIGTERM stop it (EXIT_INTERRUPTED); ServerError when it exits
    with an error."""
    process = ServerProcess(launch)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
    try:
        print(f"starting: {launch.shell_command()}", flush=True)
        process.start()
        process.wait_for("/v2/health/ready")
        metrics = f", metrics http://{launch.metrics}/metrics" if launch.metrics else ""
        print(f"tritonserver is ready (pid {process.pid}): HTTP http://{launch.http}, gRPC {launch.grpc}{metrics}; "
              f"Ctrl-C stops it", flush=True)
        code = process.proc.wait()
        if code != 0:
            raise ServerError(f"tritonserver exited with code {code}", "its log says why", exit_code=EXIT_FAILED)
        return 0
    except KeyboardInterrupt:
        if process.proc is not None:
            process.stop(stop_timeout)
            print(f"stopped tritonserver (pid {process.pid})", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        process.stop(stop_timeout)  # a no-op once it has exited, but its stubs and shm go too
        if in_main:
            signal.signal(signal.SIGTERM, previous)
