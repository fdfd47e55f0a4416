#!/bin/bash
# CDA-VSR with float32 inputs, outputs and state beside fp16 layers (issue
# 17) on the H200: the GPU tests, outputs of the other models unchanged
# bitwise, and the speed against vsr-base / cdavsr-base.test (the commit
# before) in the same call. Run from a folder holding vsr, vsr-base,
# cdavsr.test, cdavsr-base.test, backend_cuda.test and the static ffmpeg's
# package/ (all unpacked). Results go to $OUT (or /tmp/wide).
set -u
cd "$(dirname "$0")"; B=$PWD
O=${OUT:-/tmp/wide}; mkdir -p $O
export PATH=$PWD/package:$PATH
F='^(---|ok|FAIL|PASS|panic)|_test.go'
echo "== GPU tests"
(cd ../model/cdavsr && $B/cdavsr.test -test.run 'GPU' -test.v 2>&1 | grep -E "$F") > $O/tests.log
(cd ../backend/cuda && $B/backend_cuda.test -test.run 'TestWideGPU|TestOpsAgainstCPU|TestModelAgainstCPU|DenseAgainstCPU|TestFusedConv$|TestYUVKernel' -test.v 2>&1 | grep -E "$F") >> $O/tests.log
grep -E '^(--- FAIL|FAIL|panic)' $O/tests.log; grep -c '^--- PASS' $O/tests.log
echo "== outputs before and after"
clip=../testdata/video/oa4_launch.webm t=$(mktemp -d)
md5() { ffmpeg -v error -i "$1" -map 0:v -f md5 - ; }
./vsr checkpoint synth --family swiftvr --preset tiny -o $t/ck >/dev/null
./vsr checkpoint synth --family cdavsr --seed 1 -o /tmp/cda.safetensors > /dev/null
for b in vsr-base vsr; do
  ./$b restore $clip -o $t/c-$b.mkv --frames 48 --device cuda --codec ffv1 --pix-fmt gbrp --progress none || echo "$b compact failed"
  ./$b restore $clip -o $t/s-$b.mkv --frames 30 --device cuda --model $t/ck --sr-ratio 2 --codec ffv1 --pix-fmt gbrp --progress none || echo "$b swiftvr failed"
  ./$b restore $clip -o $t/d-$b.mkv --frames 48 --device cuda --model /tmp/cda.safetensors --codec ffv1 --pix-fmt gbrp --progress none || echo "$b cdavsr failed"
  echo "$b compact $(md5 $t/c-$b.mkv) swiftvr $(md5 $t/s-$b.mkv) cdavsr $(md5 $t/d-$b.mkv)"
done | tee $O/outputs.log
ffmpeg -v error -i $t/d-vsr.mkv -i $t/d-vsr-base.mkv -lavfi psnr -f null - 2>&1 | tail -1 | tee -a $O/outputs.log
ffmpeg -i $t/d-vsr.mkv -i $t/d-vsr-base.mkv -lavfi psnr -f null - 2>&1 | grep -o 'PSNR.*' | tee -a $O/outputs.log
echo "== step latency, base then new"
for b in -base ""; do echo "-- cdavsr$b"; (cd ../model/cdavsr && $B/cdavsr$b.test -test.run XXX -test.bench StepGPU -test.benchtime 1x 2>&1 | grep Benchmark); done | tee $O/step.log
echo "== vsr bench, two rounds"
ffmpeg -v error -y -i $clip -vf scale=320:180 -c:v libx264 -crf 18 /tmp/small.mp4
for r in 1 2; do for b in vsr-base vsr; do for in in $clip /tmp/small.mp4; do
  echo "-- $b $in"; ./$b bench $in --device cuda --model /tmp/cda.safetensors --frames 361 --requests 3 --no-encode 2>&1 | grep -E 'full video|^frames/s|GPU compute|GPU busy|peak'
done; done; done | tee $O/bench.log
