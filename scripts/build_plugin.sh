#!/usr/bin/env bash
# Build the trt_gn TensorRT plugin (libtrt_gn_plugin.so and its self-registering shim
# libtrt_gn_plugin_autoload.so) with CMake, and install both next to the kernels library of the
# installed trt_gn (<package>/lib), where trt_gn finds the plugin without --plugin or
# TRT_GN_PLUGIN_LIBRARY. Run from anywhere in a trt_gn checkout; see --help.
#
# The plugin needs only TensorRT's C++ headers (10 or later), which no PyPI or Debian package ships:
# they are taken from --headers DIR or $TensorRT_ROOT, else the include/ folder of the pinned
# NVIDIA/TensorRT tag is fetched from GitHub's archive (once, into .deps/, git-ignored).
set -euo pipefail

TAG_DEFAULT="v10.16"  # NVIDIA/TensorRT tag: the TensorRT 10 line of the image's NGC release
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prog="build_plugin.sh"

usage() {
    cat <<EOF
usage: bash scripts/build_plugin.sh [--headers DIR] [--tag TAG] [--build-dir DIR] [--python PY]
                                    [--cuda-architectures LIST] [--harness] [--no-install]

Builds libtrt_gn_plugin.so and libtrt_gn_plugin_autoload.so with CMake and installs both into the
lib folder of the trt_gn that PY imports (next to libtrt_gn_kernels.so), where trt_gn looks first
after \$TRT_GN_PLUGIN_LIBRARY.

  --headers DIR     TensorRT 10+ headers: DIR/include/NvInferRuntime.h or DIR/NvInferRuntime.h
                    (default: \$TensorRT_ROOT; else the include/ folder of --tag, fetched)
  --tag TAG         NVIDIA/TensorRT tag to fetch the headers of (default: $TAG_DEFAULT), into
                    .deps/TensorRT-TAG/include (reused when there; needs curl and github.com)
  --build-dir DIR   CMake build folder (default: build-plugin in the checkout)
  --python PY       the Python whose installed trt_gn gets the plugin (default: python3)
  --cuda-architectures LIST
                    CMAKE_CUDA_ARCHITECTURES, e.g. "86;89" (default: the project's list)
  --harness         also build the conformance harness (tests/test_plugin_conformance.py runs it
                    with TRT_GN_PLUGIN_BUILD_DIR=<build-dir>/plugin)
  --no-install      build only; the libraries stay in <build-dir>/plugin

Needs nvcc (the CUDA toolkit), CMake >= 3.24 and a C++17 compiler. The headers must be those of
the TensorRT that loads the plugin's shim (Triton's backend): the plugin library itself works with
TensorRT 10, 11 and TensorRT-RTX from either.
exit codes: 0 built (and installed); 1 the build failed; 2 bad arguments or headers; 3 a program,
the headers or trt_gn missing.
EOF
}

die() { echo "$prog: error: $1" >&2; [ -n "${2:-}" ] && echo "  hint: $2" >&2; exit "${3:-2}"; }

headers="${TensorRT_ROOT:-}"
headers_from="\$TensorRT_ROOT"
tag="$TAG_DEFAULT"
build="$repo/build-plugin"
python="python3"
arches=""
harness=0
install=1
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --headers) [ $# -ge 2 ] || die "--headers needs a folder"; headers="$2"; headers_from="--headers"; shift 2 ;;
        --tag) [ $# -ge 2 ] || die "--tag needs a tag, e.g. $TAG_DEFAULT"; tag="$2"; shift 2 ;;
        --build-dir) [ $# -ge 2 ] || die "--build-dir needs a folder"; build="$2"; shift 2 ;;
        --python) [ $# -ge 2 ] || die "--python needs a program"; python="$2"; shift 2 ;;
        --cuda-architectures) [ $# -ge 2 ] || die "--cuda-architectures needs a list"; arches="$2"; shift 2 ;;
        --harness) harness=1; shift ;;
        --no-install) install=0; shift ;;
        *) die "unknown argument '$1'" "see \`bash scripts/build_plugin.sh --help\`" ;;
    esac
