#!/bin/bash
# realesrgan-x4plus on the H200: golden outputs from PyTorch, the GPU tests,
# and the benchmarks beside the bundled compact model. Run from a folder
# holding vsr, backend_cuda.test, the static ffmpeg's package/, models/
# (realesrgan-x4plus and x4fast) and, optionally, upscayl-bin.
set -u
cd "$(dirname "$0")"
export PATH=$PWD/package:$PATH VSR_MODELS=$PWD/models
clip=../testdata/video/oa4_launch.webm
py=python3
$py -c 'import torch' 2>/dev/null || py=/opt/torch/.venv/bin/python3
if [ -n "${GOLDEN:-}" ]; then echo "== golden"; $py -c 'import torch; print(torch.__version__)'
  $py ../scripts/golden_x4plus.py models ../testdata/compact && cp ../testdata/compact/*.x4plus.f32 "$OUT/"; fi
echo "== GPU tests"
(cd ../backend/cuda && ../../.devbin/backend_cuda.test -test.run 'DenseAgainstCPU|ModelAgainstCPU' -test.v 2>&1 ) | grep -E '^(---|ok|FAIL|PASS)|dense_test|cuda_test|panic' | head -60
echo "== kernel benchmark"
./backend_cuda.test -test.run XXX -test.bench X4plus -test.benchtime 4x 2>&1 | grep -E 'Benchmark|ok|FAIL'
echo "== vsr bench"
b() { echo "-- $*"; ./vsr bench $clip --device cuda --json "$@" 2>&1 | tr -d ' \n' | grep -o '"batch":[0-9]*\|"mean":{[^}]*}' | tr '\n' ' '; echo; }
b --frames 361 --requests 5 --no-encode
b --frames 361 --requests 3 --no-encode --model realesrgan-x4plus
b --frames 361 --requests 3 --no-encode --model realesrgan-x4plus --dtype bf16
b --frames 361 --requests 3 --model realesrgan-x4plus --codec libx265 --preset ultrafast --crf 20

./vsr bench $clip --device cuda --frames 96 --requests 2 --no-encode --model realesrgan-x4plus 2>&1 | tail -12
echo "== issue 18 on the GPU host's ffmpeg $(ffmpeg -version | head -1 | cut -d' ' -f3)"
t=$(mktemp -d)
ffmpeg -v error -f lavfi -i testsrc2=size=64x48:rate=10:duration=2 -vf "setpts=N/10/TB+if(gte(N\,10)\,0.5/TB\,0)" -vsync vfr -c:v libx264 -video_track_timescale 1000 $t/vfr.mp4
./vsr probe $t/vfr.mp4 | grep fps
times() { ffmpeg -v error -i "$1" -map 0:v:0 -c copy -f framecrc - | grep -v '^#' | awk -F, '{print $3}' | sort -n | tr -s ' \n' ' '; echo; }
echo "in:  $(times $t/vfr.mp4)"
./vsr restore $t/vfr.mp4 -o $t/o.mp4 --device cuda --progress none && echo "out: $(times $t/o.mp4)"
./vsr restore $clip -o $t/s.mp4 --device cuda --frames 30 --size 1000x560 --progress none && ./vsr probe $t/s.mp4 | grep -E 'video|frames'
./vsr restore $clip -o $t/s.png --device cuda --frames 1 --size 1000x560 --model realesrgan-x4plus --progress none && ./vsr probe $t/s.png | grep video
if [ -x upscayl-bin ]; then
  echo "== realesrgan-ncnn-vulkan (Upscayl build)"
  mkdir -p png out; ffmpeg -v error -i $clip -frames:v 24 png/f%03d.png
  ldd ./upscayl-bin | grep -E 'not found|vulkan'
  /usr/bin/time -f '%e s wall' ./upscayl-bin -i png -o out -m models -n realesrgan-x4plus -s 4 -f png 2>&1 | tail -3
  ls out | wc -l
fi
