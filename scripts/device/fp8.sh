#!/bin/bash
# SwiftVR in fp8 (issue 23) on the one H200, from .devbin holding vsr,
# vsr-base (a build of the commit before the fp8 work), the test binaries
# cublaslt.test, backend_cuda.test and model_swiftvr.test, and the static
# ffmpeg's package/ (all unpacked).
#   fp8.sh tests    the GPU tests and benchmarks of the fp8 GEMMs, the fp8
#                   DiT's tests, and BenchmarkDiTChunk in bf16 and fp8
#   fp8.sh psnr     49 frames of the real clip, 640x360 -> 2560x1440, with
#                   the full-size synthetic checkpoint and one with outlier
#                   channels (--outliers 20): vsr bf16 and fp8 against an
#                   independent PyTorch float32 run (and PyTorch's own bf16),
#                   PSNR over the RGB frames (fp8 with fast and exact
#                   accumulation); vsr's bf16 output against vsr-base's
#                   and fp8 against itself, bitwise
#   fp8.sh bench    the reference workload (361 frames), bf16 and fp8 in
#                   turn: --no-encode, and libx265 ultrafast CRF 20 with
#                   --encode-proxy bicubic; mean of the last 4 of 5 requests
set -u
cd "$(dirname "$0")"; B=$PWD
export PATH=$PWD/package:$PATH
[ -x ./vsr ] && [ -x package/ffmpeg ] || { echo "no ./vsr or package/ffmpeg: unpack the .xz files first"; exit 1; }
py=python3
$py -c 'import torch' 2>/dev/null || py=/opt/torch/.venv/bin/python3
clip=../testdata/video/oa4_launch.webm
ck=/tmp/swck ckout=/tmp/swck_out
[ -d $ck ] || ./vsr checkpoint synth --family swiftvr --preset full --seed 1 -o $ck | tail -1
case "${1:-tests}" in
tests)
  (cd ../nvidia/cublaslt && $B/cublaslt.test -test.run FP8 -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|fp8_gpu_test|gpu_test|panic')
  (cd ../nvidia/cublaslt && $B/cublaslt.test -test.run '^$' -test.bench GemmDiT -test.benchtime 1x 2>&1 | grep -E 'Benchmark|FAIL|panic')
  (cd ../backend/cuda && $B/backend_cuda.test -test.run 'FP8|TransformerOps' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|fp8_test|panic')
  (cd ../model/swiftvr && $B/model_swiftvr.test -test.run 'DiTFP8GPU|DiTOnGPU|DiTGraphsGPU' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|fp8_gpu_test|gpu_test|panic')
  (cd ../model/swiftvr && VSR_SWIFTVR_CKPT=$ck VSR_DIT_FP8=1 $B/model_swiftvr.test -test.run '^$' -test.bench 'DiTChunk' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|loaded|FAIL|panic')
  ;;
psnr)
  [ -d $ckout ] || ./vsr checkpoint synth --family swiftvr --preset full --seed 1 --outliers 20 -o $ckout | tail -1
  ffmpeg -v error -y -i $clip -frames:v 49 -c:v ffv1 /tmp/in49.mkv
  ffmpeg -v error -y -i /tmp/in49.mkv -f rawvideo -pix_fmt rgb24 /tmp/in49.rgb
  out() { # binary, checkpoint, dtype, name[, device]
    ./$1 restore /tmp/in49.mkv -o /tmp/$4.mkv -y --model $2 --size 2560x1440 --dtype $3 --device ${5:-cuda:0} --codec ffv1 --pix-fmt gbrp 2>&1 | tail -1
    ffmpeg -v error -y -i /tmp/$4.mkv -f rawvideo -pix_fmt rgb24 /tmp/$4.rgb
  }
  torch() { # checkpoint, dtype, name
    $py ../scripts/bench_torch_swiftvr.py $1 --frames 49 --in-size 640x360 --out-size 2560x1440 --dtype $2 \
      --input-raw /tmp/in49.rgb --dump-out /tmp/$3.rgb --repeats 1 --warmup 0 2>&1 | tail -1
  }
  out vsr $ck bf16 swck_bf16; out vsr $ck fp8 swck_fp8; out vsr $ck fp8 swck_fp8exact "cuda:0?dtype=bf16&fp8_accum=exact"
  out vsr $ckout bf16 swck_out_bf16; out vsr $ckout fp8 swck_out_fp8
  if [ -z "${NOBASE:-}" ]; then
    out vsr-base $ck bf16 base_bf16
    cmp /tmp/base_bf16.rgb /tmp/swck_bf16.rgb && echo "bf16 output bitwise equal to vsr-base's"
  fi
  out vsr $ck fp8 swck_fp8_again
  cmp /tmp/swck_fp8.rgb /tmp/swck_fp8_again.rgb && echo "fp8 output bitwise equal run to run"
  torch $ck fp32 swck_torch_fp32; torch $ckout fp32 swck_out_torch_fp32
  [ -z "${NOBASE:-}" ] && torch $ck bf16 swck_torch_bf16
  $py - <<'PY'
import numpy as np
import os
def load(n):
    p = "/tmp/%s.rgb" % n
    return np.fromfile(p, dtype=np.uint8).astype(np.float64) if os.path.exists(p) else np.zeros(0)
def psnr(a, b):
    a, b = load(a), load(b)
    if a.size != b.size or a.size == 0: return "sizes %d vs %d" % (a.size, b.size)
    return "%.2f dB" % (10 * np.log10(255**2 / np.mean((a - b) ** 2)))
for a, b in [("swck_bf16", "swck_torch_fp32"), ("swck_fp8", "swck_torch_fp32"), ("swck_fp8exact", "swck_torch_fp32"),
             ("swck_fp8", "swck_bf16"), ("swck_fp8exact", "swck_bf16"), ("swck_torch_bf16", "swck_torch_fp32"),
             ("swck_out_bf16", "swck_out_torch_fp32"), ("swck_out_fp8", "swck_out_torch_fp32"), ("swck_out_fp8", "swck_out_bf16")]:
    print("%-16s against %-20s %s" % (a, b, psnr(a, b)))
PY
  ;;
bench)
  ffmpeg -v error -y -stream_loop 9 -i $clip -frames:v 361 -c:v libx264 -qp 0 -preset ultrafast /tmp/v361.mkv
  for mode in "--no-encode" "--codec libx265 --preset ultrafast --crf 20 --encode-proxy bicubic"; do
    for d in bf16 fp8; do
      echo "== $d $mode"
      ./vsr bench /tmp/v361.mkv --frames 361 --requests 5 --model $ck --size 2560x1440 --dtype $d --device cuda:0 $mode 2>&1 | tail -14
    done
  done
  ;;
esac
