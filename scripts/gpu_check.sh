#!/usr/bin/env bash
# The GPU run, in one command for the device machine (H100/H200, no internet):
# builds the native code for sm_90, then runs the stages named on the command
# line, writing logs and results under $OUT.
#
#   bash scripts/gpu_check.sh [tests] [suite] [fuzz] [plans] [sanitize] [plugin] [arch80] [ab] [bench] [vae] [floor] [pipeline] [profile] [host] [sweep] [preadd] [bandwidth]
#
# Without stages it runs tests, fuzz, sanitize, plugin, arch80, bench and vae.
# suite: the README's test command, whole; its summary line and every failure, error and skip
# with its reason in $OUT/suite-summary.txt (SUITE_TIMEOUT, default 480 s; SUITE_ARGS adds options;
# SUITE_PART=K/N runs the K-th of N parts of its test files, for device calls of limited length).
# fuzz: FUZZ_SEEDS (default 1 2 3) x FUZZ_CASES (default 10000) random cases.
# plans: the old variant's plans against the working tree's on the fuzz cases (described, not run).
# ab: trt_gn/lab/ab.py, the old variant against the working tree, on the shape list (AB_ARGS adds
# options).
# The old variant of plans and ab: AB_OLD_SRC, a folder holding plugin_src/ (where no .git folder
# is, as on the device machine: `bash scripts/stage_old_source.sh REV` stages one in .carry/old-src,
# to be carried), or AB_OLD, a git revision (needs .git), a folder or a built .so.
# host: the op's host time per call against stock PyTorch's (trt_gn/lab/host_overhead.py), with its
# C++ implementation (built for this torch first) and with its Python one.
# preadd: the pre-add against the separate pass it replaces (trt_gn/lab/pre_add.py).
# bandwidth: copy, read and write bandwidth by tensor size (trt_gn/lab/bandwidth.py), two allocators.
# sweep: the cost model's sweep (trt_gn/lab/costmodel.py) on a debug build of the kernels
# (build-gpu-debug, -DTRT_GN_DEBUG_PLANS=ON): $OUT/sweep.csv, and the fit of it (SWEEP_ARGS adds options).
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
# The old variant of the plans and ab stages (see the top), printed; says why not otherwise.
old_variant() {
  if [ -n "${AB_OLD_SRC:-}" ] && [ -n "${AB_OLD:-}" ]; then
    echo "$1: AB_OLD_SRC and AB_OLD are both set: set one" >&2; return 1
  elif [ -n "${AB_OLD_SRC:-}" ]; then
    [ -f "$AB_OLD_SRC/plugin_src/CMakeLists.txt" ] || {
      echo "$1: AB_OLD_SRC=$AB_OLD_SRC holds no plugin_src/CMakeLists.txt (stage one with" \
           "scripts/stage_old_source.sh REV and carry it)" >&2; return 1; }
    echo "$1: old = $AB_OLD_SRC, commit $(cat "$AB_OLD_SRC/.commit" 2>/dev/null || echo "not recorded")" >&2
    echo "$AB_OLD_SRC"
  elif [ -n "${AB_OLD:-}" ]; then
    echo "$AB_OLD"
  else
    echo "$1: no old variant: set AB_OLD_SRC (a folder from scripts/stage_old_source.sh REV) or AB_OLD" >&2
    return 1
  fi
}

