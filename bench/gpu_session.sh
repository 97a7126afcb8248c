#!/usr/bin/env bash
# The GPU machine's side of the benchmark protocol (bench/protocol.py,
# issue 18): correctness first, then timing. Prepare here with
# bench/prepare_gpu.sh; carry what it prints (.anchors out/bench
# out/kda_check out/gpu out/profile-gpu build/bin/k3-run
# build/runtime/libk3runtime.so [out/bench-baseline]).
#
#   bash bench/gpu_session.sh STAGE...      (default: all, in this order)
#   check     the runtime's CUDA unit test (PTX launch, CUDA-event profiling
#             and timing), then the GPU test that fails loudly: the CUDA KDA kernels against
#             the f64 oracle on the awkward shapes (gpu_kda_check.py
#             check-bf16), the default model (gpu_e2e.py check), and
#             compute-sanitizer memcheck + racecheck on the tensor-core kernel;
#             FlashKDA builds in the background meanwhile (waited for);
#   kda-check the bf16 KDA cases of gpu_kda_check.py (both gates) and
#             compute-sanitizer on the softplus gate's tensor-core kernels;
#   flashkda  waits for (or runs) FlashKDA's build, in $FLASHKDA_DIR
#             (default /tmp/k3-flashkda: outside the carried .anchors, which
#             the next call would replace; /tmp stays while the machine does;
#             the sources come from .anchors/anchors.tgz, unpacked to
#             $ANCHORS_DIR, default /tmp/k3-anchors);
#   bench-a   bench/kda_forward.py on ANCHORS.md's B1 shapes (T8192 H96/H64,
#             T32768 H96, T2048 H96);
#   bench-b   ... on its packed shapes (B8 T4096 H32, 8x1024 H96, 32x512 H32,
#             2x16384 H64);
#   bench-c   ... on issue 18's awkward shapes, then bench-decode (the decode
#             shapes: fla's fused recurrent kernel and our decode tiles);
#             every case is checked against the f64 oracle, then ours beside
#             fla and FlashKDA (and beside out/bench-baseline when carried),
#             CUDA events, median of >= 20; a crash or failed check is a
#             FAILED row (fla autotunes each new shape: a minute or more
#             each, hence three stages, each case a process of its own under
#             $K3_CASE_TIMEOUT seconds, default 150);
#   old-vs-new  ours beside out/bench-baseline on bench-a's shapes, all
#             variants and the decode shapes, no anchors (issue 13);
#   interop   bench/gpu_interop.py check (issue 22; carry out/gpu_interop);
#   kernels   bench/gpu_kernels_check.py check and compute-sanitizer on the
#             GEMV and argmax kernels (carry out/kernels_check);
#   gemm      bench/gemm.py run (carry out/gemm);
#   moe       bench/moe.py run and compute-sanitizer on a small MoE (carry
#             out/moe);
#   mxfp4     bench/moe.py run --mxfp4: MXFP4 experts beside bf16 at K3's
#             MoE shapes, decode (carry out/moe: `bench/moe.py prepare
#             --mxfp4` here);
#   mla       bench/mla.py run, its prefill part (k3.mla_prefill_attention
#             beside torch SDPA), and compute-sanitizer on a small prefill
#             (carry out/mla: `.venv/bin/python bench/mla.py prepare` here);
#   mla-decode  bench/mla.py run, its decode part (k3.latent_attention's
#             decode entry beside torch's absorbed form; carry out/mla);
#   profile   bench/profile_gpu.sh: k3-run --profile on the scaled and the
#             real-width Kimi-Linear cuts (issue 14);
#   ncu       Nsight Compute on our main kernels (B1 T8192 H96).
#   e2e       bench/e2e.py run: Kimi-Linear-48B (27 layers) prefill and
#             decode, ours beside transformers with fla's kernels (carry
#             out/e2e from `bench/e2e.py prepare`, and .anchors with
#             anchors-fla.tgz: fla's package);
# Prerequisites missing stop the script (exit 2). A failing stage does not
# stop the later ones, but the exit status is 1. Everything a stage writes
# (bench/results/*.json and profile-gpu/*.txt, logs) is bundled into
# $OUT/<stage>.tgz (the device tool returns at most 8 files). Here, in the
# repository root: `tar xzf STAGE.tgz bench/results` (the logs are under
# logs/ in the same archive: `tar xzf STAGE.tgz -C /tmp logs`), then
# `python3 bench/make_benchmarks_md.py` and commit bench/results and
# docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/k3-gpu-out}
mkdir -p "$OUT"
export K3_BIN_DIR=${K3_BIN_DIR:-$PWD/build/bin}
export K3_RUNTIME_LIB=${K3_RUNTIME_LIB:-$PWD/build/runtime/libk3runtime.so}
export FLASHKDA_DIR=${FLASHKDA_DIR:-/tmp/k3-flashkda}
# The anchors' sources: .anchors/anchors.tgz (bench/prepare_gpu.sh) unpacked
# once to $ANCHORS_DIR, or an unpacked .anchors/{fla,flashkda}.
if [ -z "${ANCHORS_DIR:-}" ]; then
  if [ -f .anchors/anchors.tgz ]; then
    ANCHORS_DIR=/tmp/k3-anchors
    if [ ! -d "$ANCHORS_DIR/fla" ]; then
      mkdir -p "$ANCHORS_DIR"
      tar xzf .anchors/anchors.tgz -C "$ANCHORS_DIR"
    fi
  else
    ANCHORS_DIR=$PWD/.anchors
  fi
