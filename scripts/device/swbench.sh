#!/bin/bash
# Run from a folder holding vsr, vsr-base (a build of an earlier commit) and the static ffmpeg's package/ (see ../shared/GPU-HOST.md).
# SwiftVR full-size synthetic checkpoint: vsr bench before (99d7f0d) and after, side by side.
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH
clip=../testdata/video/oa4_launch.webm
t=$(mktemp -d)
s=$(date +%s); ./vsr checkpoint synth --family swiftvr --preset full -o $t/ck | tail -1; echo "synth $(( $(date +%s)-s )) s"
for r in 1 2; do for b in vsr-base vsr; do
  echo "$b round $r: $(./$b bench $clip --frames 97 --requests 3 --no-encode --device cuda --model $t/ck --size 2560x1440 --json | python3 -c 'import json,sys; m=json.load(sys.stdin)["mean"]; print("seconds %.3f compute_ms_frame %.2f busy %.3f peak_alloc %.2f GiB" % (m["seconds"], m["compute_ms_frame"], m["gpu_busy_fraction"], m["peak_alloc_bytes"]/2**30))')"
done; done
rm -rf $t
