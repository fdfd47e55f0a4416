#!/bin/bash
# The fused conv epilogues (ReLU and leaky ReLU in vsr's fp16 kernel; bias +
# residual without activation in cuDNN's epilogue) against the previous
# build, in one call: GPU tests, then realesrgan-x4plus and CDA-VSR timings
# for both builds, twice. Run from .devbin (test binaries, models/).
set -u
cd "$(dirname "$0")"
export VSR_MODELS=$PWD/models
(cd ../backend/cuda && ../../.devbin/backend_cuda.test -test.run 'DenseAgainstCPU|ModelAgainstCPU|Fused|Conv' 2>&1 | tail -2)
(cd ../model/cdavsr && ../../.devbin/model_cdavsr.test -test.run 'GPU' 2>&1 | tail -2)
for r in 1 2; do
  for v in base new; do
    c=base_cuda.test; d=base_cdavsr.test
    [ $v = new ] && c=backend_cuda.test && d=model_cdavsr.test
    echo "round $r $v: $(./$c -test.run XXX -test.bench 'X4plus/f16' -test.benchtime 4x 2>&1 | grep Benchmark | tr -s ' ')"
    (cd ../model/cdavsr && ../../.devbin/$d -test.run XXX -test.bench 'StepGPU/640x360/f16/graphs=true' -test.benchtime 1x 2>&1 | grep Benchmark | tr -s ' ' | sed "s/^/round $r $v: /")
  done
done