rc=0
for s in $stages; do
  echo "=== $s"
  case $s in
    tests)
      timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests} -rs 2>&1 | tee "$OUT/tests.log" | tail -25 || rc=1 ;;
    suite)
      # The README's test command as written there (tests/test_ci.py holds .ci/run to the same
      # line), with failures and errors listed beside its skips.
      read -ra cmd <<<"$(awk '/^## Test$/ {t = 1} t && /^```bash$/ {getline; print; exit}' README.md)"
      [ "${cmd[*]:0:4}" = "python3 -P -m pytest" ] || { echo "suite: no test command in README.md"; rc=1; continue; }
      if [ -n "${SUITE_PART:-}" ]; then
        # SUITE_PART=K/N: the K-th of N parts, every N-th test file from the K-th (sorted), in place of
        # the command's folder, so that the whole suite fits device calls of limited length.
        if ! [[ $SUITE_PART =~ ^([1-9][0-9]*)/([1-9][0-9]*)$ ]] || [ "${BASH_REMATCH[1]}" -gt "${BASH_REMATCH[2]}" ] \
            || [ "${cmd[-1]}" != tests ]; then
          echo "suite: SUITE_PART=$SUITE_PART: give K/N with 1 <= K <= N, for a command that ends in 'tests'"; rc=1; continue
        fi
        mapfile -t files < <(find tests -name 'test_*.py' | sort \
          | awk -v k="${BASH_REMATCH[1]}" -v n="${BASH_REMATCH[2]}" '(NR - 1) % n == k - 1')
        cmd=("${cmd[@]:0:${#cmd[@]}-1}" "${files[@]}")
      fi
      t0=$(date +%s)
      # shellcheck disable=SC2086  # SUITE_ARGS: options, split as words
      timeout "${SUITE_TIMEOUT:-480}" "${cmd[@]}" -rfEs -p no:cacheprovider ${SUITE_ARGS:-} >"$OUT/suite.log" 2>&1
      suite_rc=$?
      {
        echo "\$ ${cmd[*]} -rfEs -p no:cacheprovider ${SUITE_ARGS:-}${SUITE_PART:+  (part $SUITE_PART)}"
        python3 -c "import sys, numpy, onnx, torch; print(f'python {sys.version.split()[0]}, torch {torch.__version__},'
                    f' onnx {onnx.__version__}, numpy {numpy.__version__}')" 2>&1
        if [ $suite_rc -eq 124 ]; then
          echo "stopped by SUITE_TIMEOUT after $(( $(date +%s) - t0 )) s: no summary line; the log ends:"
          tail -3 "$OUT/suite.log"
        elif grep -q "short test summary info" "$OUT/suite.log"; then
          sed -n '/short test summary info/,$p' "$OUT/suite.log"  # its list, then the summary line
        else
          tail -1 "$OUT/suite.log"
        fi
        echo "pytest exit $suite_rc"
      } >"$OUT/suite-summary.txt"
      grep -E "^(FAILED|ERROR) " "$OUT/suite-summary.txt"; tail -2 "$OUT/suite-summary.txt"
      [ $suite_rc -eq 0 ] || rc=1 ;;
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
        # initcheck: the large cases and the per-path sample in two processes (each with the
        # small cases): in one, the tool's own device memory outgrew an H100's after the large ones.
        parts=("${SANITIZE_ARGS:-}")
        [ "$tool" = initcheck ] && [ -z "${SANITIZE_ARGS:-}" ] && parts=(--no-fuzz --no-large)
        : >"$OUT/sanitize-$tool.log"; code=0
        for part in "${parts[@]}"; do
          # shellcheck disable=SC2086  # a part: options, split as words
          timeout ${SANITIZE_TIMEOUT:-300} compute-sanitizer --tool $tool "${filter[@]}" --error-exitcode 9 \
            python3 tests/gpu/sanitize_cases.py $part >>"$OUT/sanitize-$tool.log" 2>&1 || code=$?
        done
        echo "$tool exit $code"; grep -E "launches checked|SUMMARY" "$OUT/sanitize-$tool.log" | tail -4
        [ $code -eq 0 ] || rc=1
      done ;;
    plans)
      # AB_OLD's planner against the working tree's on the fuzz command's cases (plans described,
      # no kernel run): every plan must be the same. Without pre-add draws: a library before ABI 4
      # cannot plan one.
      old_src=$(old_variant plans) || { rc=1; continue; }
      old=$(python3 -m trt_gn.lab.ab --variant old="$old_src" --build-only \
            --out /tmp/plans-ab 2>"$OUT/plans-build.log" | tail -1 | sed 's/^old: //')
      [ -f "$old" ] || { echo "plans: no old build: $(tail -3 "$OUT/plans-build.log")"; rc=1; continue; }
      # Each dump is written afresh and compared only when both were: never an earlier run's.
      for seed in ${FUZZ_SEEDS:-1 2 3}; do
        rm -f "/tmp/plans-old-$seed.csv" "/tmp/plans-new-$seed.csv"
        { TRT_GN_KERNELS_LIBRARY=$old python3 -m trt_gn.cli fuzz --plans-only --no-pre-add --cases "${FUZZ_CASES:-10000}" \
            --seed "$seed" --plans "/tmp/plans-old-$seed.csv" | tail -1 \
          && python3 -m trt_gn.cli fuzz --plans-only --no-pre-add --cases "${FUZZ_CASES:-10000}" --seed "$seed" \
            --plans "/tmp/plans-new-$seed.csv" | tail -1 \
          && python3 -m trt_gn.lab.compare_plans "/tmp/plans-old-$seed.csv" "/tmp/plans-new-$seed.csv" | tail -13; } \
          || { echo "plans seed $seed: failed"; rc=1; }
      done ;;
    ab)
      old_src=$(old_variant ab) || { rc=1; continue; }
      timeout ${AB_TIMEOUT:-540} python3 -m trt_gn.lab.ab --variant old="$old_src" --variant new=. \
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
    sweep)
      # Every cluster plan forced in turn (TRTGN_FORCE_PLAN), which only a debug build takes.
      cmake -S plugin_src -B build-gpu-debug -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DTRT_GN_DEBUG_PLANS=ON \
          -DTRT_GN_BUILD_PLUGIN=OFF -DTRT_GN_BUILD_TESTS=OFF >"$OUT/cmake-debug.log" 2>&1 \
          && cmake --build build-gpu-debug >>"$OUT/cmake-debug.log" 2>&1 || { tail -20 "$OUT/cmake-debug.log"; rc=1; continue; }
      TRT_GN_KERNELS_LIBRARY=$PWD/build-gpu-debug/libtrt_gn_kernels.so timeout ${SWEEP_TIMEOUT:-480} \
          python3 -m trt_gn.lab.costmodel sweep --out "$OUT/sweep.csv" ${SWEEP_ARGS:-} 2>&1 | tee "$OUT/sweep.log" | tail -4 \
        || { rc=1; continue; }
      python3 -m trt_gn.lab.costmodel fit "$OUT/sweep.csv" 2>&1 | tee "$OUT/fit.log" | tail -13 || rc=1 ;;
    preadd)
      # trt_gn/lab/pre_add.py: the pre-add against the separate pass it replaces, per shape and kind
      # (PREADD_ARGS adds options): $OUT/pre_add.{csv,log}.
      timeout ${PREADD_TIMEOUT:-400} python3 -m trt_gn.lab.pre_add --out "$OUT/pre_add.csv" ${PREADD_ARGS:-} 2>&1 \
        | tee "$OUT/pre_add.log" | grep -v "^\[" || rc=1 ;;
    bandwidth)
      # trt_gn/lab/bandwidth.py: copy, read and write bandwidth by tensor size (BW_SIZES, MiB), with
      # the default allocator and with expandable segments: $OUT/bw-{default,expandable}.{csv,log}.
      for conf in "" expandable_segments:True; do
        name=${conf:+expandable}; name=${name:-default}
        env -u PYTORCH_CUDA_ALLOC_CONF ${conf:+PYTORCH_CUDA_ALLOC_CONF=$conf} \
          timeout ${BW_TIMEOUT:-120} python3 -m trt_gn.lab.bandwidth \
            --sizes-mb ${BW_SIZES:-67,134,268,537,1074} --label "$name" --out "$OUT/bw-$name.csv" 2>&1 \
          | tee "$OUT/bw-$name.log" || rc=1
      done ;;
    vae)
      # trt_gn/lab/vae_decode.py, one run each of VAE_RUNS (default: the 512 and 1024 VAE decodes and
      # the SD 1.5 UNet step), every variant eager, torch.compile and reduce-overhead, timed then
      # profiled: $OUT/vae-<run>.{csv,md,log}. A run gets VAE_TIMEOUT seconds; VAE_ARGS adds options.
      # Six compiles a run: where the three do not fit one call of the device machine, VAE_RUNS=512, then
      # VAE_RUNS="1024 unet" (or one each).
      for run in ${VAE_RUNS:-512 1024 unet}; do
        case $run in
          unet) what=(--model unet) ;;
          *) what=(--model vae --resolutions "$run") ;;
        esac
        echo "vae_decode $run:"
        timeout ${VAE_TIMEOUT:-540} python3 -m trt_gn.lab.vae_decode "${what[@]}" --modes default,reduce-overhead \
            --out "$OUT/vae-$run.csv" --markdown "$OUT/vae-$run.md" ${VAE_ARGS:-} 2>&1 \
          | tee "$OUT/vae-$run.log" | grep -v "^\[" | tail -30 || rc=1
      done ;;
  esac
done
exit $rc
