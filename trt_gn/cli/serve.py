"""`trt-gn serve`: start a Triton Inference Server on a model repository written by `trt-gn triton`,
in the foreground, with the flags and environment that server needs (trt_gn.tritonserver)."""

from __future__ import annotations

import argparse

EPILOG = """\
examples:
  trt-gn triton vae_decoder.fused.onnx --backend python --repository models --model vae_decoder
  trt-gn serve models                   # HTTP 127.0.0.1:8000, gRPC 127.0.0.1:8001, metrics :8002
  trt-gn serve models --address 0.0.0.0 --http-port 9000 --grpc-port 9001 --metrics-port 9002
  trt-gn serve models --print-command   # print the command line and environment; start nothing

which tritonserver: --home DIR, else $TRT_GN_TRITONSERVER_HOME, else the checkout's
.deps/tritonserver (made by `bash scripts/setup_tritonserver.sh`: the Python backend, no TensorRT
backend), else `tritonserver` on PATH, else /opt/tritonserver (NVIDIA's Triton container, which has
the TensorRT backend). Models on the TensorRT backend get the plugin through the autoload shim that
`trt-gn triton` put next to their config.pbtxt (--backend-config=tensorrt,plugins=...). Configs are
checked as written (--disable-auto-complete-config) unless --auto-complete-config.

The server's log goes to this terminal; a line says when it is ready and where it listens. Ctrl-C
or SIGTERM stops it (SIGTERM to the server; SIGKILL of its process group after --exit-timeout + 10 s).

exit codes: 0 the server stopped by itself without error; 1 it failed to start or exited with an
error; 2 bad arguments; 3 no tritonserver here, or it lacks a backend the repository needs;
130 stopped by Ctrl-C or SIGTERM.
"""

PROG = "trt-gn serve"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number (1..65535)")
    return port


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of seconds >= 0")
    return value


def register(subparsers) -> None:
    from ..tritonserver import DEFAULT_PORTS, MODEL_CONTROL_MODES

    p = subparsers.add_parser(
        "serve", help="start Triton Inference Server on a repository written by `trt-gn triton` (foreground)",
        description="Start a Triton Inference Server on MODEL_REPOSITORY in the foreground, with the flags, "
        "backend folder, library path and Python environment its backends need; print where it listens "
        "once it is ready.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("repository", metavar="MODEL_REPOSITORY", help="model repository folder (`trt-gn triton --repository`)")
    p.add_argument("--home", metavar="DIR", help="tritonserver installation: the folder holding bin/tritonserver")
    p.add_argument("--address", default="127.0.0.1", help="address the HTTP, gRPC and metrics endpoints bind "
                   "(default: 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--http-port", type=_port, default=DEFAULT_PORTS["http"], metavar="N", help="default: 8000")
    p.add_argument("--grpc-port", type=_port, default=DEFAULT_PORTS["grpc"], metavar="N", help="default: 8001")
    p.add_argument("--metrics-port", type=_port, default=DEFAULT_PORTS["metrics"], metavar="N", help="default: 8002")
    p.add_argument("--no-metrics", action="store_true", help="no metrics endpoint")
    p.add_argument("--model-control", choices=MODEL_CONTROL_MODES, default="none",
                   help="Triton's model control mode (default: none: load every model at start, stop if one fails)")
    p.add_argument("--auto-complete-config", action="store_true",
                   help="let Triton complete the configs from the models (default: check them as written)")
    p.add_argument("--exit-timeout", type=_seconds, default=30, metavar="S",
                   help="seconds the server gets to finish requests when stopped (default: 30)")
    p.add_argument("--server-arg", dest="server_args", action="append", default=[], metavar="ARG",
                   help="one more tritonserver argument, e.g. --server-arg=--log-verbose=1 (repeatable)")
    p.add_argument("--print-command", action="store_true", help="print the command and environment; start nothing")
    p.set_defaults(func=run)


def run(args) -> int:
    return _serve(args)


def _serve(args) -> int:
    import os
    from pathlib import Path

    from .. import tritonserver
    from ..errors import Error

    repository = Path(args.repository)
    if not repository.exists():
        raise Error(f"model repository {repository} does not exist", "write one with `trt-gn triton`")
    if not repository.is_dir():
        raise Error(f"model repository {repository} is not a folder")
    ports = [args.http_port, args.grpc_port] + ([] if args.no_metrics else [args.metrics_port])
    if len(set(ports)) != len(ports):
        raise Error(f"the HTTP, gRPC and metrics ports must differ, got {', '.join(map(str, ports))}")
    server = tritonserver.find_server(args.home)
    models = tritonserver.scan_repository(repository)
    tritonserver.check_backends(server, models)
    launch = tritonserver.launch(
        repository, server, address=args.address, http_port=args.http_port, grpc_port=args.grpc_port,
        metrics_port=None if args.no_metrics else args.metrics_port, model_control=args.model_control,
        strict_config=not args.auto_complete_config, models=models,
        # One prefix per server: its leftovers can be found, and two servers never share regions.
        python_shm_prefix=None if args.print_command else f"trtgn_serve{os.getpid()}_",
        extra_args=[f"--exit-timeout-secs={args.exit_timeout}", *args.server_args])
    if args.print_command:
        print(launch.shell_command())
        return 0
    return tritonserver.run_foreground(launch, stop_timeout=args.exit_timeout + 10)
