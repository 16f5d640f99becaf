#!/usr/bin/env bash
# The GPU run, in one command for the device machine (H100/H200, no internet):
# builds the native code for sm_90, then runs the stages named on the command
# line, writing logs and results under $OUT.
#
#   bash scripts/gpu_check.sh [tests] [fuzz] [plans] [sanitize] [plugin] [arch80] [ab] [bench] [vae] [floor] [pipeline] [profile] [host]
#
# Without stages it runs tests, fuzz, sanitize, plugin, arch80, bench and vae.
# fuzz: FUZZ_SEEDS (default 1 2 3) x FUZZ_CASES (default 10000) random cases.
# plans: AB_OLD's plans against the working tree's on the fuzz cases (described, not run).
# ab: trt_gn/lab/ab.py, AB_OLD (a revision, a folder holding plugin_src/ or a .so) against
# the working tree, on the shape list (AB_ARGS adds options).
# host: the op's host time per call against stock PyTorch's (trt_gn/lab/host_overhead.py), with its
# C++ implementation (built for this torch first) and with its Python one.
#
# Pure-Python test dependencies missing there travel as wheels in .whl/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
stages=${*:-tests fuzz sanitize plugin arch80 bench vae}
export PYTHONUNBUFFERED=1

if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"

trt_args=()
[ -d .deps/TensorRT/include ] && trt_args=(-DTensorRT_ROOT="$PWD/.deps/TensorRT")
t0=$(date +%s)
cmake -S plugin_src -B build-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 "${trt_args[@]}" ${CMAKE_EXTRA:-} >"$OUT/cmake.log" 2>&1 \
  && cmake --build build-gpu >>"$OUT/cmake.log" 2>&1 || { tail -40 "$OUT/cmake.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export TRT_GN_KERNELS_LIBRARY=$PWD/build-gpu/libtrt_gn_kernels.so
export TRT_GN_EXPECT_PTX_ARCH=90  # tests/gpu/test_gpu_runtime.py::test_kernels_ptx_arch
export TRT_GN_PLUGIN_BUILD_DIR=$PWD/build-gpu/plugin
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
rc=0
for s in $stages; do
  echo "=== $s"
  case $s in
    tests)
      timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests} -rs 2>&1 | tee "$OUT/tests.log" | tail -25 || rc=1 ;;
    fuzz)
      for seed in ${FUZZ_SEEDS:-1 2 3}; do
        timeout 300 python3 -m trt_gn.cli fuzz --cases ${FUZZ_CASES:-10000} --seed $seed --quiet >"$OUT/fuzz-$seed.log" 2>&1 \
          || rc=1
        echo "fuzz seed $seed:"; grep -vE "^\|---" "$OUT/fuzz-$seed.log" | tail -34
      done ;;
    sanitize)
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
        # racecheck: only trt_gn's kernels (all named gn*), PyTorch's float64 reductions of the
        # reference report hazards of their own. Not the other tools: initcheck filtered so would not
        # see PyTorch's kernels write the inputs, and call every read of them uninitialised.
        filter=(); [ "$tool" = racecheck ] && filter=(--kernel-name kns=gn)
        timeout ${SANITIZE_TIMEOUT:-300} compute-sanitizer --tool $tool "${filter[@]}" --error-exitcode 9 \
          python3 tests/gpu/sanitize_cases.py ${SANITIZE_ARGS:-} \
          >"$OUT/sanitize-$tool.log" 2>&1; echo "$tool exit $?"; tail -2 "$OUT/sanitize-$tool.log"
      done ;;
    plans)
      # AB_OLD's planner against the working tree's on the fuzz command's cases (plans described,
      # no kernel run): every plan must be the same. Without pre-add draws: a library before ABI 4
      # cannot plan one.
      old=$(python3 -m trt_gn.lab.ab --variant old=${AB_OLD:?AB_OLD names the old variant} --build-only \
            --out /tmp/plans-ab 2>"$OUT/plans-build.log" | tail -1 | sed 's/^old: //')
      [ -f "$old" ] || { echo "plans: no old build: $(tail -3 "$OUT/plans-build.log")"; rc=1; continue; }
      for seed in ${FUZZ_SEEDS:-1 2 3}; do
        TRT_GN_KERNELS_LIBRARY=$old python3 -m trt_gn.cli fuzz --plans-only --no-pre-add --cases ${FUZZ_CASES:-10000} \
          --seed $seed --plans /tmp/plans-old-$seed.csv | tail -1
        python3 -m trt_gn.cli fuzz --plans-only --no-pre-add --cases ${FUZZ_CASES:-10000} --seed $seed \
          --plans /tmp/plans-new-$seed.csv | tail -1
        python3 -m trt_gn.lab.compare_plans /tmp/plans-old-$seed.csv /tmp/plans-new-$seed.csv | tail -13 || rc=1
      done ;;
    ab)
      timeout ${AB_TIMEOUT:-540} python3 -m trt_gn.lab.ab --variant old=${AB_OLD:?AB_OLD names the old variant} --variant new=. \
          --out "$OUT/ab" ${AB_ARGS:-} 2>&1 | tee "$OUT/ab.log" | tail -50 || rc=1 ;;
    plugin)
      (cd build-gpu && timeout 240 ctest --output-on-failure 2>&1 | tee "$OUT/ctest.log" | tail -20) || rc=1
      if [ -x build-gpu/plugin/trt_gn_plugin_conformance ]; then
        timeout 240 build-gpu/plugin/trt_gn_plugin_conformance build-gpu/plugin/libtrt_gn_plugin.so >"$OUT/conformance.log" 2>&1
        echo "conformance exit $?"; grep -E "^(FAIL|conformance:)" "$OUT/conformance.log" | tail -20
      fi ;;
    pipeline)
      timeout 300 python3 -m trt_gn.cli pipeline --out "$OUT/pipeline" --no-progress 2>&1 | tee "$OUT/pipeline.log" | tail -25 ;;
    arch80)
      # The kernels built for sm_80 alone run here from their compute_80 PTX,
      # without the code under __CUDA_ARCH__ >= 900: the dispatcher must keep
      # the cluster and on-chip paths off, and every output still be right.
      cmake -S plugin_src -B build-gpu-sm80 -G Ninja -DCMAKE_CUDA_ARCHITECTURES=80 -DTRT_GN_BUILD_PLUGIN=OFF \
          -DTRT_GN_BUILD_TESTS=OFF >"$OUT/cmake-sm80.log" 2>&1 && cmake --build build-gpu-sm80 >>"$OUT/cmake-sm80.log" 2>&1 \
        || { tail -20 "$OUT/cmake-sm80.log"; rc=1; continue; }
      TRT_GN_KERNELS_LIBRARY=$PWD/build-gpu-sm80/libtrt_gn_kernels.so TRT_GN_EXPECT_PTX_ARCH=80 timeout 400 \
          python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_kernels.py tests/gpu/test_gpu_runtime.py \
          -k "shape_list or on_chip or cluster_plans or streaming_path or ptx_arch" -rs 2>&1 \
        | tee "$OUT/tests-sm80.log" | tail -5 || rc=1 ;;
    floor)
      # What a single pass costs next to trt_gn (plugin_src/tools/floor_probe.cu).
      timeout 120 build-gpu/trt_gn_floor_probe 2>&1 | tee "$OUT/floor.log" || rc=1 ;;
    bench)
      # With the torch.compile variants (a compile each per shape, dtype and layout) the whole list in
      # both dtypes may take longer than one call of the device machine: BENCH_ARGS="--dtypes fp16", then bf16.
      timeout ${BENCH_TIMEOUT:-540} python3 -m trt_gn.cli bench --out "$OUT/bench" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -60 || rc=1 ;;
    profile)
      timeout 300 ncu --clock-control none --cache-control ${NCU_CACHE:-all} -k regex:gn --csv --page raw \
        --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__cluster_dim_x,launch__registers_per_thread,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
        python3 -m trt_gn.lab.profile ${PROFILE_SHAPES:-} > "$OUT/profile.csv" 2>"$OUT/profile.err"; echo "ncu exit $?"
      python3 - "$OUT/profile.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[2:]
