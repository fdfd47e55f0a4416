#!/usr/bin/env bash
# equivalence.sh VSR OUTDIR: run every family on the CPU with the bundled
# clip and write one framemd5 file per case into OUTDIR. Run it with two
# builds (before and after a change that must not change outputs) and
# compare the folders with `diff -r`. DEVICE (default cpu) picks the
# device, e.g. DEVICE=cuda on the GPU host; FFMPEG the ffmpeg executable.
set -euo pipefail
vsr=$(realpath "$1"); out=$(realpath -m "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
clip=$root/testdata/video/oa4_launch.webm
ff=${FFMPEG:-ffmpeg}
mkdir -p "$out"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$vsr" checkpoint synth --family swiftvr --preset tiny -o "$work/sw" >/dev/null
"$vsr" checkpoint synth --family cdavsr --scale 2 --seed 3 -o "$work/cda.safetensors" >/dev/null
"$ff" -v error -i "$clip" -frames:v 6 -vf scale=160:90 -pix_fmt yuv420p10le -c:v ffv1 "$work/deep.mkv"
"$ff" -v error -i "$clip" -frames:v 6 -vf scale=160:90 -c:v ffv1 "$work/small.mkv"
run() { # name, then vsr restore arguments
	local name=$1; shift
	"$vsr" restore "$@" -o "$work/$name.mkv" --codec ffv1 --device "${DEVICE:-cpu}" -y >/dev/null 2>"$work/$name.err" ||
		{ cat "$work/$name.err"; exit 1; }
	"$ff" -v error -i "$work/$name.mkv" -map 0:v -f framemd5 - | grep -v '^#' >"$out/$name.md5"
}
run compact-x4 "$clip" --frames 4
run compact-x2 "$clip" --frames 4 -s 2
run compact-deep "$work/deep.mkv"
run swiftvr "$work/small.mkv" --model "$work/sw"
run cdavsr "$work/small.mkv" --model "$work/cda.safetensors"
if [ -f "${VSR_MODELS:-$HOME/.cache/vsr/models}/realesrgan-x4plus.param" ]; then
	run x4plus "$work/small.mkv" --model realesrgan-x4plus --frames 2
fi
ls "$out"
