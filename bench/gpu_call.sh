#!/usr/bin/env bash
# One GPU call of several measurements, each under its own time limit, everything packed into
# one archive (the device tool returns at most 8 files):
#   bash bench/gpu_call.sh OUTDIR STEP:SECONDS [STEP:SECONDS ...]
# Steps: throughput (bench/throughput_gpu.py: phases, cached candidates, hack fixtures in one
# session), gemm (bench/fp32_gemm.py: fp32 paths, config search, tf32x3 skills), suite (the
# benchmark through the generate loop, resumed from bench/results/<gpu>-<date>.json if present),
# isolation (bench/isolation_overhead.py: the sandbox's cost per verification), starts
# (bench/isolation_starts.py: a sandboxed worker's start step by step), bf16gemm
# (bench/bf16_gemm.py: bf16 GEMM designs side by side), verifygpu
# (bench/verify_gpu.py: every hack fixture on the GPU, direct and through the verifier), convab
# (bench/conv_variants.py: the conv template's layouts side by side), rowsplit (bench/row_split_ab.py: the
# split-row GEMM epilogue against the product then its rows), rowcfg
# (bench/rowwise_configs.py: the row-wise kernels' long-row configurations beside torch.compile), profile
# (bench/profile_tasks.py: the memory-bound losers' drafts under ncu), inductor
# (bench/inductor_kernels.py: torch.compile's kernels' text), coop (bench/coop_rows.py: cooperative
# rows and tall-skinny products beside torch.compile), launch (bench/launch_overhead.py: the
# generated launchers' host time against their kernels'), attention (bench/attention_configs.py: the
# flash-attention skill's tile configurations beside SDPA and torch.compile), pool
# (bench/pool_configs.py: the global-pool kernel's tiles beside eager and torch.compile), split
# (bench/tf32_split.py: 3xTF32 GEMM designs, the TF32 split in or out of the K loop), smoke (bench/gpu_smoke.sh: the
# sandboxed verifier on an honest Triton and load_inline CUDA kernel).
set -u
out=$1; shift
work=/tmp/kr-gpu; mkdir -p "$work"
export PYTHONUNBUFFERED=1 PYTHONPATH=. KERNELRAG_HOME=$work/home
# The GPU machine starts bare each session: its memory (the graph's evidence and the
# tuning cache of timed configurations) is carried in bench/home-h200/ and restored once
# per machine, as a user's KERNELRAG_HOME persists (KR_HOME_FROM= starts it empty). The
# compiled torch.compile baselines (bench/home-h200/cache/baselines/, ignored by git) travel
# only when the device call names them in its carry.
home_from=${KR_HOME_FROM-bench/home-h200}
if [ -n "$home_from" ] && [ -d "$home_from" ] && [ ! -d "$work/home" ]; then
  mkdir -p "$work/home" && cp -r "$home_from"/. "$work/home"/ && echo "memory restored from $home_from"
