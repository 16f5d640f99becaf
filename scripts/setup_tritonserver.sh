#!/usr/bin/env bash
# Unpack the tritonserver that ships inside the nvidia-pytriton wheel into a folder of its own
# (default: <repository>/.deps/tritonserver, git-ignored), for the tests' real Triton server
# (tests/tritonserver.py) and for trying `trt-gn triton --backend python` repositories locally.
#
#   bash scripts/setup_tritonserver.sh [DEST]
#
# The wheel is downloaded with pip (no dependencies) and unpacked, never installed: nvidia-pytriton
# pins numpy < 2, which must not reach the project's environment. What DEST holds afterwards:
#   bin/tritonserver, backends/python/ (the Python backend, with the stub for this python3),
#   caches/, lib/ (the server's bundled shared libraries), VERSION, PYTHON_VERSION, and
#   python-env/: a venv of this python3 with numpy < 2 and onnxruntime for the Python backend's
#   models. The stub (built with a pybind11 that reads numpy 1.x's array descriptors) garbles
#   output tensors under numpy 2 ("output tensor shape does not match size of output"); its
#   embedded interpreter finds its prefix through `python3` on PATH, so the server is started
#   with python-env/bin first on PATH (tests/tritonserver.py does).
# The Python backend's stub embeds the python3 that runs this script: it needs that interpreter's
# shared libpython (pyenv builds with --enable-shared, Debian's python3.X has libpython3.X).
set -euo pipefail

PYTRITON_VERSION=0.7.0
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/.deps/tritonserver}"
python="${PYTHON:-python3}"

if [ -x "$dest/bin/tritonserver" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "nvidia-pytriton $PYTRITON_VERSION" ]; then
  echo "tritonserver already in $dest"
  exit 0
fi

pyver="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
work="$(mktemp -d "${TMPDIR:-/tmp}/trt_gn_tritonserver.XXXXXX")"
trap 'rm -rf "$work"' EXIT

"$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$work" "nvidia-pytriton==$PYTRITON_VERSION"
wheel="$(ls "$work"/nvidia_pytriton-*.whl)"
# Only the server and its libraries; the pytriton Python package itself is not used.
"$python" - "$wheel" "$work/x" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith(("pytriton/tritonserver/", "nvidia_pytriton.libs/"))]
    z.extractall(sys.argv[2], names)
EOF

stage="$work/stage"
mkdir -p "$stage"
mv "$work/x/pytriton/tritonserver/bin" "$work/x/pytriton/tritonserver/backends" \
   "$work/x/pytriton/tritonserver/caches" "$stage/"
mv "$work/x/nvidia_pytriton.libs" "$stage/lib"
stub="$work/x/pytriton/tritonserver/python_backend_stubs/$pyver/triton_python_backend_stub"
if [ ! -f "$stub" ]; then
  echo "setup_tritonserver: the wheel has no Python backend stub for Python $pyver" \
       "(it has: $(ls "$work/x/pytriton/tritonserver/python_backend_stubs" | tr '\n' ' '))" >&2
  exit 2
fi
# The backend runs the stub found next to libtriton_python.so (what pytriton does at start-up).
cp "$stub" "$stage/backends/python/triton_python_backend_stub"
# The wheel's RPATHs point at ../../nvidia_pytriton.libs; the server is started with lib/ on
# LD_LIBRARY_PATH instead (tests/tritonserver.py).
chmod +x "$stage/bin/tritonserver" "$stage/backends/python/triton_python_backend_stub"
echo "$pyver" > "$stage/PYTHON_VERSION"

rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
mv "$stage" "$dest"

# The Python backend's environment (made in place: a venv records its path); onnxruntime as in the
# project's environment where there is one.
ort="onnxruntime"
if ort_version="$("$python" -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null)"; then
  ort="onnxruntime==$ort_version"
fi
"$python" -m venv "$dest/python-env"
"$dest/python-env/bin/python" -m pip install --quiet --disable-pip-version-check "numpy<2" "$ort"
echo "nvidia-pytriton $PYTRITON_VERSION" > "$dest/VERSION"  # last: marks a complete folder
echo "tritonserver (nvidia-pytriton $PYTRITON_VERSION, Python backend stub for $pyver) in $dest"
