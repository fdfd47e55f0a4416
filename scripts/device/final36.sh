#!/bin/bash
# The last GPU check of issue 36 (nothing lost but the blur). Run from the repository root with
# .devbin holding vsr.xz and backend_cuda.test.xz (CGO_ENABLED=0 builds of this commit) and
# ffmpeg-installer-linux-x64-4.1.0.tgz (npm pack @ffmpeg-installer/linux-x64@4.1.0: the H200 host
# has no ffmpeg of its own, and no ffprobe).
# 1. The GPU tests of the frame kernels (8 and 16-bit in, every output format) and the ops.
# 2. The same restores on the CPU and on the GPU (f32: the GPU without TF32 equals the CPU up to
#    float rounding), lossless ffv1 out, compared with ffmpeg's psnr filter, for inputs that take
#    every new path: BT.709, full range, 10-bit 4:2:0 HDR10 (PQ, mastering display, light level),
#    10-bit 4:2:2, 12-bit 4:4:4, interlaced MPEG-2, an RGBA image; and the output's tags.
# 3. vsr bench, compact model 640x360 -> 2560x1440, 8-bit and 10-bit copies of the clip, --no-encode.
set -u
root=$PWD
t=$(mktemp -d)
for f in vsr backend_cuda.test; do xz -dc .devbin/$f.xz >$t/$f && chmod +x $t/$f; done
tar xzf .devbin/ffmpeg-installer-linux-x64-4.1.0.tgz -C $t
export VSR_FFMPEG=$t/package/ffmpeg VSR_FFPROBE=none
F=$VSR_FFMPEG
echo "== machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(nproc) CPUs, $(date -u +%F' '%H:%M' UTC')"

echo "== GPU tests"
(cd backend/cuda && $t/backend_cuda.test -test.v -test.timeout 6m \
	-test.run 'TestDeepFrameKernels|TestYUVInputKernel|TestDeepFusedFrames|TestYUVKernel|TestModelAgainstCPU|TestOpsAgainstCPU' 2>&1 |
	grep -E '^(--- |PASS|FAIL|ok|panic)|differ|   [a-z_]+_test.go' | grep -v '^    --- PASS')

echo "== CPU against GPU (f32), ffv1 out"
clip=$root/testdata/video/oa4_launch.webm
src="-i $clip -t 0.5 -vf scale=160:90"
$F -v error $src -c:v libx264 -crf 12 -pix_fmt yuv420p -color_primaries bt709 -color_trc bt709 -colorspace bt709 $t/bt709.mp4
$F -v error $src,format=yuvj420p -c:v libx264 -crf 12 -color_range pc $t/full.mp4
$F -v error $src -c:v libx265 -x265-params log-level=error:master-display='G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,1)':max-cll=1000,400 \
	-pix_fmt yuv420p10le -color_primaries bt2020 -color_trc smpte2084 -colorspace bt2020nc $t/hdr10.mkv
$F -v error $src -c:v libx264 -crf 12 -pix_fmt yuv422p10le $t/p422.mkv
$F -v error $src -c:v ffv1 -pix_fmt yuv444p12le $t/p444_12.mkv
$F -v error $src -flags +ildct+ilme -top 1 -c:v mpeg2video -q:v 2 $t/inter.mpg
$F -v error -i $clip -frames:v 1 -vf "scale=160:90,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='X*255/160'" $t/alpha.png
for in in bt709.mp4 full.mp4 hdr10.mkv p422.mkv p444_12.mkv inter.mpg alpha.png; do
	ext=mkv
	[ $in = alpha.png ] && ext=png
	for d in cpu cuda; do
		opts="--codec ffv1"
		[ $ext = png ] && opts=""
		[ $d = cuda ] && opts="$opts --dtype f32"
		$t/vsr restore $t/$in -o $t/$d.$in.$ext --device $d --frames 6 --progress none -y $opts 2>$t/$d.err || { echo "$in on $d failed: $(tail -1 $t/$d.err)"; }
	done
	echo "-- $in: $(grep -h carries $t/cuda.err | head -1)"
	echo "   out: $($F -i $t/cuda.$in.$ext 2>&1 | grep -m1 'Video:' | sed 's/^ *//')"
	echo "   CPU vs GPU: $($F -i $t/cpu.$in.$ext -i $t/cuda.$in.$ext -lavfi psnr -f null - 2>&1 | grep -o 'average:[^ ]*')"
done

echo "== bench (--no-encode, 361 frames, mean of requests 2-3)"
$F -v error -i $clip -c:v libx264 -crf 16 -preset fast -pix_fmt yuv420p $t/c8.mkv
$F -v error -i $clip -c:v libx264 -crf 16 -preset fast -pix_fmt yuv420p10le $t/c10.mkv
for c in c8 c10; do
	echo "$c: $($t/vsr bench $t/$c.mkv --frames 361 --requests 3 --device cuda --json --no-encode 2>$t/err | python3 -c 'import json,sys; m=json.load(sys.stdin)["mean"]; print("%.1f frames/s, compute %.2f ms/frame, busy %.3f" % (m["fps"], m["compute_ms_frame"], m["gpu_busy_fraction"]))' || tail -2 $t/err)"
done
rm -rf $t