done

command -v cmake >/dev/null || die "cmake is not installed" "install CMake 3.24 or later (pip install cmake)" 3
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] \
    || die "nvcc is not installed: the plugin links the CUDA kernels" "install the CUDA toolkit" 3

# The headers: a folder holding NvInferRuntime.h, or one whose include/ does.
if [ -z "$headers" ]; then
    headers="$repo/.deps/TensorRT-$tag"
    headers_from="--tag $tag"
    if [ ! -f "$headers/include/NvInferRuntime.h" ]; then
        command -v curl >/dev/null || die "curl is not installed: it fetches the TensorRT headers" \
            "install curl, or pass --headers DIR (or set TensorRT_ROOT) to TensorRT 10+ headers" 3
        url="https://github.com/NVIDIA/TensorRT/archive/refs/tags/$tag.tar.gz"
        echo "$prog: fetching the include/ folder of NVIDIA/TensorRT $tag from $url"
        mkdir -p "$repo/.deps"
        staging="$(mktemp -d "$repo/.deps/.fetch.XXXXXX")"
        trap 'rm -rf "$staging"' EXIT
        # Only */include/ is extracted; the archive's top folder is TensorRT-<version>.
        curl -fsSL --retry 3 -o "$staging/archive.tar.gz" "$url" \
            || die "could not fetch the headers of NVIDIA/TensorRT $tag from $url" \
                   "check the tag and the network, or pass --headers DIR (or set TensorRT_ROOT) to TensorRT 10+ headers" 3
        tar -xzf "$staging/archive.tar.gz" -C "$staging" --strip-components=1 --wildcards '*/include/*' \
            || die "$url is not a TensorRT source archive with an include/ folder" "pick another --tag" 2
        rm -f "$staging/archive.tar.gz"
        [ -f "$staging/include/NvInferRuntime.h" ] || die "$url has no include/NvInferRuntime.h" "pick another --tag" 2
        rm -rf "$headers"
        mv "$staging" "$headers"  # one rename: a partial fetch is never taken for the headers
        trap - EXIT
    fi
fi
if [ -f "$headers/include/NvInferRuntime.h" ]; then
    root="$headers"
elif [ -f "$headers/NvInferRuntime.h" ]; then
    root="$(cd "$headers/.." && pwd)"
    [ "$(basename "$headers")" = include ] \
        || die "$headers holds NvInferRuntime.h but is not named include/" "pass the folder above an include/ folder"
else
    die "no TensorRT headers in $headers ($headers_from): neither $headers/include/NvInferRuntime.h nor $headers/NvInferRuntime.h" \
        "point --headers (or TensorRT_ROOT) at a TensorRT 10+ install or NVIDIA/TensorRT checkout" 3
fi
root="$(cd "$root" && pwd)"
major="$(sed -nE 's/^#define (NV_TENSORRT_MAJOR|TRT_MAJOR_ENTERPRISE) ([0-9]+).*/\2/p' "$root/include/NvInferVersion.h" 2>/dev/null | head -n1)"
minor="$(sed -nE 's/^#define (NV_TENSORRT_MINOR|TRT_MINOR_ENTERPRISE) ([0-9]+).*/\2/p' "$root/include/NvInferVersion.h" 2>/dev/null | head -n1)"
[ -n "$major" ] || die "$root/include/NvInferVersion.h does not say its TensorRT version" "use TensorRT 10+ headers"
[ "$major" -ge 10 ] || die "$root/include holds TensorRT $major.$minor headers; the plugin (IPluginV3) needs 10 or later" \
    "use TensorRT 10+ headers"
echo "$prog: TensorRT $major.$minor headers in $root/include ($headers_from)"

