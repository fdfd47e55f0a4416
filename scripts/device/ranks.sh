#!/bin/bash
# Several ranks on the one H200 (issue 19): the GPU tests of parallel and
# SwiftVR's chunk parallelism; the compact model and the full-size
# synthetic SwiftVR checkpoint (361 frames, 640x360 -> 2560x1440, ffv1/gbrp)
# on cuda:0, cuda:0,cuda:0 and cuda:0,cuda:0,cuda:0, compared by the MD5 of
# the decoded frames. Argument "bench": vsr bench of the reference workload
# on cuda:0 and cuda:0,cuda:0 instead. Run from .devbin holding the test
# binaries, vsr and package/ffmpeg.
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH
clip=../testdata/video/oa4_launch.webm
ck=/tmp/swck
[ -d $ck ] || ./vsr checkpoint synth --family swiftvr --preset full -o $ck | tail -1
[ -f /tmp/ref361.mkv ] || ffmpeg -v error -stream_loop 1 -i $clip -frames:v 361 -c:v ffv1 /tmp/ref361.mkv
if [ "${1:-}" = bench ]; then
  for d in cuda:0 cuda:0,cuda:0 cuda:0; do
    echo "-- $d"
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
echo "== SwiftVR full size, 361 frames"
for d in cuda:0 cuda:0,cuda:0 cuda:0,cuda:0,cuda:0; do
  ./vsr restore /tmp/ref361.mkv -o /tmp/s.mkv -y --model $ck --size 2560x1440 --device $d --codec ffv1 --pix-fmt gbrp --segments 12 2>&1 | tail -1
  echo "$d $(ffmpeg -v error -threads 16 -i /tmp/s.mkv -f md5 -)"
done
