#!/usr/bin/env bash
# trt_gn's PyTorch models served by a real Triton server on the GPU machine (one or two H100/H200,
# no internet), driven by trt_gn/lab/triton_load.py; results and logs under $OUT.
#
#   bash scripts/gpu_serve.sh [table] [faults] [scale]      (default: all three)
#
# table   vae_stock and vae_trt_gn (SD 1.5 VAE decoder, 512x512, fp16, channels_last, torch.compile,
#         one instance on GPU 0) in one server: images against a float32 reference (compare.json),
#         then throughput and latency at concurrency 1, 2, 4, 8, 16 (load.csv)
# faults  bad requests, hang-ups and a killed stub during a concurrency-8 load on vae_faults (the
#         trt_gn model with max_batch_size 32 and a 3 GiB memory cap per instance) (faults.json)
# scale   concurrency 16 on vae_trt_gn (GPU 0) and vae_trt_gn_2gpu (one instance on each of GPUs
#         0 and 1), nvidia-smi sampled throughout (scale.csv, smi.csv)
#
# Inputs ($CARRY, default .carry/serve of the repository the command runs in):
#   tritonserver-py312.tar.xz   tritonserver 2.51 of the nvidia-pytriton 0.7.0 wheel: bin/, lib/,
#                               backends/python/ with the Python 3.12 stub beside libtriton_python.so
#   *.whl                       pure-Python packages missing there (diffusers)
#   libtrt_gn_kernels.so.xz     the kernels library built for sm_90 (else built here with cmake)
# The server is started in a session of its own and left running when the script ends, so a call
# made while the machine is still warm finds it (and its compiled models) again; it is stopped by
# its PID with `bash scripts/gpu_serve.sh stop`. STAGE_SECONDS (default 30) is the recorded time per
# measurement; BUDGET_S (default 560) bounds the whole script, and the table's seconds per
# measurement are shortened (and said so) where the budget would not hold them.
# SERVE_CPU=1 is a dry run of the script's steps on a machine without a GPU: the tiny VAE decoder in
# fp32 on KIND_CPU instances, not compiled, with TRITONSERVER_HOME an unpacked server for this machine's Python
# (SERVE_PYTHON_BIN: the bin folder of the Python environment the stub is to use).
set -uo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
CARRY=${CARRY:-$PWD/.carry/serve}
OUT=${OUT:-$SRC/gpu-out}
WORK=${WORK:-/tmp/trt_gn_serve}
TS=${TRITONSERVER_HOME:-$WORK/tritonserver}
REPO=$WORK/models
LOGS=$WORK/logs
HTTP=${HTTP_PORT:-8000}
URL=127.0.0.1:$HTTP
RECIPE=sd15-vae-decoder
CPU=${SERVE_CPU:-}
[ -n "$CPU" ] && RECIPE=tiny-vae-decoder
T0=$(date +%s)
DEADLINE=$(( T0 + ${BUDGET_S:-560} ))
STAGE_SECONDS=${STAGE_SECONDS:-30}
mkdir -p "$OUT" "$WORK" "$LOGS"
cd "$WORK"  # python3 -m puts the working folder first on sys.path: no other trt_gn may shadow this one
export PYTHONUNBUFFERED=1
# NVLink multicast stays off (shared machines); nothing here uses NCCL anyway.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

say() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
http_status() {  # GET or POST (with -X POST) on the server; prints the HTTP status (000: no answer)
  local method=GET; [ "${1:-}" = -X ] && { method=$2; shift 2; }
  python3 - "$method" "http://$URL$1" <<'PY'
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(urllib.request.Request(sys.argv[2], method=sys.argv[1], data=b"" if sys.argv[1] == "POST" else None), timeout=600) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(errors="replace")[:600], file=sys.stderr); print(e.code)
except OSError:
    print("000")
PY
}

