#!/bin/bash
# Run from a folder holding vsr and the static ffmpeg's package/: the last GPU check of the session (segments, images, folders, the service).
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH
clip=../testdata/video/oa4_launch.webm
t=$(mktemp -d)
./vsr restore $clip -o $t/c.mp4 --device cuda --progress none --frames 96 && ffmpeg -v error -i $t/c.mp4 -f null - && echo "compact 4 segments ok: $(ls $t)"
./vsr checkpoint synth --family swiftvr --preset tiny -o $t/ck >/dev/null
./vsr restore $clip -o $t/s.mkv --device cuda --model $t/ck --progress none --frames 50 --segments 8 && echo "swiftvr 8 segments ok"
ffmpeg -v error -y -i $clip -frames:v 1 $t/p.png
./vsr restore $t/p.png -o $t/p4.png --device cuda --progress none && echo "image: $(ffmpeg -hide_banner -i $t/p4.png 2>&1 | grep Stream)"
mkdir $t/in; cp $t/p.png $t/in/a.png; ffmpeg -v error -i $clip -frames:v 20 $t/in/v.mp4
./vsr restore $t/in -o $t/out -f jpg --device cuda --progress none && echo "folder: $(ls $t/out)"
ls -a $t | grep vsr- && echo "temporaries left" || echo "no temporaries"
./vsr bench $clip --frames 194 --requests 3 --no-encode --device cuda --json | python3 -c 'import json,sys; m=json.load(sys.stdin)["mean"]; print("bench compact: %.1f frames/s" % m["fps"])'
./gpuserve.sh 2>&1 | grep -E '"status"|error"' | head -6
