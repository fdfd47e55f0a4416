#!/bin/bash
# Run from a folder holding vsr, vsr-base (a build of an earlier commit) and the static ffmpeg's package/ (see ../shared/GPU-HOST.md).
# Same outputs and speed before (vsr-base, 99d7f0d) and after the device-registry change.
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH
clip=../testdata/video/oa4_launch.webm
t=$(mktemp -d)
md5() { ffmpeg -v error -i "$1" -map 0:v -f md5 - ; }
for b in vsr-base vsr; do
  ./$b restore $clip -o $t/c-$b.mkv --frames 48 --device cuda --codec ffv1 --pix-fmt gbrp --progress none || echo "$b compact failed"
  echo "$b compact: $(md5 $t/c-$b.mkv)"
done
./vsr checkpoint synth --family swiftvr --preset tiny -o $t/ck >/dev/null
for b in vsr-base vsr; do
  ./$b restore $clip -o $t/s-$b.mkv --frames 30 --device cuda --model $t/ck --sr-ratio 2 --codec ffv1 --pix-fmt gbrp --progress none --reae-frame-batch 0 --temporal-grow after || echo "$b swiftvr failed"
  echo "$b swiftvr: $(md5 $t/s-$b.mkv)"
done
for r in 1 2; do for b in vsr-base vsr; do
  echo "$b round $r: $(./$b bench $clip --frames 194 --requests 4 --no-encode --device cuda --json | grep -A3 '"mean"' | tr -d ' \n')"
done; done
for b in vsr-base vsr; do
  echo "$b no-fused: $(./$b bench $clip --frames 96 --requests 2 --no-encode --device cuda --no-fused-conv --json | grep -A3 '"mean"' | tr -d ' \n')"
done
./vsr restore $clip -o $t/x.mp4 --device 'cuda:0?dtype=bf16&bogus=1' --frames 8 2>&1 | tail -1
./vsr doctor | head -3
