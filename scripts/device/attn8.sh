#!/bin/bash
# fp8 attention scores (issue 23) on the H200: the attention tests, the
# attention benchmarks with and without fp8 scores (and the bf16 kernel of
# the commit before, backend_cuda-base.test, for the refactor), and the DiT
# chunk in bf16, fp8 and fp8 with fp8 attention on the full-size synthetic
# checkpoint. Then CDA-VSR's step beside PyTorch eager. Run from a folder
# holding backend_cuda.test, backend_cuda-base.test, model_swiftvr.test,
# cdavsr.test and vsr (unpacked). Results go to $OUT (or /tmp/attn8).
set -u
cd "$(dirname "$0")"; B=$PWD
O=${OUT:-/tmp/attn8}; mkdir -p $O
py=python3
$py -c 'import torch' 2>/dev/null || py=/opt/torch/.venv/bin/python3
F='^(---|ok|FAIL|PASS|panic)|_test.go'
echo "== attention tests"
(cd ../backend/cuda && $B/backend_cuda.test -test.run 'TestAttentionFP8|TestAttention$|TestWindowAttention|TestTransformerOps' -test.v 2>&1 | grep -E "$F") | tee $O/tests.log | grep -v '^--- PASS' | head -40
echo "== attention benchmarks"
for t in backend_cuda-base backend_cuda; do echo "-- $t"; (cd ../backend/cuda && $B/$t.test -test.run XXX -test.bench 'WindowAttention/default|^BenchmarkAttention/default' -test.benchtime 20x 2>&1 | grep -E 'Benchmark|FAIL|panic'); done | tee $O/bench.log
(cd ../backend/cuda && $B/backend_cuda.test -test.run XXX -test.bench 'AttentionFP8' -test.benchtime 20x 2>&1 | grep -E 'Benchmark|FAIL|panic') | tee -a $O/bench.log
echo "== DiT chunk"
ck=/tmp/swck
[ -d $ck ] || ./vsr checkpoint synth --family swiftvr --preset full --seed 1 -o $ck | tail -1
(cd ../model/swiftvr && VSR_SWIFTVR_CKPT=$ck VSR_DIT_FP8=1 timeout 300 $B/model_swiftvr.test -test.run '^$' -test.bench 'DiTChunk/.*/middle/graph' -test.benchtime 5x 2>&1 | grep -E 'Benchmark|loaded|FAIL|panic') | tee $O/dit.log
echo "== CDA-VSR step, PyTorch eager beside"
./vsr checkpoint synth --family cdavsr --seed 1 -o /tmp/cda.safetensors > /dev/null
(cd ../model/cdavsr && $B/cdavsr.test -test.run XXX -test.bench 'StepGPU/.*/f16/graphs=true' -test.benchtime 1x 2>&1 | grep Benchmark) | tee $O/step.log
$py ../scripts/bench_torch_cdavsr.py /tmp/cda.safetensors 320x180 640x360 2>&1 | tee -a $O/step.log