setup() {
  if [ ! -x "$TS/bin/tritonserver" ]; then
    tar -xJf "$CARRY/tritonserver-py312.tar.xz" -C "$WORK" || { say "setup: cannot unpack the server"; exit 1; }
  fi
  if compgen -G "$CARRY/*.whl" >/dev/null && [ ! -d "$WORK/site" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$CARRY"/*.whl \
      || { say "setup: pip install of the carried wheels failed"; exit 1; }
  fi
  export PYTHONPATH=$SRC${PYTHONPATH:+:$PYTHONPATH}:$WORK/site
  if [ ! -f "$WORK/libtrt_gn_kernels.so" ]; then
    if [ -f "$CARRY/libtrt_gn_kernels.so.xz" ]; then
      xz -dc "$CARRY/libtrt_gn_kernels.so.xz" > "$WORK/libtrt_gn_kernels.so"
    else
      cmake -S "$SRC/plugin_src" -B "$WORK/build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DTRT_GN_BUILD_PLUGIN=OFF \
        -DTRT_GN_BUILD_TESTS=OFF >"$LOGS/cmake.log" 2>&1 && cmake --build "$WORK/build" >>"$LOGS/cmake.log" 2>&1 \
        && cp "$WORK/build/libtrt_gn_kernels.so" "$WORK/" || { tail -30 "$LOGS/cmake.log"; exit 1; }
    fi
  fi
  export TRT_GN_KERNELS_LIBRARY=$WORK/libtrt_gn_kernels.so
  python3 -c "import sys, torch, diffusers, trt_gn; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| diffusers', diffusers.__version__, '| trt_gn', trt_gn.__file__, '| GPUs', torch.cuda.device_count())" 2>&1 \
    | tee -a "$OUT/summary.txt"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 \
    | tee -a "$OUT/summary.txt"
  write_model vae_stock --variant stock --gpus 0 --compile
  write_model vae_trt_gn --variant trt_gn --gpus 0 --compile
  write_model vae_trt_gn_2gpu --variant trt_gn --gpus 0,1 --compile
  write_model vae_faults --variant trt_gn --gpus 0 --compile --max-batch-size 32 --gpu-memory-limit 3 \
    --queue-timeout-ms 30000
}

write_model() {  # NAME OPTIONS...: the SD 1.5 VAE decoder at 512x512, fp16, channels_last, compiled
  local name=$1 args=(--dtype fp16 --max-batch-size 8); shift
  [ -f "$REPO/$name/config.pbtxt" ] && return 0
  while [ $# -gt 0 ]; do
    case $1 in
      --gpus|--gpu-memory-limit) [ -n "$CPU" ] || args+=("$1" "$2"); shift 2 ;;
      --compile) [ -n "$CPU" ] || args+=("$1"); shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
  [ -n "$CPU" ] && args+=(--device cpu --dtype fp32)
  python3 -m trt_gn.cli triton "$RECIPE" --backend pytorch --repository "$REPO" --model "$name" "${args[@]}" \
    >>"$LOGS/write.log" 2>&1 || { tail -5 "$LOGS/write.log"; exit 1; }
}

