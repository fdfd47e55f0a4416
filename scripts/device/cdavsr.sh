#!/bin/bash
# CDA-VSR on the H200: GPU tests, the network's step latency beside PyTorch
# eager in the same call, and vsr bench with the side data. Run from a
# folder holding vsr, cdavsr.test, backend_cuda.test and the static ffmpeg's
# package/ (all unpacked); with vsr-base and cdavsr-base.test (a build of an
# earlier commit) beside them, their figures are measured in turn with the
# same commands, for the comparison. Results go to $OUT (or /tmp/cdavsr).
set -u
cd "$(dirname "$0")"; B=$PWD
O=${OUT:-/tmp/cdavsr}; mkdir -p $O
export PATH=$PWD/package:$PATH
py=python3
$py -c 'import torch' 2>/dev/null || py=/opt/torch/.venv/bin/python3
F='^(---|ok|FAIL|PASS|panic)|_test.go'
builds=(""); [ -x ./vsr-base ] && builds=(-base "")
./vsr checkpoint synth --family cdavsr --seed 1 -o /tmp/cda.safetensors > /dev/null
echo "== GPU tests"
(cd ../model/cdavsr && $B/cdavsr.test -test.run 'GPU' -test.v 2>&1 | grep -E "$F") > $O/tests.log
(cd ../backend/cuda && $B/backend_cuda.test -test.run 'TestOpsAgainstCPU|TestModelAgainstCPU|DenseAgainstCPU|TestFusedConv$' -test.v 2>&1 | grep -E "$F") >> $O/tests.log
grep -E '^(--- FAIL|FAIL|panic)' $O/tests.log; grep -c '^--- PASS' $O/tests.log
echo "== step latency (vsr; the base build first when there is one)"
for b in "${builds[@]}"; do [ -x ./cdavsr$b.test ] || continue
  echo "-- cdavsr$b"; (cd ../model/cdavsr && $B/cdavsr$b.test -test.run XXX -test.bench StepGPU -test.benchtime 1x 2>&1 | grep Benchmark)
done | tee $O/step.log
echo "== step latency (PyTorch eager, same call)"
$py ../scripts/bench_torch_cdavsr.py /tmp/cda.safetensors 320x180 640x360 2>&1 | tee $O/torch.log
echo "== vsr bench (361 frames, mean of the last 2 of 3 requests)"
V=../testdata/video/oa4_launch.webm
ffmpeg -v error -y -i $V -vf scale=320:180 -c:v libx264 -crf 18 /tmp/small.mp4
for b in "${builds[@]}"; do
  for in in $V /tmp/small.mp4; do
    echo "-- vsr$b $in --no-encode"; ./vsr$b bench $in --device cuda --model /tmp/cda.safetensors --frames 361 --requests 3 --no-encode 2>&1 | grep -E 'full video|frames/s|GPU|peak'
  done
  echo "-- vsr$b $V libx264 ultrafast CRF 20"; ./vsr$b bench $V --device cuda --model /tmp/cda.safetensors --frames 361 --requests 3 --codec libx264 --preset ultrafast --crf 20 2>&1 | grep -E 'full video|frames/s|GPU|peak'
  echo "-- vsr$b bundled compact model --no-encode (regression check)"; ./vsr$b bench $V --device cuda --frames 361 --requests 5 --no-encode 2>&1 | grep -E 'full video|frames/s|GPU compute'
done 2>&1 | tee $O/bench.log
