#!/bin/bash
# Run from the repository root with .devbin holding vsr.xz and vsr-base.xz (CGO_ENABLED=0 builds of
# this commit and of the one to compare with: 2d7eb99, the 16-bit path decoding 10-bit input as
# yuv444p16le, before the native 4:2:0 input), backend_cuda.test.xz
# (CGO_ENABLED=0 go test -c ./backend/cuda) and ffmpeg-installer-linux-x64-4.1.0.tgz
# (npm pack @ffmpeg-installer/linux-x64@4.1.0: the H200 host has no ffmpeg).
# 1. The GPU tests of the frame kernels (8-bit and 16-bit in, every output format, fused and not).
# 2. ffmpeg's decode of the 10-bit copy to each raw format (one thread for the conversion, as vsr's
#    decoder), then vsr bench, compact model 640x360 -> 2560x1440: 8-bit and 10-bit copies of the clip
#    (libx264 CRF 16, so that both decode alike and fast), side by side, --no-encode and with libx264,
#    before and after.
# 3. 10-bit restores with SwiftVR and CDA-VSR (synthetic weights) on the GPU.
set -u
root=$PWD
t=$(mktemp -d)
for f in vsr vsr-base backend_cuda.test; do xz -dc .devbin/$f.xz >$t/$f && chmod +x $t/$f; done
tar xzf .devbin/ffmpeg-installer-linux-x64-4.1.0.tgz -C $t
export VSR_FFMPEG=$t/package/ffmpeg VSR_FFPROBE=none
echo "== machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) CPUs, $(date -u +%F' '%H:%M' UTC')"

echo "== GPU tests"
(cd backend/cuda && $t/backend_cuda.test -test.v -test.timeout 6m \
	-test.run 'TestDeepFrameKernels|TestYUVInputKernel|TestDeepFusedFrames|TestYUVKernel|TestModelAgainstCPU' 2>&1 |
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|differ|error|   [a-z_]+_test.go')

echo "== bench"
clip=$root/testdata/video/oa4_launch.webm
$VSR_FFMPEG -v error -i $clip -c:v libx264 -crf 16 -preset fast -pix_fmt yuv420p $t/c8.mkv
$VSR_FFMPEG -v error -i $clip -c:v libx264 -crf 16 -preset fast -pix_fmt yuv420p10le $t/c10.mkv
echo "-- ffmpeg decode of the 10-bit copy (194 frames), per output format"
for pf in yuv420p10le yuv444p16le rgb24; do
	echo "$pf: $($VSR_FFMPEG -benchmark -i $t/c10.mkv -f rawvideo -pix_fmt $pf -y /dev/null 2>&1 | grep -o 'utime=.*')"
done
bench() { # binary clip label args...
	local b=$1 c=$2 l=$3
	shift 3
	echo "$l: $($t/$b bench $t/$c --frames 361 --requests 4 --device cuda --json "$@" 2>$t/err | python3 -c 'import json,sys; m=json.load(sys.stdin)["mean"]; print("%.1f frames/s, %.3f s, compute %.2f ms/frame, busy %.3f" % (m["fps"], m["seconds"], m["compute_ms_frame"], m["gpu_busy_fraction"]))' || tail -2 $t/err)"
}
for r in 1 2 3; do
	echo "-- round $r, --no-encode"
	bench vsr-base c8.mkv "before, 8-bit in, yuv420p out" --no-encode
	bench vsr c8.mkv "after, 8-bit in, yuv420p out" --no-encode
	bench vsr-base c10.mkv "before, 10-bit in (yuv444p16le), yuv420p10le out" --no-encode
	bench vsr c10.mkv "after, 10-bit in (yuv420p10le), yuv420p10le out" --no-encode
done
echo "-- libx264 ultrafast crf 20"
bench vsr-base c8.mkv "before, 8-bit in, yuv420p" --codec libx264 --preset ultrafast --crf 20
bench vsr c8.mkv "after, 8-bit in, yuv420p" --codec libx264 --preset ultrafast --crf 20
bench vsr-base c10.mkv "before, 10-bit in, yuv420p10le" --codec libx264 --preset ultrafast --crf 20
bench vsr c10.mkv "after, 10-bit in, yuv420p10le" --codec libx264 --preset ultrafast --crf 20
echo "== 10-bit restores through the other families' GPU paths (Slot.Input of yuv420p10le, wide for CDA-VSR)"
$t/vsr checkpoint synth --family swiftvr --preset tiny -o $t/sw >/dev/null
$t/vsr checkpoint synth --family cdavsr --scale 4 -o $t/cd.safetensors >/dev/null
for m in sw cd.safetensors; do
	$t/vsr restore $t/c10.mkv -o $t/o_$m.mkv --model $t/$m --device cuda --frames 48 --progress none 2>&1 | tail -2
	echo "$m: $($VSR_FFMPEG -i $t/o_$m.mkv 2>&1 | grep 'Video:' | sed 's/^ *//')"
done
echo "== host<->device bytes per frame (640x360 in, 2560x1440 out)"
python3 -c '
w,h,W,H=640,360,2560,1440
for name,i,o in [("8-bit: rgb24 in, yuv420p out",3*w*h,W*H*3//2),("10-bit before: yuv444p16le in, yuv420p10le out",6*w*h,W*H*3),("10-bit after: yuv420p10le in, yuv420p10le out",3*w*h,W*H*3)]:
    print("%s: %d + %d = %d bytes (%.2f MiB)" % (name,i,o,i+o,(i+o)/2**20))'
rm -rf $t