server_pid() { cat "$WORK/server.pid" 2>/dev/null; }
server_alive() { local pid; pid=$(server_pid); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

start_server() {  # MODELS...: loaded at start-up (in parallel); returns once the server answers
  local libpy args=()
  libpy=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
  for m in "$@"; do args+=(--load-model="$m"); done
  say "starting tritonserver with ${*} (torch.compile at load)"
  # The stub's interpreter takes its prefix from python3 on PATH (the venv's bin, not its base
  # interpreter); it links libpython3.12 (LIBDIR). A session of its own: it outlives this script.
  # --exit-on-error=false: a model that fails to load is reported, and the others are served.
  LD_LIBRARY_PATH=$TS/lib:$libpy PATH="${SERVE_PYTHON_BIN:-$(dirname "$(command -v python3)")}:$PATH" setsid bash -c \
    'echo $$ > "$0"; exec "$@"' "$WORK/server.pid" "$TS/bin/tritonserver" --model-repository="$REPO" \
    --backend-directory="$TS/backends" --cache-directory="$TS/caches" --model-control-mode=explicit "${args[@]}" \
    --disable-auto-complete-config --exit-on-error=false --http-address=127.0.0.1 --http-port="$HTTP" \
    --grpc-address=127.0.0.1 --grpc-port=$((HTTP + 1)) --metrics-port=$((HTTP + 2)) --allow-metrics=true \
    --allow-gpu-metrics=true --backend-config=python,shm-region-prefix-name=trtgn_gpu_serve_ \
    --backend-config=python,shm-default-byte-size=67108864 --backend-config=python,shm-growth-byte-size=67108864 \
    --exit-timeout-secs=10 --log-verbose=0 >"$LOGS/server.log" 2>&1 </dev/null &
  sleep 2
  while [ "$(http_status /v2/health/live 2>/dev/null)" != 200 ]; do
    if ! server_alive; then say "tritonserver exited while loading:"; grep -v '^I' "$LOGS/server.log" | tail -30; exit 1; fi
    [ "$(left)" -lt 30 ] && { say "the server did not answer within the budget"; tail -30 "$LOGS/server.log"; exit 1; }
    sleep 3
  done
  say "server up (pid $(server_pid))"
}

ensure_models() {  # MODELS...: start the server with them, or load those it lacks; report each one's state
  local m pids=()
  if ! server_alive || [ "$(http_status /v2/health/live 2>/dev/null)" != 200 ]; then
    start_server "$@"
  else
    for m in "$@"; do
      if [ "$(http_status "/v2/models/$m/ready" 2>/dev/null)" != 200 ]; then
        say "loading $m"
        http_status -X POST "/v2/repository/models/$m/load" >/dev/null 2>>"$LOGS/load-errors.log" &
        pids+=($!)
      fi
    done
    for p in "${pids[@]}"; do wait "$p"; done
  fi
  for m in "$@"; do
    if [ "$(http_status "/v2/models/$m/ready" 2>/dev/null)" = 200 ]; then echo "$m" >>"$WORK/ready.txt"
    else say "$m did not load:"; grep -E "^E.*$m" "$LOGS/server.log" | tail -3 | cut -c1-600 | tee -a "$OUT/summary.txt"; fi
  done
  grep -o '"[a-z0-9_]*: \(warmed\|warm-up\|sd15\|tiny\|replaced\)[^"]*' "$LOGS/server.log" | tr -d '"' | sort -u \
    | tee -a "$OUT/summary.txt"
}

ready() {  # MODEL...: all loaded (else the stage is skipped, saying so)
  local m
  for m in "$@"; do
    grep -qx "$m" "$WORK/ready.txt" 2>/dev/null || { say "skipped: $m is not loaded"; return 1; }
  done
}

stop_server() {
  local pid; pid=$(server_pid)
  [ -z "$pid" ] && return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null  # its session's process group: the stubs too
  rm -f /dev/shm/trtgn_gpu_serve_* "$WORK/server.pid"
}

smi_start() { nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -lms 500 \
  >"$LOGS/smi-$1.csv" 2>&1 & echo $! > "$WORK/smi.pid"; }
smi_stop() { kill "$(cat "$WORK/smi.pid")" 2>/dev/null; }

stage_table() {
  ready vae_stock vae_trt_gn || return 0
  say "images of both models against a float32 reference"
  python3 -m trt_gn.lab.triton_load compare --url "$URL" --model vae_stock --model vae_trt_gn --recipe "$RECIPE" \
    --out "$OUT/compare.json" >"$LOGS/compare.log" 2>&1 || { tail -20 "$LOGS/compare.log"; }
  python3 -c "import json; r = json.load(open('$OUT/compare.json')); print({k: {a: f'{b:.3g}' for a, b in v.items()} for k, v in r['models'].items()}, 'between', {a: f'{b:.3g}' for a, b in r['between'].items()})" \
    2>&1 | tee -a "$OUT/summary.txt"
  local secs=$STAGE_SECONDS budget
  budget=$(( ($(left) - 30) / 10 - 4 ))  # 10 measurements, each with its warm-up and reference requests
  if [ "$budget" -lt 1 ]; then
    say "budget: $(left) s left, too little for the load table's 10 measurements: not measured"; status=1; return 0
  fi
  if [ "$budget" -lt "$secs" ]; then secs=$budget; say "budget: $secs s recorded per measurement instead of $STAGE_SECONDS"; fi
  say "load: concurrency 1 2 4 8 16, $secs s each after 3 s of warm-up"
  python3 -m trt_gn.lab.triton_load load --url "$URL" --model vae_stock --model vae_trt_gn --concurrency 1,2,4,8,16 \
    --seconds "$secs" --warmup 3 --out "$OUT/load.csv" 2>&1 | tee -a "$OUT/summary.txt"
  batch_sizes table
}

batch_sizes() {  # TAG: requests per model execution since the server started (Triton's /metrics)
  python3 - "127.0.0.1:$((HTTP + 2))" <<'PY' 2>&1 | tee "$LOGS/metrics-$1.txt" | grep "mean batch" | tee -a "$OUT/summary.txt"
import re, sys
from trt_gn.lab.triton_load import metrics
lines = metrics(sys.argv[1])
print("\n".join(lines))
count = {re.search(r'model="([^"]+)"', l).group(1): float(l.split()[-1]) for l in lines if l.startswith("nv_inference_count")}
execs = {re.search(r'model="([^"]+)"', l).group(1): float(l.split()[-1]) for l in lines if l.startswith("nv_inference_exec_count")}
for m in sorted(count):
    if execs.get(m):
        print(f"{m}: mean batch {count[m] / execs[m]:.2f} ({count[m]:.0f} requests in {execs[m]:.0f} executions)")
PY
}

stage_faults() {
  ready vae_faults || return 0
  say "faults during a concurrency-8 load on vae_faults"
  python3 -m trt_gn.lab.triton_load faults --url "$URL" --model vae_faults --concurrency 8 --oom-batch 32 --kill-stub \
    --recover-wait 10 --timeout 60 --out "$OUT/faults.json" 2>&1 | tee -a "$OUT/summary.txt"
  echo "server live: $(http_status /v2/health/live), vae_faults ready: $(http_status /v2/models/vae_faults/ready)" \
    | tee -a "$OUT/summary.txt"
}

stage_scale() {
  ready vae_trt_gn vae_trt_gn_2gpu || return 0
  local m apps
  for m in vae_trt_gn vae_trt_gn_2gpu; do
    say "scale: $m at concurrency 16, $STAGE_SECONDS s"
    smi_start "$m"
    ( sleep 10; nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader >"$LOGS/apps-$m.csv" 2>&1 ) &
    apps=$!
    python3 -m trt_gn.lab.triton_load load --url "$URL" --model "$m" --concurrency 16 --seconds "$STAGE_SECONDS" \
      --warmup 3 --out "$LOGS/scale-$m.csv" 2>&1 | tee -a "$OUT/summary.txt"
    smi_stop
    wait "$apps"  # (not a bare wait: the server is a child of this script too)
  done
  { head -1 "$LOGS/scale-vae_trt_gn.csv"; tail -qn +2 "$LOGS"/scale-vae_trt_gn.csv "$LOGS"/scale-vae_trt_gn_2gpu.csv; } >"$OUT/scale.csv"
  { echo "phase,timestamp,index,utilization_gpu,memory_used"; for m in vae_trt_gn vae_trt_gn_2gpu; do
      sed "s/^/$m,/" "$LOGS/smi-$m.csv"; done; } >"$OUT/smi.csv"
  python3 - "$OUT/smi.csv" <<'PY' | tee -a "$OUT/summary.txt"
import collections, csv, sys
util = collections.defaultdict(list)
for row in csv.DictReader(open(sys.argv[1]), skipinitialspace=True):
    try:
        util[(row["phase"], row["index"].strip())].append(float(row["utilization_gpu"].split()[0]))
    except (ValueError, KeyError, AttributeError):
        pass
for (phase, gpu), v in sorted(util.items()):
    busy = sorted(v)[len(v) // 4:]  # the upper three quarters: the load's own samples
    print(f"{phase}: GPU {gpu} utilisation mean {sum(v) / len(v):.0f}% (upper 3/4 of {len(v)} samples: {sum(busy) / len(busy):.0f}%)")
PY
  for f in "$LOGS"/apps-*.csv; do
    echo "${f##*/}:"; while IFS=, read -r pid bus mem; do
      echo "  pid $pid on $bus ($mem): $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -o '[a-z0-9_]*_0_[0-9]*' | head -1)"
    done <"$f"
  done | tee -a "$OUT/summary.txt"
  batch_sizes scale
}

status=0  # 1 where a stage could not run as asked
stages=${*:-table faults scale}
if [ "$stages" = stop ]; then stop_server; exit 0; fi
say "gpu_serve: stages $stages, budget ${BUDGET_S:-560} s"
setup
rm -f "$WORK/ready.txt"
# Every model the stages need, loaded (and compiled) together before the first stage.
models=()
for s in $stages; do
  case $s in
    table) models+=(vae_stock vae_trt_gn) ;;
    faults) models+=(vae_faults) ;;
    scale) models+=(vae_trt_gn vae_trt_gn_2gpu) ;;
  esac
done
[ ${#models[@]} -gt 0 ] && ensure_models $(printf '%s\n' "${models[@]}" | awk '!seen[$0]++')
for s in $stages; do
  case $s in
    table) stage_table ;;
    faults) stage_faults ;;
    scale) stage_scale ;;
    stop) stop_server ;;
    *) say "unknown stage $s"; exit 2 ;;
  esac
done
grep -E "^[EW][0-9]{4}" "$LOGS/server.log" | grep -v "Exit timeout" | tail -40 >"$LOGS/server-warnings.log"
tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null
say "done (server left running: pid $(server_pid))"
exit "$status"
