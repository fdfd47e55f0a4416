#!/bin/bash
# GPU check of the float32 storage type (CUDA backend without TF32): every
# GPU test of the packages it touches, CDA-VSR's step latency in fp16 and
# fp32 with and without graphs beside PyTorch eager in the same call, and
# whole files with vsr bench. Run from .devbin holding the test binaries
# (pkg_path.test), vsr and package/ffmpeg.
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH
py=python3
$py -c 'import torch' 2>/dev/null || py=/opt/torch/.venv/bin/python3
for p in backend/cuda model/cdavsr model/swiftvr nvidia/cudnn nvidia/cuda; do
  t=$(echo $p | tr / _).test
  (cd ../$p && ../../.devbin/$t -test.timeout 400s -test.v 2>&1 | grep -E '^(--- FAIL|FAIL|ok|PASS)|relative error|panic' | grep -v '^    --- PASS' | sed "s#^#$p: #" | tail -40)
done
./vsr checkpoint synth --family cdavsr --seed 1 -o /tmp/cda.safetensors >/dev/null
echo "== step latency (vsr)"
(cd ../model/cdavsr && ../../.devbin/model_cdavsr.test -test.run XXX -test.bench StepGPU -test.benchtime 1x 2>&1 | grep -E 'Benchmark|FAIL')
echo "== step latency (PyTorch eager, same call)"
$py ../scripts/bench_torch_cdavsr.py /tmp/cda.safetensors 320x180 640x360
echo "== vsr bench, whole files"
V=../testdata/video/oa4_launch.webm
ffmpeg -v error -i $V -vf scale=320:180 -c:v libx264 -crf 18 /tmp/small.mp4
for dt in f16 f32; do
  for in in /tmp/small.mp4 $V; do
    echo "-- $dt $in"
    ./vsr bench $in --device cuda --dtype $dt --model /tmp/cda.safetensors --frames 361 --requests 3 --no-encode 2>&1 | grep -E 'full video|frames/s|GPU compute|peak'
  done
done
