#!/bin/bash
# End of session GPU check: the GPU tests of the packages changed, and
# CDA-VSR's step latency with and without graphs beside PyTorch eager in
# the same call. Run from .devbin holding the test binaries, vsr and package/.
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH
py=python3
$py -c 'import torch' 2>/dev/null || py=/opt/torch/.venv/bin/python3
for p in model/cdavsr model/swiftvr backend/cuda nvidia/cuda; do
  t=$(echo $p | tr / _).test
  (cd ../$p && ../../.devbin/$t -test.timeout 300s 2>&1 | tail -3 | sed "s#^#$p: #")
done
./vsr checkpoint synth --family cdavsr --seed 1 -o /tmp/cda.safetensors >/dev/null
(cd ../model/cdavsr && ../../.devbin/model_cdavsr.test -test.run XXX -test.bench StepGPU -test.benchtime 1x 2>&1 | grep Benchmark)
$py ../scripts/bench_torch_cdavsr.py /tmp/cda.safetensors 320x180 640x360