col = {h: i for i, h in enumerate(hdr)}
keys = ["gpu__time_duration.sum", "launch__grid_size", "launch__block_size", "launch__cluster_dim_x", "launch__registers_per_thread",
        "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "sm__warps_active.avg.pct_of_peak_sustained_active"]
seen = set()
for r in rows:
    name = r[col["Kernel Name"]][:40]
    print(name.ljust(40), " ".join(f"{k.split('__')[1][:12]}={r[col[k]]}" for k in keys if k in col))
PY
      ;;
    detail)
      # stall reasons of one kernel of each path (one small, one VAE shape)
      timeout 200 ncu --clock-control none -k regex:"gnFused|gnApplyNHWC|gnStatsNHWC" --launch-skip 0 --launch-count 6 \
        --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section SourceCounters \
        python3 -m trt_gn.lab.profile ${DETAIL_SHAPES:-sd15-unet-320x64 vae-dec-256x512} > "$OUT/detail.txt" 2>&1
      grep -E "gnFused|gnApply|gnStats|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|L2 Hit|Warp Cycles Per Issued|Elapsed Cycles|group_norm_.*cu:[0-9]+|stall" "$OUT/detail.txt" | head -120 ;;
    sass)
      # per-SASS-instruction stall samples of one kernel (NCU_KERNEL, default gnFusedNHWC) on PROFILE_SHAPES
      timeout 300 ncu --clock-control none --cache-control none -k regex:${NCU_KERNEL:-gnFusedNHWC} --launch-skip 1 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --import-source yes -o "$OUT/prof" -f \
        python3 -m trt_gn.lab.profile ${PROFILE_SHAPES:-sd15-unet-320x64} > "$OUT/sass-run.log" 2>&1; echo "ncu exit $?"
      ncu -i "$OUT/prof.ncu-rep" --page source --csv --print-source sass > "$OUT/sass.csv" 2>"$OUT/sass.err"; echo "source page exit $?"
      ls -la "$OUT" ;;
    host)
      for impl in cpp python; do
        timeout ${HOST_TIMEOUT:-300} python3 -m trt_gn.lab.host_overhead --implementation $impl \
            --out "$OUT/host-$impl.csv" 2>&1 | tee "$OUT/host-$impl.log" | grep -v "round [0-9]" || rc=1
      done ;;
    vae)
      timeout ${VAE_TIMEOUT:-420} python3 -m trt_gn.lab.vae_decode --out "$OUT/vae.csv" ${VAE_ARGS:-} 2>&1 \
        | tee "$OUT/vae.log" | tail -40 || rc=1 ;;
  esac
done
exit $rc
