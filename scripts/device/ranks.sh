#!/bin/bash
# Several ranks on the one H200 (issue 19). Run from .devbin holding the
# test binaries, vsr and package/ffmpeg.
#   ranks.sh        the GPU tests of parallel and SwiftVR's chunk
#                   parallelism; the compact model on cuda:0 and
#                   cuda:0,cuda:0 (MD5 of the decoded frames)
#   ranks.sh full   the full-size synthetic checkpoint on 1, 2 and 3 ranks
#                   of GPU 0 in one process (TestParallelFullGPU), the same
#                   restore in two processes on cuda:0 (cuDNN's timed choice
#                   differs between processes), and vsr bench of the
#                   reference workload on cuda:0 and cuda:0,cuda:0
#   ranks.sh cli    the full-size checkpoint restored by vsr (separate
#                   processes) on 1, 2 and 3 ranks of GPU 0: MD5 of the
#                   decoded frames
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH
clip=../testdata/video/oa4_launch.webm
if [ "${1:-}" = cli ]; then
  ck=/tmp/swck
  [ -d $ck ] || ./vsr checkpoint synth --family swiftvr --preset full -o $ck | tail -1
  [ -f /tmp/ref361.mkv ] || ffmpeg -v error -stream_loop 1 -i $clip -frames:v 361 -c:v ffv1 /tmp/ref361.mkv
  for d in cuda:0 cuda:0,cuda:0 cuda:0,cuda:0,cuda:0; do
    ./vsr restore /tmp/ref361.mkv -o /tmp/s.mkv -y --model $ck --size 2560x1440 --device $d --codec ffv1 --pix-fmt gbrp --segments 12 2>&1 | tail -1
    echo "$d $(ffmpeg -v error -threads 16 -i /tmp/s.mkv -f md5 -)"
  done
  exit
fi
if [ "${1:-}" = full ]; then
  (cd ../model/swiftvr && VSR_FULL_SWIFTVR=1 ../../.devbin/model_swiftvr.test -test.run 'ParallelFullGPU' -test.v -test.timeout 500s 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|gpu_test|panic')
  ck=/tmp/swck
  [ -d $ck ] || ./vsr checkpoint synth --family swiftvr --preset full -o $ck | tail -1
  [ -f /tmp/ref361.mkv ] || ffmpeg -v error -stream_loop 1 -i $clip -frames:v 361 -c:v ffv1 /tmp/ref361.mkv
  for run in 1 2; do
    ./vsr restore /tmp/ref361.mkv -o /tmp/s.mkv -y --model $ck --size 2560x1440 --device cuda:0 --codec ffv1 --pix-fmt gbrp --segments 12 2>&1 | tail -1
    echo "cuda:0 process $run: $(ffmpeg -v error -threads 16 -i /tmp/s.mkv -f md5 -)"
  done
  for d in cuda:0 cuda:0,cuda:0; do
    echo "-- bench $d"
    ./vsr bench /tmp/ref361.mkv --model $ck --size 2560x1440 --device $d --requests 3 --no-encode 2>&1 | grep -E 'request|full video|frames/s|rank|peak|GPU'
  done
  exit
fi
echo "== GPU tests"
(cd ../parallel && ../.devbin/parallel.test -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|panic')
(cd ../model/swiftvr && ../../.devbin/model_swiftvr.test -test.run 'Parallel' -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|gpu_test|panic')
echo "== compact model, 194 frames"
for d in cuda:0 cuda:0,cuda:0; do
  ./vsr restore $clip -o /tmp/c.mkv -y --device $d --codec ffv1 --pix-fmt gbrp 2>&1 | tail -1
  echo "$d $(ffmpeg -v error -i /tmp/c.mkv -f md5 -)"
done
