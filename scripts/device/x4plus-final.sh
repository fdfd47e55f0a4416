#!/bin/bash
# The last calls of issue 18 (2026-12-02): realesrgan-ncnn-vulkan beside vsr
# (ncnn-vulkan.sh), the GPU tests of backend/cuda and model/cdavsr, and
# e595f63's test binaries (base_cuda.test, base_cdavsr.test) alternated with
# this tree's: the fused kernel's TestFusedConvBench and CDA-VSR's P step.
# Run from a folder holding what ncnn-vulkan.sh needs, cdavsr.test and the
# two base binaries.
set -u
cd "$(dirname "$0")"; B=$PWD
bash ./ncnn-vulkan.sh 2>&1
cd ../backend/cuda
echo "== GPU tests"
$B/backend_cuda.test -test.run 'TestFusedConv$|TestDenseAgainstCPU|TestModelAgainstCPU|TestOpsAgainstCPU|TestKernelSyntax|TestWideGPU' -test.v > /tmp/t.log 2>&1; echo "rc=$?"
grep -E '^(--- |ok|FAIL|PASS|panic)' /tmp/t.log | head -20; grep -E 'slice conv' /tmp/t.log
echo "== CDA-VSR GPU tests (the motion kernels)"
(cd ../../model/cdavsr && $B/cdavsr.test -test.run 'GPU' -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS|panic)')
echo "== fused kernel, e595f63 against now (no variants), alternated"
for r in 1 2; do for bin in base_cuda backend_cuda; do echo "-- $bin"
FUSED_VARIANTS=";" $B/$bin.test -test.run 'TestFusedConvBench' -test.v 2>&1 | grep -E 'fused conv3x3|cuDNN conv \+|64->48 \+ bias  |FAIL|panic'
done; done
echo "== CDA-VSR step, e595f63 against now, alternated"
cd ../../model/cdavsr
for bin in base_cdavsr cdavsr base_cdavsr cdavsr; do echo "-- $bin"; $B/$bin.test -test.run XXX -test.bench 'StepGPU' -test.benchtime 1x 2>&1 | grep -E 'Benchmark.*(640x360|320x180).*f16' | head -4; done