# Where the installed trt_gn keeps its libraries (asked from /, so a checkout never shadows it).
target=""
if [ "$install" -eq 1 ]; then
    command -v "$python" >/dev/null || die "$python is not installed" "pass --python PY, or --no-install" 3
    package="$(cd / && "$python" -c 'import importlib.util as u; s = u.find_spec("trt_gn"); print(s.submodule_search_locations[0] if s else "")')"
    [ -n "$package" ] || die "trt_gn is not installed for $python" \
        "pip install . first (or pass --python PY, or --no-install and set TRT_GN_PLUGIN_LIBRARY)" 3
    target="$package/lib"
    mkdir -p "$target"
    [ -w "$target" ] || die "$target is not writable" "run as the owner of that environment, or use --no-install" 2
fi

mkdir -p "$build"
build="$(cd "$build" && pwd)"
configure=(-S "$repo/plugin_src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTensorRT_ROOT="$root"
           -DTRT_GN_BUILD_TESTS="$([ "$harness" -eq 1 ] && echo ON || echo OFF)")
[ -n "$arches" ] && configure+=(-DCMAKE_CUDA_ARCHITECTURES="$arches")
[ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null && configure+=(-G Ninja)
targets=(trt_gn_plugin trt_gn_plugin_autoload)
[ "$harness" -eq 1 ] && targets+=(trt_gn_plugin_conformance)
echo "$prog: configuring $build"
log="$(mktemp)"
if ! cmake "${configure[@]}" >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"
    die "CMake could not configure $repo/plugin_src (see above)" "" 1
fi
if grep -q "TensorRT plugin skipped" "$log"; then
    line="$(grep "TensorRT plugin skipped" "$log")"; rm -f "$log"
    die "CMake skipped the plugin: ${line#*skipped: }" "" 2
fi
rm -f "$log"
echo "$prog: building ${targets[*]} (the CUDA kernels take a few minutes on a few cores)"
cmake --build "$build" --target "${targets[@]}" || die "the build failed (see above)" "" 1

plugin="$build/plugin/libtrt_gn_plugin.so"
shim="$build/plugin/libtrt_gn_plugin_autoload.so"
[ -f "$plugin" ] && [ -f "$shim" ] || die "the build wrote no $plugin or $shim" "" 1
echo "$prog: built $plugin"
echo "$prog: built $shim"
if [ "$install" -eq 0 ]; then
    echo "$prog: not installed (--no-install): export TRT_GN_PLUGIN_LIBRARY=$plugin"
    exit 0
fi
# Each file under a temporary name in the target folder, then renamed: never half-written.
for lib in "$plugin" "$shim"; do
    name="$(basename "$lib")"
    cp "$lib" "$target/.$name.tmp.$$"
    chmod 0755 "$target/.$name.tmp.$$"
    mv -f "$target/.$name.tmp.$$" "$target/$name"
done
echo "$prog: installed $target/libtrt_gn_plugin.so and $target/libtrt_gn_plugin_autoload.so"
found="$(cd / && env -u TRT_GN_PLUGIN_LIBRARY "$python" -c 'from trt_gn import abi; print(abi.find_plugin_library())')" \
    || die "trt_gn does not find the installed plugin" "" 1
[ "$(realpath "$found")" = "$(realpath "$target/libtrt_gn_plugin.so")" ] \
    || die "trt_gn finds $found, not the plugin installed into $target" "" 1
echo "$prog: trt_gn finds the plugin at $found (trt-gn build, pipeline, triton use it without --plugin)"
if [ -n "${TRT_GN_PLUGIN_LIBRARY:-}" ] && [ "$TRT_GN_PLUGIN_LIBRARY" != "$found" ]; then
    echo "$prog: note: TRT_GN_PLUGIN_LIBRARY=$TRT_GN_PLUGIN_LIBRARY is set in this shell and takes precedence"
fi