fi
export ANCHORS_DIR
if [ -z "${K3_COMMIT:-}" ] && [ -f out/bench/COMMIT ]; then
  K3_COMMIT=$(cat out/bench/COMMIT)
fi
export K3_COMMIT=${K3_COMMIT:-unknown}
# Every benchmark's results file is rewritten row by row (bench/protocol.py):
# a stage cut by a time limit keeps what it measured.
export K3_RESULTS_AUTOSAVE=${K3_RESULTS_AUTOSAVE:-1}
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=(all)
[ "${STAGES[*]}" != all ] || STAGES=(check flashkda bench-a bench-b bench-c profile ncu)

# Prerequisites: anything missing stops here.
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
NEED=("$K3_BIN_DIR/k3-run" "$K3_RUNTIME_LIB")
# The KDA stages read bench/prepare_gpu.sh's artifacts; the others carry
# their own (out/moe, out/gemm, ...).
case " ${STAGES[*]} " in
  *" check "* | *" bench-"* | *" old-vs-new "* | *" ncu "*)
    NEED+=(out/bench out/kda_check/cases_bf16.json) ;;
  *" kda-check "*) NEED+=(out/kda_check/cases_bf16.json) ;;
esac
for f in "${NEED[@]}"; do
  [ -e "$f" ] || { echo "gpu_session: $f missing (run bench/prepare_gpu.sh and carry its paths)" >&2; exit 2; }
done
python3 -c "import torch; assert torch.cuda.is_available(); print('torch', torch.__version__, torch.version.cuda)"
if [ -n "${K3_BENCH_BASELINE:-}" ] || [ -d out/bench-baseline ]; then
  export K3_BENCH_BASELINE=${K3_BENCH_BASELINE:-$PWD/out/bench-baseline}
  [ -d "$K3_BENCH_BASELINE" ] || { echo "gpu_session: baseline $K3_BENCH_BASELINE missing" >&2; exit 2; }
  echo "baseline artifacts: $K3_BENCH_BASELINE"
fi