fi
# a step's own budget: it starts nothing new in its last 60 s, or in its second half when the
# step is shorter than 120 s (a 60 s step once got a budget of 0 and ran nothing)
start_budget() { echo $(( $1 > 120 ? $1 - 60 : $1 / 2 )); }
# What was measured comes back even when the call is cut short (the device's limit for the
# call, or its session's last seconds, below the steps' own): the work folder is packed after
# every step and once a minute, each archive renamed over the last only when it is whole
# (tar's status 1 says a file grew while read: the archive is still good).
pack() {
  { tar czf "$out/.packing.tgz" -C "$work" --exclude=./home/cache/baselines . 2>/dev/null || [ $? -eq 1 ]; } &&
    mv -f "$out/.packing.tgz" "$out/results.tgz"
}
( while sleep 60; do pack; done ) >/dev/null 2>&1 & packer=$!   # off the call's output: nothing waits on it
stop_packer() { pkill -P $packer 2>/dev/null; kill $packer 2>/dev/null; wait $packer 2>/dev/null; }
trap stop_packer EXIT
day=$(date +%F)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o "H[0-9]\+" | head -1 | tr H h)   # h100, h200: names the files
gpu=${gpu:-cuda}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for step in "$@"; do
  name=${step%%:*}; secs=${step##*:}
  echo "=== $name (limit ${secs}s) $(date +%T)"
  case $name in
    throughput) # a second run on the same machine keeps the first one's file: its compiled baselines
                # are then on disk, so its first-of-task figures are those of a warm cache
                [ -d "$work/throughput" ] && mv "$work/throughput" "$work/throughput-$(date +%H%M%S)"
                # THROUGHPUT_ARGS: more options (--hacks off for a second run: its session starts sooner)
                timeout "$secs" python3 bench/throughput_gpu.py --device cuda --out-dir "$work/throughput" \
                  --budget-s $((secs - 120)) ${THROUGHPUT_ARGS:-} 2>&1 | tail -50 ;;
    starts)     timeout "$secs" python3 bench/isolation_starts.py --device cuda --trials 3 --budget-s $((secs - 30)) \
                  --out "$work/isolation-starts-$gpu-$day.json" 2>&1 | tail -30 ;;
    bf16gemm)   timeout "$secs" python3 bench/bf16_gemm.py --out "$work/bf16-gemm-$gpu-$day.json" \
                  --budget-s $(start_budget "$secs") 2>&1 | tail -40 ;;
    gemm)       # GEMM_ARGS: more options (--sizes 2048: those square sizes only; --no-verify)
                timeout "$secs" python3 bench/fp32_gemm.py --out "$work/gemm" --budget-s $((secs - 100)) ${GEMM_ARGS:-} 2>&1 | tail -40 ;;
    suite)      # SUITE_RESULTS=bench/results/<gpu>-<date>.json resumes an earlier run's file;
                # SUITE_TAG=s4 names a fresh one bench/results/<gpu>-<date>-s4.json;
                # SUITE_ONLY=a,b,c runs those tasks only; SUITE_ORDER=<earlier results file> starts the
                # tasks that took longest there first
                from=${SUITE_RESULTS:-bench/results/$gpu-$day${SUITE_TAG:+-$SUITE_TAG}.json}; name=$(basename "$from")
                mkdir -p "$work/suite"; [ -f "$from" ] && cp "$from" "$work/suite/$name"
                timeout "$secs" python3 -m kernelrag.bench bench/tasks --device cuda --budget-s $(start_budget "$secs") \
                  ${SUITE_ONLY:+--only "$SUITE_ONLY"} ${SUITE_ORDER:+--longest-first "$SUITE_ORDER"} \
                  --results "$work/suite/$name" \
                  --evidence "$work/suite/evidence.jsonl" 2>&1 | tail -100 ;;
    isolation)  timeout "$secs" python3 bench/isolation_overhead.py --device cuda --trials 3 --budget-s $((secs - 10)) \
                  --out "$work/isolation-$gpu-$day.json" 2>&1 | tail -30 ;;
    verifygpu)  # VERIFYGPU_ARGS: more options (--skip cpu: the GPU fixtures only)
                timeout "$secs" python3 bench/verify_gpu.py --out "$work/verify-$gpu-$day.json" \
                  --budget-s $(start_budget "$secs") ${VERIFYGPU_ARGS:-} 2>&1 | tail -60 ;;
    rowcfg)     # ROWCFG_TASKS="a b c" names the tasks (default: rowwise_configs.py's losers)
                timeout "$secs" python3 bench/rowwise_configs.py --out "$work/rowwise-configs-$gpu-$day.json" \
                  --budget-s $(start_budget "$secs") ${ROWCFG_TASKS:-} 2>&1 | tail -30 ;;
    rowsplit)   # ROWSPLIT_ARGS: more options (--only a b)
                timeout "$secs" python3 bench/row_split_ab.py --device cuda --out "$work/row-split-$gpu-$day-$(date +%H%M).json" \
                  ${ROWSPLIT_ARGS:-} 2>&1 | tail -20 ;;
    convab)     # CONVAB_ARGS: more options (--warps8: the 128 x 64 conv tile on 8 warps too; --only a b)
                timeout "$secs" python3 bench/conv_variants.py --device cuda --out "$work/conv-variants-$gpu-$day-$(date +%H%M).json" \
                  ${CONVAB_ARGS:-} 2>&1 | tail -40 ;;
    profile)    # PROFILE_TASKS="a b c" names the tasks (default: profile_tasks.py's losers)
                timeout "$secs" python3 bench/profile_tasks.py --out "$work/profile-$gpu-$day-$(date +%H%M).json" \
                  --budget-s $(start_budget "$secs") ${PROFILE_TASKS:-} 2>&1 | tail -30 ;;
    inductor)   # INDUCTOR_TASKS="a b c": torch.compile's generated kernels and times for those tasks
                timeout "$secs" python3 bench/inductor_kernels.py --out "$work/inductor-$gpu-$day" \
                  --budget-s $((secs - 40)) ${INDUCTOR_TASKS:-scaled_softmax group_norm rotary_embedding_qk} 2>&1 | tail -30 ;;
    coop)       # COOP_TASKS="a b c" names the tasks (default: coop_rows.py's row-wise losers and matmul_tall_skinny)
                timeout "$secs" python3 bench/coop_rows.py --out "$work/coop-rows-$gpu-$day-$(date +%H%M).json" \
                  --budget-s $(start_budget "$secs") ${COOP_TASKS:-} 2>&1 | tail -30 ;;
    launch)     # LAUNCH_BEFORE=DIR: older drafts (<task>__<variants>.py) timed beside the current ones;
                # LAUNCH_ARGS=--protocol: the verifier's timing protocol too
                timeout "$secs" python3 bench/launch_overhead.py --out "$work/launch-overhead-$gpu-$day-$(date +%H%M).json" \
                  --budget-s $(start_budget "$secs") ${LAUNCH_BEFORE:+--before "$LAUNCH_BEFORE"} ${LAUNCH_ARGS:-} ${LAUNCH_TASKS:-} 2>&1 | tail -40 ;;
    attention)  # ATTENTION_TASKS="a b": attention tasks in bench/tasks/ (default: attention)
                timeout "$secs" python3 bench/attention_configs.py --out "$work/attention-configs-$gpu-$day-$(date +%H%M).json" \
                  --budget-s $(start_budget "$secs") ${ATTENTION_TASKS:-} 2>&1 | tail -30 ;;
    pool)       # POOL_TASKS="a b": tasks in bench/tasks/ that start with a global average pool
                timeout "$secs" python3 bench/pool_configs.py --out "$work/pool-configs-$gpu-$day-$(date +%H%M).json" \
                  --budget-s $(start_budget "$secs") ${POOL_TASKS:-} 2>&1 | tail -30 ;;
    split)      # SPLIT_SIZES="4096 8192": square GEMM sizes
                timeout "$secs" python3 bench/tf32_split.py --out "$work/tf32-split-$gpu-$day-$(date +%H%M).json" \
                  --budget-s $(start_budget "$secs") ${SPLIT_SIZES:-} 2>&1 | tail -30 ;;
    smoke)      bash bench/gpu_smoke.sh "$work/smoke-$gpu-$day" 2>&1 | tail -30 ;;
    *) echo "unknown step $name" ;;
  esac
  pack
done
stop_packer
# The compiled baselines (binary, tens of MB) come back apart, in parts under the device
# tool's 16 MiB a file; restore them with: cat baselines.tgz.part-* | tar xz -C bench/home-h200/cache
pack
if [ -d "$work/home/cache/baselines" ]; then
  tar czf - -C "$work/home/cache" baselines | split -b 15m -d -a 1 - "$out/baselines.tgz.part-"
fi
ls -la "$out"
