#!/bin/bash
# realesrgan-x4plus with its dense blocks as buffers (issue 18): the GPU tests,
# the dense-block kernel against cuDNN, the model alone with the buffers and
# with the concatenations copied, and vsr bench. Run from a folder holding
# vsr, backend_cuda.test, the static ffmpeg in package/ and models/ with
# realesrgan-x4plus.bin split into x4p.even.xz and x4p.odd.xz (its even and odd
# bytes, xz-compressed: 1.4 MB smaller than the whole file, to fit the carry).
set -u
cd "$(dirname "$0")"; B=$PWD
for f in *.xz package/*.xz models/*.xz; do [ -f $f ] && xz -d -f $f; done; chmod +x *.test vsr package/ffmpeg
py=python3; $py -c 'print()' >/dev/null 2>&1 || py=/opt/torch/.venv/bin/python3
$py -c "
e=open('models/x4p.even','rb').read(); o=open('models/x4p.odd','rb').read()
b=bytearray(len(e)+len(o)); b[0::2]=e; b[1::2]=o; open('models/realesrgan-x4plus.bin','wb').write(b)"
rm -f models/x4p.*; sha256sum models/realesrgan-x4plus.bin
export PATH=$PWD/package:$PATH VSR_MODELS=$PWD/models
cd ../backend/cuda
echo "== correctness"
$B/backend_cuda.test -test.run 'TestFusedConv$|TestDenseAgainstCPU|TestModelAgainstCPU|TestOpsAgainstCPU|TestKernelSyntax' -test.v > /tmp/t.log 2>&1; echo "rc=$?"
grep -E '^(--- |ok|FAIL|PASS|panic)' /tmp/t.log | head -20; grep -E 'dense_test' /tmp/t.log | grep -E 'dense-16 f16|x4plus'
grep -E 'k32 \(strides|k16 \(strides' /tmp/t.log | grep -v 'relative error 0.000[0-9]*$' | head
echo "== kernel benchmarks"
$B/backend_cuda.test -test.run 'TestSliceConvBench|TestFusedConvBench' -test.v 2>&1 | grep -E 'convfused_test|^---|FAIL|panic' | grep -v 'variant "-DCF_PROBE\|log:' | head -40
echo "== model"
$B/backend_cuda.test -test.run XXX -test.bench X4plus -test.benchtime 4x 2>&1 | grep -E 'Benchmark|ok|FAIL|panic'
echo "== vsr bench"
cd $B; clip=../testdata/video/oa4_launch.webm
b() { echo "-- $*"; ./vsr bench $clip --device cuda --json "$@" 2>&1 | tr -d ' \n' | grep -o '"batch":[0-9]*\|"mean":{[^}]*}\|"error":"[^"]*"' | tr '\n' ' '; echo; }
b --frames 361 --requests 5 --no-encode
b --frames 361 --requests 3 --no-encode --model realesrgan-x4plus
b --frames 361 --requests 3 --no-encode --model realesrgan-x4plus --no-fused-conv
b --frames 361 --requests 3 --no-encode --model realesrgan-x4plus --dtype bf16
b --frames 361 --requests 3 --model realesrgan-x4plus --codec libx265 --preset ultrafast --crf 20
./vsr bench $clip --device cuda --frames 96 --requests 2 --no-encode --model realesrgan-x4plus 2>&1 | tail -14
