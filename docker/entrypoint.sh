#!/usr/bin/env bash
# First start: build the TensorRT engine for THIS GPU and TensorRT version (engines are specific
# to both), write the Triton model repository, then exec tritonserver with the plugin loaded
# through its self-registering shim (the backend only dlopen()s plugins=; see docker/README.md).
# Later starts reuse the engine from $TRT_GN_ENGINE_DIR (mount a volume there) when the ONNX model,
# the build arguments, the GPU, the TensorRT version and the plugin library are unchanged.
# NVIDIA's entrypoint (/opt/nvidia/nvidia_entrypoint.sh) runs first and execs this script.
set -euo pipefail

die() { echo "trt-gn entrypoint: error: $1" >&2; [ -n "${2:-}" ] && echo "  hint: $2" >&2; exit "${3:-2}"; }

onnx="${TRT_GN_ONNX}"
model="${TRT_GN_MODEL_NAME}"
engines="${TRT_GN_ENGINE_DIR}"
repository="${TRT_GN_MODEL_REPOSITORY}"
# Default profile: batch 1..4, 64..128 latent pixels (SD 1.5 VAE decoder / UNet at 512..1024 px).
build_args="${TRT_GN_BUILD_ARGS:---precision fp16 --batch 1:1:4 --height 64:64:128 --width 64:64:128}"
triton_args="${TRT_GN_TRITON_ARGS:-}"

[ -f "$onnx" ] || die "no ONNX model at $onnx" "mount the fused model: -v \$PWD/model.onnx:$onnx:ro (and its .data file next to it)"
python3 -c "import tensorrt" 2>/dev/null || die "the TensorRT Python bindings do not import in this image" "rebuild the image; see docker/README.md" 3
command -v nvidia-smi >/dev/null || die "no GPU visible in the container" "run with --gpus all (NVIDIA Container Toolkit)" 3
mkdir -p "$engines" "$repository"

plugin="$(python3 -c 'from trt_gn import abi; print(abi.find_plugin_library())')" \
    || die "trt_gn does not find its plugin library in this image" "rebuild the image; see docker/README.md" 3
gpu="$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader -i 0)"
trt_version="$(python3 -c 'import tensorrt; print(tensorrt.__version__)')"
onnx_sum="$(sha256sum "$onnx" | cut -d' ' -f1)"
plugin_sum="$(sha256sum "$plugin" | cut -d' ' -f1)"
# The engine serializes the plugin's fields, not its code, but a rebuilt plugin (other kernels,
# other TensorRT headers) must not run under an engine tuned for the old one.
key="$(printf '%s\n' "$onnx_sum" "$build_args" "$gpu" "$trt_version" "$plugin_sum" | sha256sum | cut -c1-16)"
plan="$engines/${model}-${key}.plan"

echo "trt-gn: GPU $gpu, TensorRT $trt_version, plugin $plugin (sha256 ${plugin_sum:0:16}), model $onnx"
if [ -f "$plan" ]; then
    echo "trt-gn: reusing $plan"
else
    echo "trt-gn: building $plan (first start for this GPU/TensorRT/model; the timing cache speeds up rebuilds)"
    # shellcheck disable=SC2086  # build_args is a list of flags
    python3 -m trt_gn.cli build "$onnx" -o "$plan" --timing-cache "$engines/timing.cache" $build_args \
        || die "the engine build failed (see above)" "check TRT_GN_BUILD_ARGS against the model's inputs" 1
fi

# shellcheck disable=SC2086  # triton_args is a list of flags
python3 -m trt_gn.cli triton "$plan" --repository "$repository" --model "$model" --onnx "$onnx" \
    --overwrite $triton_args || die "could not write the model repository" "" 1

exec tritonserver --model-repository="$repository" \
    --backend-config=tensorrt,plugins="$repository/$model/libtrt_gn_plugin_autoload.so" "$@"
