#!/bin/bash
# realesrgan-x4plus on the H200: BenchmarkX4plus, then an ncu profile of 90 kernels of
# the trunk (per-kernel time, grid and block). Run from .devbin holding
# backend_cuda.test(.xz) and models/ with realesrgan-x4plus.param and
# realesrgan-x4plus.bin(.xz); the CSV goes to $OUT.
set -u
cd "$(dirname "$0")"; B=$PWD
for f in *.xz models/*.xz; do [ -f $f ] && xz -d -f $f; done; chmod +x *.test
export VSR_MODELS=$B/models
cd ../backend/cuda
$B/backend_cuda.test -test.run XXX -test.bench 'X4plus/f16' -test.benchtime 4x 2>&1 | grep -E '^Benchmark|FAIL|skip'
/usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --csv --launch-skip 2500 --launch-count 90 $B/backend_cuda.test -test.run XXX -test.bench 'X4plus/f16' -test.benchtime 1x > $OUT/ncu.csv 2>$OUT/ncu.err
wc -l $OUT/ncu.csv; tail -3 $OUT/ncu.err