status=0
LOGS=$(mktemp -d /tmp/k3-gpu-logs.XXXXXX)/logs # "logs/" inside each bundle
mkdir -p "$LOGS"
STAMP=$(mktemp /tmp/k3-gpu-stamp.XXXXXX) # files newer than this are the stage's
step() { # step NAME CMD...: runs CMD, logs to $LOGS/NAME.log, records a failure
  local name=$1
  shift
  echo "== $name: $*"
  if "$@" 2>&1 | tee "$LOGS/$name.log"; then
    echo "== $name: ok"
  else
    echo "== $name: FAILED"
    echo "$name" >>"$LOGS/FAILED"
    status=1
  fi
}
bundle() { # bundle STAGE: results written since the stage began, and its logs
  local list
  list=$(find bench/results -newer "$STAMP" -type f 2>/dev/null || true)
  # shellcheck disable=SC2086
  tar czf "$OUT/$1.tgz" $list -C "$(dirname "$LOGS")" logs &&
    echo "bundled $OUT/$1.tgz: $(echo $list | wc -w) result files"
  rm -f "$LOGS"/*.log "$LOGS/FAILED"
  touch "$STAMP"
}
flashkda_start() {
  if [ -n "$(find "$FLASHKDA_DIR" -maxdepth 2 -name '*.so' 2>/dev/null | head -1)" ] ||
    [ ! -d "$ANCHORS_DIR/flashkda" ]; then
    return 0
  fi
  mkdir -p "$FLASHKDA_DIR"
  cp -a "$ANCHORS_DIR/flashkda/." "$FLASHKDA_DIR/"
  (cd "$FLASHKDA_DIR" && FLASH_KDA_CUDA_ARCHS=90a NVCC_THREADS=4 MAX_JOBS=16 \
     python3 setup.py build_ext --inplace >"$FLASHKDA_DIR/build.log" 2>&1) &
  echo $! >"$FLASHKDA_DIR/build.pid"
}
flashkda_wait() {
  if [ -f "$FLASHKDA_DIR/build.pid" ]; then
    local pid
    pid=$(cat "$FLASHKDA_DIR/build.pid")
    while kill -0 "$pid" 2>/dev/null; do sleep 5; done
    rm -f "$FLASHKDA_DIR/build.pid"
  fi
  if [ -z "$(find "$FLASHKDA_DIR" -maxdepth 2 -name '*.so' 2>/dev/null | head -1)" ]; then
    echo "FlashKDA build failed or missing (its rows will be FAILED):"
    tail -20 "$FLASHKDA_DIR/build.log" 2>/dev/null || true
    return 1
  fi
}
bench() { # bench STAGE CASES [SKIP_DECODE] [DECODE_ONLY]: kda_forward.py on the cases (exact labels, ';'-separated)
  # One process per case under $K3_CASE_TIMEOUT seconds (default 150), so
  # that one slow case (fla's Triton autotuning of a varlen shape took more
  # than 80 s on 2026-12-04) costs its own rows only: with
  # K3_RESULTS_AUTOSAVE the row it was in stays in the file as FAILED.
  local stage=$1 cases=$2 i=0 c
  flashkda_wait || true
  IFS=';' read -r -a list <<<"$cases"
  for c in "${list[@]}"; do
    i=$((i + 1))
    step "$stage-$i" timeout "${K3_CASE_TIMEOUT:-150}" env K3_BENCH_CASES="$c" \
      K3_BENCH_SKIP_DECODE="${3:-1}" K3_BENCH_DECODE_ONLY="${4:-0}" \
      K3_RESULTS_TAG="$stage-$i" python3 bench/kda_forward.py run
  done
}

for stage in "${STAGES[@]}"; do
  case $stage in
  check)
    flashkda_start
    if [ -x out/gpu/k3-runtime-tests ]; then
      step runtime-cuda out/gpu/k3-runtime-tests --gtest_filter=Session.CudaFillPtxOnDevice
    fi
    step kda_check python3 bench/gpu_kda_check.py check-bf16
    if [ -d out/gpu ]; then
      step e2e python3 bench/gpu_e2e.py check
    fi
    CS=/usr/local/cuda/bin/compute-sanitizer
    if [ -x "$CS" ] && [ "${K3_SKIP_SANITIZER:-0}" != 1 ]; then
      for tool in memcheck racecheck; do
        step "sanitizer-$tool" "$CS" --tool "$tool" --error-exitcode 9 "$K3_BIN_DIR/k3-run" \
          out/kda_check/bf16_mma.k3bin --device cuda:0 \
          --inputs "out/kda_check/in_bf16_${K3_SANITIZER_CASE:-17}.safetensors" --quiet
      done
    fi
    # The build must end inside this call (the device tool may end what the
    # command leaves running).
    flashkda_wait || true
    ;;
  kda-check)
    # The bf16 KDA cases alone (both gates) and compute-sanitizer on the
    # softplus gate's tensor-core kernels (case 30: sp_large, varlen).
    step kda_check python3 bench/gpu_kda_check.py check-bf16
    CS=/usr/local/cuda/bin/compute-sanitizer
    for tool in memcheck racecheck synccheck; do
      step "sanitizer-sp-$tool" "$CS" --tool "$tool" --error-exitcode 9 "$K3_BIN_DIR/k3-run" \
        out/kda_check/bf16_sp_mma.k3bin --device cuda:0 \
        --inputs out/kda_check/in_bf16_30.safetensors --quiet
    done
    ;;
  flashkda)
    flashkda_start
    flashkda_wait || { echo flashkda >>"$LOGS/FAILED"; status=1; }
    ;;
  bench-a) bench bench-a "B1 T8192 H96;B1 T8192 H64;B1 T32768 H96;B1 T2048 H96" ;;
  bench-b) bench bench-b "B8 T4096 H32;8x1024 packed H96;32x512 packed H32;2x16384 packed H64" ;;
  bench-c)
    bench bench-c "varlen [1,63,64,65,300,507] H64;T1000 H96 (not a multiple of 64);B1 T2048 H96 gates at -5"
    bench bench-decode "none" 0 1
    ;;
  bench-decode) bench bench-decode "none" 0 1 ;;
  old-vs-new)
    # Issue 13: ours beside out/bench-baseline (the previous kernels) on
    # bench-a's shapes, every variant and the decode shapes, no anchors.
    [ -n "${K3_BENCH_BASELINE:-}" ] || { echo "old-vs-new: carry out/bench-baseline" >&2; exit 2; }
    step old-vs-new env K3_BENCH_ANCHORS=0 K3_RESULTS_TAG=old-vs-new K3_BENCH_SKIP_DECODE=0 \
      K3_BENCH_CASES="B1 T8192 H96;B1 T8192 H64;B1 T32768 H96;B1 T2048 H96" \
      python3 bench/kda_forward.py run
    ;;
  interop)
    # Issue 22: DLPack without copies, sampling statistics, CUDA generation,
    # k3.ops.chunk_kda (carry out/gpu_interop); its JSON goes to bench/results.
    step interop python3 bench/gpu_interop.py check
    ;;
  kernels)
    # The GEMV, wgmma and argmax kernels against float64/numpy at awkward
    # shapes (carry out/kernels_check), then compute-sanitizer on each.
    step kernels-check python3 bench/gpu_kernels_check.py check
    CS=/usr/local/cuda/bin/compute-sanitizer
    for a in gemv_f32_n40_k96 gemv_bf16w_f32x_n256_k2304 gemv_bf16_n4096_k128 gemv_bf16_n40_k4104_split \
      gemv_mma_n48_k2312_tt16 gemv_mma_n256_k2320_s4 group_odd_k2312 argmax_v163840 mla flash_kimi \
      wgmma_n576_k2304_ws wgmma_group_mixed_k512_ws wgmma_n576_k2304_r4 wgmma_n576_k2304_ws_r4; do
      for tool in memcheck racecheck; do
        step "sanitizer-$tool-$a" "$CS" --tool "$tool" --error-exitcode 9 "$K3_BIN_DIR/k3-run" \
          "out/kernels_check/$a.k3bin" --device cuda:0 --random-weights 1 --symbol num_seqs=1 \
          --inputs "out/kernels_check/in_$a.safetensors" --quiet
      done
    done
    # num_seqs from the inputs' cu_seqlens (short_conv), else one sequence.
    for a in short_conv_f32_c40:infer gated_norm_h32_d128:num_seqs=1 router:num_seqs=1; do
      sym=${a#*:} a=${a%%:*}
      [ "$sym" = infer ] && sym= || sym="--symbol $sym"
      for tool in memcheck racecheck; do
        # shellcheck disable=SC2086
        step "sanitizer-$tool-$a" "$CS" --tool "$tool" --error-exitcode 9 "$K3_BIN_DIR/k3-run" \
          "out/kernels_check/$a.k3bin" --device cuda:0 --random-weights 1 $sym \
          --inputs "out/kernels_check/in_$a.safetensors" --quiet
      done
    done
    # MXFP4 experts: the decode GEMV, the prefill loop nest and the
    # prefill's tensor-core kernels; bf16 experts in both grouped wgmma
    # schedules and in cluster pairs (artifact:weights:inputs; the bf16
    # variants share kernels_check_moe_grouped.py's T = 300 inputs).
    for a in moe_mxfp4_decode:moe_mxfp4:moe_mxfp4_decode \
      moe_mxfp4_prefill:moe_mxfp4:moe_mxfp4_prefill \
      moe_mxfp4_wgmma:moe_mxfp4_wgmma:moe_mxfp4_wgmma \
      moe_grouped_default:moe_grouped:moe_grouped moe_grouped_128x128:moe_grouped:moe_grouped \
      moe_grouped_ws4:moe_grouped:moe_grouped moe_grouped_ws3c:moe_grouped:moe_grouped \
      moe_grouped_cluster2:moe_grouped:moe_grouped; do
      IFS=: read -r a w in <<< "$a"
      tools="memcheck racecheck"
      [ "$a" = moe_grouped_cluster2 ] && tools="$tools synccheck"
      for tool in $tools; do
        step "sanitizer-$tool-$a" "$CS" --tool "$tool" --error-exitcode 9 "$K3_BIN_DIR/k3-run" \
          "out/kernels_check/$a.k3bin" --device cuda:0 --symbol num_seqs=1 \
          --weights "out/kernels_check/$w.safetensors" \
          --inputs "out/kernels_check/in_$in.safetensors" --quiet
      done
    done
    # A small Kimi-Linear generating for two sequences: the decode entry's
    # grouped GEMVs and its in-place state updates (short convolution, KDA,
    # latent cache) under the sanitizer.
    for tool in memcheck racecheck; do
      step "sanitizer-$tool-decode" "$CS" --tool "$tool" --error-exitcode 9 "$K3_BIN_DIR/k3-run" \
        out/kernels_check/decode_small.k3bin --device cuda:0 --random-weights 1 --prompt "1,2,3,4,5" \
        --prompt "7,8" --max-new-tokens 3 --quiet
    done
    ;;
  gemm) step gemm python3 bench/gemm.py run ;;
  mxfp4)
    # Issue 21: MXFP4 experts beside bf16 at K3's MoE shapes (carry out/moe).
    step moe-mxfp4 python3 bench/moe.py run --mxfp4
    ;;
  moe)
    # Issue 15: the grouped MoE path beside torch._grouped_mm (carry
    # out/moe), then compute-sanitizer on a small model through k3-run.
    step moe python3 bench/moe.py run
    CS=/usr/local/cuda/bin/compute-sanitizer
    for tool in memcheck racecheck synccheck; do
      step "sanitizer-$tool-moe" "$CS" --tool "$tool" --error-exitcode 9 "$K3_BIN_DIR/k3-run" \
        out/moe/small.k3bin --device cuda:0 --symbol num_seqs=1 --inputs out/moe/in_small.safetensors --quiet
    done
    ;;
  mla)
    # Issue 16: the expanded MLA prefill beside torch SDPA (carry out/mla),
    # then compute-sanitizer on a small prefill (awkward lengths, gate)
    # through k3-run.
    step mla env K3_MLA_PARTS=prefill K3_RESULTS_TAG=prefill python3 bench/mla.py run
    CS=/usr/local/cuda/bin/compute-sanitizer
    for tool in memcheck racecheck synccheck; do
      step "sanitizer-$tool-mla" "$CS" --tool "$tool" --error-exitcode 9 "$K3_BIN_DIR/k3-run" \
        out/mla/small.k3bin --device cuda:0 --symbol num_seqs=5 --inputs out/mla/in_small.safetensors --quiet
    done
    ;;
  mla-decode)
    # Issue 16: the absorbed MLA decode (latent cache as decode state)
    # beside torch's absorbed einsums (carry out/mla).
    step mla-decode env K3_MLA_PARTS=decode K3_RESULTS_TAG=decode python3 bench/mla.py run
    ;;
  profile) step profile bash bench/profile_gpu.sh ;;
  e2e)
    FLA_PARENT=/tmp/k3-fla
    if [ -f .anchors/anchors-fla.tgz ] && [ ! -d $FLA_PARENT/fla ]; then
      mkdir -p $FLA_PARENT && tar xzf .anchors/anchors-fla.tgz -C $FLA_PARENT
    elif [ -d "$ANCHORS_DIR/fla" ]; then
      FLA_PARENT=$ANCHORS_DIR
    fi
    step e2e env PYTHONPATH="$FLA_PARENT:${PYTHONPATH:-}" python3 bench/e2e.py run ${K3_E2E_ARGS:-}
    ;;
  ncu)
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    if [ -x "$NCU" ]; then
      K3_BENCH_ANCHORS=0 K3_BENCH_SKIP_DECODE=1 K3_BENCH_CASES="B1 T8192 H96" \
        K3_BENCH_VARIANTS=${K3_NCU_VARIANT:-mma} K3_RESULTS_DIR="$LOGS/ncu-results" \
        timeout 500 "$NCU" --kernel-name regex:kda_mma --launch-count 3 --section SpeedOfLight \
        --section Occupancy --section LaunchStats --section WarpStateStats \
        python3 bench/kda_forward.py run >"$LOGS/ncu.log" 2>&1 || echo "ncu: rc=$? (not counted)"
      grep -E "kda_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued" \
        "$LOGS/ncu.log" | head -40 || true
    fi
    ;;
  *)
    echo "gpu_session: unknown stage '$stage'" >&2
    exit 2
    ;;
  esac
  bundle "$stage"
done
echo "gpu_session: $([ $status = 0 ] && echo ALL OK || echo FAILURES) (bundles in $OUT)"
exit $status
