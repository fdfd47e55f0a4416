#!/bin/bash
# CDA-VSR on the H200: GPU tests, the network's step latency beside PyTorch
# eager in the same call, and vsr bench with the side data. Run from a
# folder holding vsr, cdavsr.test and the static ffmpeg's package/.
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH
py=python3
$py -c 'import torch' 2>/dev/null || py=/opt/torch/.venv/bin/python3
./vsr checkpoint synth --family cdavsr --seed 1 -o /tmp/cda.safetensors
echo "== GPU tests"
(cd ../model/cdavsr && ../../.devbin/cdavsr.test -test.run 'GoldenGPU|MatcherGPU' -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|gpu_test|panic')
echo "== step latency (vsr)"
(cd ../model/cdavsr && ../../.devbin/cdavsr.test -test.run XXX -test.bench StepGPU -test.benchtime 1x 2>&1 | grep -E 'Benchmark|FAIL')
echo "== step latency (PyTorch eager, same call)"
$py ../scripts/bench_torch_cdavsr.py /tmp/cda.safetensors 320x180 640x360
echo "== vsr bench"
V=../testdata/video/oa4_launch.webm
./vsr bench $V --device cuda --model /tmp/cda.safetensors --frames 361 --requests 3 --no-encode 2>&1 | tail -12
./vsr bench $V --device cuda --model /tmp/cda.safetensors --frames 361 --requests 3 --codec libx264 --preset ultrafast --crf 20 2>&1 | grep -E 'full video|frames/s|peak|CPU time'
ffmpeg -v error -i $V -vf scale=320:180 -c:v libx264 -crf 18 /tmp/small.mp4
./vsr bench /tmp/small.mp4 --device cuda --model /tmp/cda.safetensors --frames 361 --requests 3 --no-encode 2>&1 | grep -E 'input|full video|frames/s|GPU compute|peak' 
