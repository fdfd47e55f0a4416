#!/bin/bash
# Sequence parallelism and height bands on the one H200 (issue 20). Run
# from .devbin holding the test binaries, vsr and package/ffmpeg.
#   sequence.sh        GPU tests: backend/cuda, nvidia/cudnn, parallel and
#                      SwiftVR's chunk and sequence parallelism
#   sequence.sh full   the full-size checkpoint (TestSequenceFullGPU): 2, 3 and
#                      4 ranks of GPU 0 on each chunk against one, the ReAE
#                      in bands over ranks and on one device, and peak
#                      memory per rank at 3840x2160 and 7680x4320
#   sequence.sh bench  vsr bench of the reference workload (361 frames,
#                      640x360 to 2560x1440) on cuda:0, on cuda:0,cuda:0 in
#                      sequence, and on 4 ranks as 2 groups of 2
set -u
cd "$(dirname "$0")"; B=$PWD
export PATH=$PWD/package:$PATH
ck=/tmp/swck
[ -d $ck ] || ./vsr checkpoint synth --family swiftvr --preset full --seed 1 -o $ck | tail -1
if [ "${1:-}" = bench ]; then
  clip=../testdata/video/oa4_launch.webm
  [ -f /tmp/ref361.mkv ] || ffmpeg -v error -stream_loop 1 -i $clip -frames:v 361 -c:v ffv1 /tmp/ref361.mkv
  for a in "cuda:0 chunks" "cuda:0,cuda:0 sequence" "cuda:0,cuda:0,cuda:0,cuda:0 chunks=2,sequence=2"; do
    set -- $a
    echo "-- bench $1 --parallel $2"
    ./vsr bench /tmp/ref361.mkv --model $ck --size 2560x1440 --device $1 --parallel $2 --requests 2 --no-encode 2>&1 | grep -vE '^\s*$' | tail -25
  done
  exit
fi
if [ "${1:-}" = full ]; then
  (cd ../model/swiftvr && VSR_FULL_CK=$ck VSR_FULL_SWIFTVR=1 $B/model_swiftvr.test -test.run "${2:-SequenceFullGPU|SequenceMemoryGPU}" -test.v -test.timeout 300s 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|gpu_test|panic')
  exit
fi
echo "== GPU tests"
for p in backend_cuda nvidia_cudnn parallel; do
  d=$(echo $p | tr _ /)
  (cd ../$d && $B/$p.test -test.timeout 300s 2>&1 | grep -E '^(--- FAIL|ok|FAIL|PASS)|panic| > |want|got|: .* on ' | head -30)
done
(cd ../model/swiftvr && $B/model_swiftvr.test -test.run 'Parallel|Sequence|DiTOnGPU' -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|gpu_test|panic')
