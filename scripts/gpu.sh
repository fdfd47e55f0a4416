#!/usr/bin/env bash
# gpu.sh: build, carry and run vsr's GPU suites and benchmarks (docs/GPU.md).
#
# The GPU host has no Go and may have no ffmpeg: binaries are built here
# (CGO_ENABLED=0), packed into the git-ignored .devbin folder, carried there
# with the working tree, and unpacked into the git-ignored .devrun folder.
#
#   scripts/gpu.sh pack             (build machine) build and pack into .devbin
#   scripts/gpu.sh test             (GPU host) run the GPU test binaries
#   scripts/gpu.sh check            (GPU host) outputs: CPU against GPU, this build against BASE's
#   scripts/gpu.sh resume           (GPU host) restores killed after a checkpoint and resumed, against
#                                   uninterrupted runs: SwiftVR tiny (one device, a device list in
#                                   chunks and in sequence), CDA-VSR
#   scripts/gpu.sh bench [SUITE...] (GPU host) benchmarks: compact depth x4plus cdavsr swiftvr fp8
#                                   ranks kernels serve resume pth encode profile pthprofile cda (default: compact depth x4plus cdavsr kernels)
#   scripts/gpu.sh live [FAMILY]    (GPU host) live streams at several rates: compact, swiftvr, cdavsr
#   scripts/gpu.sh all              (GPU host) test, check, resume, bench
#   scripts/gpu.sh golden-pth [DIR] (GPU host) the .pth golden fixtures of scripts/golden_pth.py
#                                   into DIR (default $OUT/pth), for testdata/pth
#
# Run every subcommand from the repository root. Variables:
#   PKGS     packages whose test binaries pack builds and test runs
#            (default: every package with GPU tests)
#   RUN      -test.run pattern for test (default: every test)
#   BASE     pack: a commit to build as well (vsr-base; its test binaries too with
#            BASE_TESTS=1); check and bench then measure it beside this build, in
#            the same call
#   FFMPEG   pack: a static ffmpeg to carry (a binary, or the .tgz of
#            `npm pack @ffmpeg-installer/linux-x64@4.1.0`), carried as ffmpeg.xz;
#            default: the one already in .devbin, else that npm pack when npm is
#            installed, else none (the GPU host's own ffmpeg is used)
#   MODELS   pack: fetched model names to carry from $VSR_MODELS (realesrgan-x4plus ...)
#   LIMIT    pack: the most .devbin may hold, in bytes (default: 64 MiB, what a carry
#            holds with the working tree, less the tracked files' size)
#   OUT      where logs and profiles go (default .devrun/out)
#   FULL=1   bench swiftvr, fp8, ranks: the full-size synthetic checkpoint (minutes to synthesise)
#   RATES, SECS, STEADY   live: the rates in frames/s, seconds per stream, seconds before "steady"
#   RESUME_DEVICE, RESUME_SIZE   resume: the device (default cuda; cpu runs it anywhere, with
#            cpu,cpu for the device list) and the input's size (default 640x360)
#   DEADLINE   bench pth: seconds torch.compile may take in all (default 240)
#   PTH      bench pth, pthprofile: the networks (names of scripts/bench_torch_pth.py; default
#            all five for pth, realplksr_x4 for pthprofile)
#   EVERY, ROUNDS   bench resume: the --checkpoint-every values (default "0 60 5 1"; 0 is no
#            journal) and the rounds over them (default 2); ROUNDS also for bench cda
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BIN=$root/.devbin RUNDIR=$root/.devrun
GPU_PKGS="backend/cuda model/cdavsr model/swiftvr nvidia/cuda nvidia/cudnn nvidia/cublaslt nvidia/nvrtc nvidia/nvml nvidia/dl nvidia parallel"
PKGS=${PKGS:-$GPU_PKGS}
LIMIT=${LIMIT:-$((67108864 - $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)))}
FFMPEG_NPM=@ffmpeg-installer/linux-x64@4.1.0
FFMPEG_TGZ=ffmpeg-installer-linux-x64-4.1.0.tgz
clip=$root/testdata/video/oa4_launch.webm
tname() { echo "$1" | tr / _; } # package path -> test binary name
say() { echo "== $*"; }

# ---- pack (build machine) ----
pack() {
	mkdir -p "$BIN"
	local t
	t=$(mktemp -d)
	say "building vsr and the test binaries of: $PKGS"
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$t/vsr" ./cmd/vsr || exit 1
	for p in $PKGS; do CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$t/$(tname "$p").test" "./$p" || exit 1; done
	if [ -n "${BASE:-}" ]; then
		say "building $BASE as vsr-base${BASE_TESTS:+ and base_*.test}"
		local w=$t/base-tree
		git worktree add --detach "$w" "$BASE" >/dev/null || exit 1
		(cd "$w" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$t/vsr-base" ./cmd/vsr &&
			for p in ${BASE_TESTS:+$PKGS}; do [ -d "$p" ] && CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o "$t/base_$(tname "$p").test" "./$p"; done) || echo "warning: the base build failed in part"
		git worktree remove --force "$w"
	fi
	rm -f "$BIN"/vsr*.xz "$BIN"/*.test.xz
	for f in "$t"/vsr* "$t"/*.test; do [ -f "$f" ] && xz -T0 -9 -c "$f" >"$BIN/$(basename "$f").xz"; done
	# ffmpeg: a binary, or the npm package's .tgz (package/ffmpeg in it), carried as ffmpeg.xz
	local ff=${FFMPEG:-}
	if [ -z "$ff" ] && [ ! -f "$BIN/ffmpeg.xz" ] && command -v npm >/dev/null; then
		(cd "$t" && npm pack --silent "$FFMPEG_NPM" >/dev/null) && ff=$t/$FFMPEG_TGZ || echo "warning: npm pack $FFMPEG_NPM failed"
	fi
	case "$ff" in
	"") ;;
	*.tgz) tar xzf "$ff" -C "$t" package/ffmpeg && xz -T0 -9 -c "$t/package/ffmpeg" >"$BIN/ffmpeg.xz" ;;
	*) xz -T0 -9 -c "$ff" >"$BIN/ffmpeg.xz" ;;
	esac
	mkdir -p "$BIN/models"
	rm -f "$BIN"/models/*
	for m in ${MODELS:-}; do
		for e in param bin; do xz -T0 -9 -c "${VSR_MODELS:-$HOME/.cache/vsr/models}/$m.$e" >"$BIN/models/$m.$e.xz" || exit 1; done
	done
	rm -rf "$t"
	local size
	size=$(du -cb "$BIN" | tail -1 | cut -f1)
	ls -l "$BIN" "$BIN/models" | grep -v '^total'
	echo "$BIN holds $size bytes (limit $LIMIT)"
	if [ "$size" -gt "$LIMIT" ]; then
		echo "too large: choose fewer packages (PKGS=...) or models"
		exit 1
	fi
}

# ---- unpack (GPU host): .devbin -> .devrun, tools on PATH ----
unpack() {
	[ -d "$BIN" ] || { echo "no .devbin: run scripts/gpu.sh pack on the build machine first"; exit 1; }
	mkdir -p "$RUNDIR/models"
	for f in "$BIN"/*.xz "$BIN"/models/*.xz; do
		[ -f "$f" ] || continue
		local d=$RUNDIR/${f#"$BIN"/}
		d=${d%.xz}
		[ -f "$d" ] && [ "$d" -nt "$f" ] || xz -dc "$f" >"$d"
	done
	chmod +x "$RUNDIR"/vsr* "$RUNDIR"/*.test 2>/dev/null
	[ -f "$RUNDIR/ffmpeg" ] && chmod +x "$RUNDIR/ffmpeg"
	export PATH=$RUNDIR:$PATH
	command -v ffmpeg >/dev/null || { echo "no ffmpeg: carry one (FFMPEG=... scripts/gpu.sh pack)"; exit 1; }
	export VSR_FFMPEG=$(command -v ffmpeg)
	command -v ffprobe >/dev/null || export VSR_FFPROBE=none
	ls "$RUNDIR"/models/*.param >/dev/null 2>&1 && export VSR_MODELS=$RUNDIR/models
	OUT=${OUT:-$RUNDIR/out}
	mkdir -p "$OUT"
	V=$RUNDIR/vsr
	findpy
	say "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(nproc) CPUs, $(date -u '+%F %H:%M UTC'), $(ffmpeg -version | head -1 | cut -d' ' -f1-3)"
}
# findpy [MODULES]: PY, a Python that imports MODULES (default torch): python3,
# else the host's /opt/torch/.venv; python3 when neither does
findpy() {
	local mods="${*:-torch}" p
	for p in python3 /opt/torch/.venv/bin/python3; do
		PY=$p
		$PY -c "import ${mods// /, }" 2>/dev/null && return
	done
	PY=python3
}
has_base() { [ -x "$RUNDIR/vsr-base" ]; }
builds() { if has_base; then echo "vsr-base vsr"; else echo vsr; fi; }

# gotest PKG ARGS...: a test binary run in its package's folder (tests read testdata there)
gotest() {
	local p=$1 b=${BINPREFIX:-}$(tname "$1").test
	shift
	[ -x "$RUNDIR/$b" ] || { echo "$p: no $b (not in PKGS when packed)"; return 0; }
	(cd "$root/$p" && "$RUNDIR/$b" "$@")
}

# ---- test ----
gputest() {
	say "GPU tests (-test.run '${RUN:-.}')"
	local fail=0 p log
	for p in $PKGS; do
		log=$OUT/test-$(tname "$p").log
		gotest "$p" -test.v -test.timeout "${TIMEOUT:-10m}" -test.run "${RUN:-.}" >"$log" 2>&1
		local rc=$?
		echo "$p: rc=$rc, $(grep -c '^--- PASS' "$log") passed, $(grep -c '^--- SKIP' "$log") skipped, $(grep -c '^--- FAIL' "$log") failed"
		grep -E '^(--- FAIL|panic)|^\s+--- FAIL' "$log" | head -20
		[ $rc = 0 ] || fail=1
	done
	echo "logs in $OUT"
	return $fail
}

# ---- check: outputs ----
md5v() { ffmpeg -v error -i "$1" -map 0:v -f md5 -; }
check() {
	local t
	t=$(mktemp -d)
	say "CPU against GPU (--dtype f32: the GPU without TF32 equals the CPU up to float rounding), ffv1 out, PSNR"
	local src="-i $clip -t 0.5 -vf scale=160:90"
	ffmpeg -v error $src -c:v libx264 -crf 12 -pix_fmt yuv420p -color_primaries bt709 -color_trc bt709 -colorspace bt709 $t/bt709.mp4
	ffmpeg -v error $src,format=yuvj420p -c:v libx264 -crf 12 -color_range pc $t/full.mp4
	ffmpeg -v error $src -c:v libx265 -x265-params log-level=error:master-display='G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,1)':max-cll=1000,400 \
		-pix_fmt yuv420p10le -color_primaries bt2020 -color_trc smpte2084 -colorspace bt2020nc $t/hdr10.mkv
	ffmpeg -v error $src -c:v libx264 -crf 12 -pix_fmt yuv422p10le $t/p422.mkv
	ffmpeg -v error $src -c:v ffv1 -pix_fmt yuv444p12le $t/p444_12.mkv
	ffmpeg -v error $src -flags +ildct+ilme -top 1 -c:v mpeg2video -q:v 2 $t/inter.mpg
	ffmpeg -v error -i $clip -frames:v 1 -vf "scale=160:90,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='X*255/160'" $t/alpha.png
	local in ext d opts
	for in in bt709.mp4 full.mp4 hdr10.mkv p422.mkv p444_12.mkv inter.mpg alpha.png; do
		ext=mkv
		[ $in = alpha.png ] && ext=png
		for d in cpu cuda; do
			opts="--codec ffv1"
			[ $ext = png ] && opts=""
			[ $d = cuda ] && opts="$opts --dtype f32"
			$V restore $t/$in -o $t/$d.$in.$ext --device $d --frames 6 --progress none -y $opts 2>$t/$d.err || echo "$in on $d failed: $(tail -1 $t/$d.err)"
		done
		echo "-- $in: $(grep -h carries $t/cuda.err | head -1)"
		echo "   out: $(ffmpeg -i $t/cuda.$in.$ext 2>&1 | grep -m1 'Video:' | sed 's/^ *//')"
		echo "   CPU vs GPU: $(ffmpeg -i $t/cpu.$in.$ext -i $t/cuda.$in.$ext -lavfi psnr -f null - 2>&1 | grep -o 'average:[^ ]*')"
	done
	say "every family on the GPU: MD5 of the decoded frames$(has_base && echo ", vsr-base beside vsr")"
	$V checkpoint synth --family swiftvr --preset tiny -o $t/sw >/dev/null
	$V checkpoint synth --family cdavsr --seed 1 -o $t/cda.safetensors >/dev/null
	local b
	for b in $(builds); do
		"$RUNDIR/$b" restore $clip -o $t/c-$b.mkv --frames 48 --device cuda --codec ffv1 --pix-fmt gbrp --progress none || echo "$b compact failed"
		"$RUNDIR/$b" restore $clip -o $t/s-$b.mkv --frames 30 --device cuda --model $t/sw --sr-ratio 2 --codec ffv1 --pix-fmt gbrp --progress none || echo "$b swiftvr failed"
		"$RUNDIR/$b" restore $clip -o $t/d-$b.mkv --frames 48 --device cuda --model $t/cda.safetensors --codec ffv1 --pix-fmt gbrp --progress none || echo "$b cdavsr failed"
		echo "$b: compact $(md5v $t/c-$b.mkv) swiftvr $(md5v $t/s-$b.mkv) cdavsr $(md5v $t/d-$b.mkv)"
	done | tee "$OUT/outputs.log"
	say "device lists: the compact model on cuda:0 and cuda:0,cuda:0 (equal MD5 expected)"
	for d in cuda:0 cuda:0,cuda:0; do
		$V restore $clip -o $t/r.mkv -y --device $d --codec ffv1 --pix-fmt gbrp --frames 96 --progress none 2>&1 | tail -1
		echo "$d $(md5v $t/r.mkv)"
	done
	say "images, folders, segments, temporaries"
	ffmpeg -v error -y -i $clip -frames:v 1 $t/p.png
	$V restore $t/p.png -o $t/p4.png --device cuda --progress none && echo "image: $(ffmpeg -hide_banner -i $t/p4.png 2>&1 | grep Stream)"
	mkdir $t/in && cp $t/p.png $t/in/a.png && ffmpeg -v error -i $clip -frames:v 20 $t/in/v.mp4
	$V restore $t/in -o $t/out -f jpg --device cuda --progress none && echo "folder: $(ls $t/out)"
	$V restore $clip -o $t/seg.mkv --device cuda --model $t/sw --progress none --frames 50 --segments 8 && echo "swiftvr, 8 segments: ok"
	ls -A $t | grep "^\." && echo "temporaries left (hidden files)" || echo "no temporaries"
	$V restore $clip -o $t/x.mp4 --device 'cuda:0?dtype=bf16&bogus=1' --frames 8 2>&1 | tail -1
	rm -rf $t
}

# ---- resume ----
# jdir OUT: the journal directory of the output OUT (pipeline.JournalDir)
jdir() { local b; b=$(basename "$1"); echo "$(dirname "$1")/.${b%.*}.vsr-journal"; }
# stop_at_state OUT INPUT ARGS...: vsr restore INPUT -o OUT ARGS, killed
# (SIGKILL) as soon as its journal records a state of the model; prints
# the state's frame and size in bytes ("FRAME SIZE", from the journal a
# rerun finds), or "finished" when the run ended before
stop_at_state() {
	local out=$1 in=$2 j pid
	shift 2
	j=$(jdir "$out")
	"$V" restore "$in" -o "$out" "$@" >/dev/null 2>"$out.stopped.err" &
	pid=$!
	while kill -0 $pid 2>/dev/null; do
		if grep -q '"state":{' "$j/journal.json" 2>/dev/null; then
			kill -9 $pid
			wait $pid 2>/dev/null
			$PY -c 'import json,sys
s=json.load(open(sys.argv[1]))["body"]["state"]
print(s["frame"], s["size"])' "$j/journal.json"
			return
		fi
		sleep 0.05
	done
	wait $pid
	echo finished
}
resume_check() {
	local t dev=${RESUME_DEVICE:-cuda} two fail=0
	two=cuda:0,cuda:0
	[ "$dev" = cpu ] && two=cpu,cpu
	t=$(mktemp -d)
	say "resume on $dev: restores killed (SIGKILL) after a checkpoint and run again: MD5 of the decoded frames (ffv1, gbrp) against an uninterrupted run"
	$V checkpoint synth --family swiftvr --preset tiny -o $t/sw >/dev/null
	$V checkpoint synth --family cdavsr --seed 1 -o $t/cda.safetensors >/dev/null
	ffmpeg -v error -i $clip -frames:v 96 -vf scale=${RESUME_SIZE:-640x360} -c:v ffv1 -c:a copy $t/in.mkv
	local common="--codec ffv1 --pix-fmt gbrp --progress none --checkpoint-every 0.5"
	local sw="--model $t/sw --sr-ratio 2 --clip-len 8 --dit-overlap 1"
	local c name args st from a b cases=(
		"swiftvr tiny on $dev|--device $dev $sw"
		"swiftvr tiny on $two, chunks|--device $two $sw"
		"swiftvr tiny on $two, sequence|--device $two --parallel sequence $sw"
		"cdavsr on $dev|--device $dev --model $t/cda.safetensors --reset-every 12"
	)
	for c in "${cases[@]}"; do
		name=${c%%|*} args=${c#*|}
		rm -rf $t/ref.mkv $t/out.mkv "$(jdir $t/out.mkv)"
		# shellcheck disable=SC2086 # args are words
		if ! $V restore $t/in.mkv -o $t/ref.mkv $args $common 2>$t/ref.err; then
			echo "$name: FAIL: the uninterrupted run failed: $(tail -1 $t/ref.err)"
			fail=1
			continue
		fi
		st=$(stop_at_state $t/out.mkv $t/in.mkv $args $common)
		if [ "$st" = finished ]; then
			echo "$name: FAIL: the run ended before its journal recorded a state"
			fail=1
			continue
		fi
		$V restore $t/in.mkv -o $t/out.mkv $args $common 2>$t/rerun.err || echo "$name: the rerun failed: $(tail -1 $t/rerun.err)"
		from=$(grep -o 'resuming at frame [0-9]* of [0-9]*' $t/rerun.err)
		a=$(md5v $t/ref.mkv) b=$(md5v $t/out.mkv 2>/dev/null)
		case "$from" in
		"resuming at frame ${st% *} of "*) [ "$a" = "$b" ] ;;
		*) false ;;
		esac
		if [ $? = 0 ]; then
			echo "$name: ok: killed with a state at frame ${st% *} (${st#* } bytes), $from, $b"
		else
			echo "$name: FAIL: killed with a state at frame ${st% *}, rerun said \"$from\", MD5 $b, uninterrupted $a"
			fail=1
		fi
	done
	rm -rf $t
	return $fail
}

# rbench LABEL INPUT ARGS...: one vsr restore INPUT ARGS on cuda (RESUME_DEVICE), encoded,
# from no journal: its seconds, frames/s and checkpoint_seconds (saving states, writing them)
rbench() {
	local l=$1 in=$2 o=$OUT/resume-bench.mkv
	shift 2
	rm -rf "$(jdir $o)"
	"$V" restore "$in" -o $o -y --device ${RESUME_DEVICE:-cuda} --progress none --json "$@" 2>"$OUT/bench.err" | $PY -c 'import json,sys
try: r=json.load(sys.stdin)
except Exception: print(sys.argv[1]+": failed"); sys.exit()
c=r["stages"].get("checkpoint_seconds",0)
print("%s: %.2f s, %.1f frames/s, checkpoints %.3f s (%.2f%%)" % (sys.argv[1], r["seconds"], r["fps"], c, 100*c/r["seconds"]))' "$l" || tail -2 "$OUT/bench.err"
}

# ---- bench ----
mean() { # label, then a vsr bench command's --json on stdin
	$PY -c 'import json,sys
try: m=json.load(sys.stdin)["mean"]
except Exception as e: print(sys.argv[1]+": failed"); sys.exit()
print("%s: %.3f s, %.1f frames/s, compute %.2f ms/frame, busy %.3f, peak alloc %.2f GiB" % (sys.argv[1], m["seconds"], m["fps"], m["compute_ms_frame"], m["gpu_busy_fraction"], m.get("peak_alloc_bytes",0)/2**30))' "$1"
}
vbench() { # build label input args...: mean of the requests after the first
	local b=$1 l=$2 in=$3
	shift 3
	"$RUNDIR/$b" bench "$in" --device cuda --json "$@" 2>"$OUT/bench.err" | mean "$b $l" || tail -2 "$OUT/bench.err"
}
swck() { # the synthetic SwiftVR checkpoint of the benchmarks
	local preset=tiny
	[ -n "${FULL:-}" ] && preset=full
	SWCK=$RUNDIR/swck-$preset
	[ -d "$SWCK" ] || $V checkpoint synth --family swiftvr --preset $preset --seed 1 -o "$SWCK" | tail -1
}
ref361() { [ -f $RUNDIR/ref361.mkv ] || ffmpeg -v error -stream_loop 1 -i $clip -frames:v 361 -c:v ffv1 $RUNDIR/ref361.mkv; }
bench() {
	local s b r
	ref361
	for s in ${*:-compact depth x4plus cdavsr kernels}; do
		case $s in
		compact)
			say "compact x4, 361 frames 640x360 -> 2560x1440 (rounds alternate the builds)"
			for r in 1 2 3; do for b in $(builds); do vbench $b "round $r --no-encode" $RUNDIR/ref361.mkv --requests 4 --no-encode; done; done
			for b in $(builds); do vbench $b "libx264 ultrafast crf 20" $RUNDIR/ref361.mkv --requests 3 --codec libx264 --preset ultrafast --crf 20; done
			for b in $(builds); do vbench $b "--no-fused-conv --no-encode" $clip --frames 96 --requests 2 --no-fused-conv --no-encode; done
			;;
		depth)
			say "8-bit and 10-bit input (libx264 CRF 16 copies of the clip), --no-encode"
			[ -f $RUNDIR/c8.mkv ] || ffmpeg -v error -i $clip -c:v libx264 -crf 16 -preset fast -pix_fmt yuv420p $RUNDIR/c8.mkv
			[ -f $RUNDIR/c10.mkv ] || ffmpeg -v error -i $clip -c:v libx264 -crf 16 -preset fast -pix_fmt yuv420p10le $RUNDIR/c10.mkv
			for r in 1 2 3; do for b in $(builds); do for c in c8 c10; do
				vbench $b "round $r $c" $RUNDIR/$c.mkv --frames 361 --requests 4 --no-encode
			done; done; done
			;;
		x4plus)
			say "realesrgan-x4plus (needs MODELS=realesrgan-x4plus at pack)"
			[ -n "${VSR_MODELS:-}" ] || { echo "skipped: no models carried"; continue; }
			for b in $(builds); do
				vbench $b "x4plus --no-encode" $RUNDIR/ref361.mkv --requests 3 --no-encode --model realesrgan-x4plus
				vbench $b "x4plus bf16 --no-encode" $RUNDIR/ref361.mkv --requests 3 --no-encode --model realesrgan-x4plus --dtype bf16
				vbench $b "x4plus libx265 ultrafast" $RUNDIR/ref361.mkv --requests 3 --model realesrgan-x4plus --codec libx265 --preset ultrafast --crf 20
			done
			(BINPREFIX= gotest backend/cuda -test.run '^$' -test.bench 'X4plus' -test.benchtime 4x 2>&1 | grep -E 'Benchmark|FAIL|panic')
			;;
		cdavsr)
			say "CDA-VSR x4 (synthetic weights): step latency, then whole files"
			[ -f $RUNDIR/cda.safetensors ] || $V checkpoint synth --family cdavsr --seed 1 -o $RUNDIR/cda.safetensors >/dev/null
			for b in "" $(has_base && echo base_); do
				echo "-- ${b:-this build}"
				BINPREFIX=$b gotest model/cdavsr -test.run '^$' -test.bench StepGPU -test.benchtime 1x 2>&1 | grep -E 'Benchmark|FAIL|panic'
			done
			[ -f $RUNDIR/small.mp4 ] || ffmpeg -v error -i $clip -vf scale=320:180 -c:v libx264 -crf 18 $RUNDIR/small.mp4
			if $PY -c 'import torch' 2>/dev/null; then
				echo "-- PyTorch eager, same call"
				$PY scripts/bench_torch_cdavsr.py $RUNDIR/cda.safetensors 320x180 640x360 2>&1 | tail -4
			fi
			for b in $(builds); do for dt in f16 f32; do
				vbench $b "cdavsr $dt 640x360" $clip --model $RUNDIR/cda.safetensors --dtype $dt --frames 361 --requests 3 --no-encode
				vbench $b "cdavsr $dt 320x180" $RUNDIR/small.mp4 --model $RUNDIR/cda.safetensors --dtype $dt --frames 361 --requests 3 --no-encode
			done; done
			;;
		swiftvr)
			swck
			say "SwiftVR, $SWCK, 361 frames -> 2560x1440"
			for b in $(builds); do
				vbench $b "bf16 --no-encode" $RUNDIR/ref361.mkv --model $SWCK --size 2560x1440 --requests 3 --no-encode
				vbench $b "libx265 ultrafast, --encode-proxy bicubic" $RUNDIR/ref361.mkv --model $SWCK --size 2560x1440 --requests 3 --codec libx265 --preset ultrafast --crf 20 --encode-proxy bicubic
			done
			if $PY -c 'import torch' 2>/dev/null; then
				echo "-- PyTorch eager bf16, same call"
				$PY scripts/bench_torch_swiftvr.py $SWCK --frames 361 --in-size 640x360 --out-size 2560x1440 --dtype bf16 2>&1 | tail -3
			fi
			;;
		fp8)
			swck
			say "SwiftVR fp8 against bf16: GEMMs, the DiT, the reference video"
			gotest nvidia/cublaslt -test.run '^$' -test.bench GemmDiT -test.benchtime 1x 2>&1 | grep -E 'Benchmark|FAIL|panic'
			(cd model/swiftvr && VSR_SWIFTVR_CKPT=$SWCK VSR_DIT_FP8=1 "$RUNDIR/model_swiftvr.test" -test.run '^$' -test.bench DiTChunk -test.benchtime 5x 2>&1 | grep -E 'Benchmark|loaded|FAIL|panic')
			for d in bf16 fp8; do vbench vsr "$d --no-encode" $RUNDIR/ref361.mkv --model $SWCK --size 2560x1440 --dtype $d --requests 5 --no-encode; done
			;;
		ranks)
			swck
			say "several ranks of GPU 0: SwiftVR chunks and sequence layouts"
			for a in "cuda:0 chunks" "cuda:0,cuda:0 chunks" "cuda:0,cuda:0 sequence" "cuda:0,cuda:0,cuda:0,cuda:0 chunks=2,sequence=2"; do
				set -- $a
				vbench vsr "$1 --parallel $2" $RUNDIR/ref361.mkv --model $SWCK --size 2560x1440 --device $1 --parallel $2 --requests 2 --no-encode
			done
			;;
		kernels)
			say "kernel benchmarks (go test -bench in backend/cuda)"
			for b in "" $(has_base && echo base_); do
				echo "-- ${b:-this build}"
				BINPREFIX=$b gotest backend/cuda -test.run '^$' -test.bench 'ReAEOps|DiTOps|WindowAttention' -test.benchtime 1x 2>&1 | grep -E 'Benchmark|FAIL|panic'
			done
			;;
		serve)
			serve_smoke
			;;
		pth)
			local d=$RUNDIR/pth-bench n
			say ".pth architectures at their published sizes (random weights), 640x360 -> x4 in fp16: PyTorch eager, vsr, torch.compile"
			$PY scripts/bench_torch_pth.py save $d ${PTH:-}
			for n in ${PTH:-esrgan_x4plus compact_x4 span_x4 cugan_x4 realplksr_x4}; do
				for b in $(builds); do vbench $b "$n --no-encode (24 frames)" $RUNDIR/ref361.mkv --model $d/$n.pth --frames 24 --requests 3 --no-encode; done
			done
			DEADLINE=${DEADLINE:-240} $PY scripts/bench_torch_pth.py compile $d ${PTH:-}
			;;
		resume)
			swck
			local e enc="--codec libx264 --preset ultrafast --crf 20"
			say "checkpointing's cost: encoded restores of 361 frames 640x360 -> 2560x1440 journaled every --checkpoint-every seconds of video (0: no journal) in ${ROUNDS:-2} rounds; the compact model, then SwiftVR ($SWCK)"
			for r in $(seq ${ROUNDS:-2}); do for e in ${EVERY:-0 60 5 1}; do
				rbench "round $r compact --checkpoint-every $e" $RUNDIR/ref361.mkv --checkpoint-every $e $enc
				rbench "round $r swiftvr --checkpoint-every $e" $RUNDIR/ref361.mkv --model $SWCK --size 2560x1440 --checkpoint-every $e $enc
			done; done
			say "one SwiftVR state at 2560x1440 ($SWCK): frame and bytes"
			stop_at_state $OUT/resume-state.mkv $RUNDIR/ref361.mkv --device cuda --model $SWCK --size 2560x1440 --checkpoint-every 5 $enc
			rm -rf $OUT/resume-state.mkv "$(jdir $OUT/resume-state.mkv)"
			;;
		encode)
			encode_bench
			;;
		profile)
			profile_bench
			;;
		pthprofile)
			pth_profile
			;;
		cda)
			say "CDA-VSR x4 fp16 whole files, 361 frames, --no-encode, and the compact model (builds alternate)"
			[ -f $RUNDIR/cda.safetensors ] || $V checkpoint synth --family cdavsr --seed 1 -o $RUNDIR/cda.safetensors >/dev/null
			[ -f $RUNDIR/small.mp4 ] || ffmpeg -v error -i $clip -vf scale=320:180 -c:v libx264 -crf 18 $RUNDIR/small.mp4
			(BINPREFIX= gotest backend/cuda -test.run '^$' -test.bench 'MatchBlocks' -test.benchtime 20x 2>&1 | grep -E 'Benchmark|FAIL|panic')
			for r in $(seq ${ROUNDS:-2}); do
				for b in $(builds); do
					vbench $b "round $r cdavsr 640x360" $clip --model $RUNDIR/cda.safetensors --frames 361 --requests 3 --no-encode
					vbench $b "round $r cdavsr 320x180" $RUNDIR/small.mp4 --model $RUNDIR/cda.safetensors --frames 361 --requests 3 --no-encode
					vbench $b "round $r compact" $RUNDIR/ref361.mkv --requests 3 --no-encode
				done
			done
			;;
		*) echo "unknown bench suite $s" ;;
		esac
	done
}

# ---- encode: vsr's full video time against the encoders alone ----
# ebench LABEL ARGS...: vsr bench on ref361 (build vsr, else BUILD): mean seconds, stages, the last request's streams
ebench() {
	local l=$1
	shift
	"$RUNDIR/${BUILD:-vsr}" bench $RUNDIR/ref361.mkv --device cuda --json "$@" 2>"$OUT/bench.err" | $PY -c 'import json,sys
try: r=json.load(sys.stdin)
except Exception: print(sys.argv[1]+": failed"); sys.exit()
m=r["mean"]; s=m["stages"]
print("%s: %.3f s (start %.3f, stream %.3f, finish %.3f, join %.3f; ffmpeg CPU %.1f s)" % (sys.argv[1], m["seconds"], s["start_seconds"], s["stream_seconds"], s["finish_seconds"], s["join_seconds"], m["ffmpeg_cpu_seconds"]))
st=r["runs"][-1]["stages"].get("streams") or []
print("   streams (first in, last in, done): " + ", ".join("%.2f/%.2f/%.2f" % (t["first_seconds"], t["last_seconds"], t["end_seconds"]) for t in st))' "$l" || tail -2 "$OUT/bench.err"
}
# floor N CODEC: N parallel encoders with vsr's options on N contiguous parts of /dev/shm/vsr-raw.yuv (wall seconds)
floor() {
	local n=$1 c=$2 i a b t0
	for ((i = 0; i < n; i++)); do
		a=$((361 * i / n)) b=$((361 * (i + 1) / n))
		dd if=/dev/shm/vsr-raw.yuv of=/dev/shm/vsr-p$i.yuv bs=5529600 skip=$a count=$((b - a)) status=none
	done
	t0=$(date +%s.%N)
	for ((i = 0; i < n; i++)); do
		ffmpeg -hide_banner -nostdin -loglevel error -f rawvideo -pix_fmt yuv420p -s 2560x1440 -framerate 24 -i /dev/shm/vsr-p$i.yuv \
			-map 0:0 -c:v $c -crf 20 -preset ultrafast -pix_fmt yuv420p -max_muxing_queue_size 4096 -y /dev/shm/vsr-e$i.mp4 2>/dev/null &
	done
	wait
	echo "encoders alone, $n segments, $c: $(awk "BEGIN{printf \"%.3f\", $(date +%s.%N) - $t0}") s"
	rm -f /dev/shm/vsr-p*.yuv /dev/shm/vsr-e*.mp4
}
encode_bench() {
	say "compact x4 with encoding, 361 frames: vsr (builds $(builds)) beside the encoders alone on vsr's exact output, alternated"
	local d c n b
	d=$(mktemp -d)
	(cd $d && $V bench $RUNDIR/ref361.mkv --device cuda --requests 1 --codec libx264 --preset ultrafast --crf 0 --keep >/dev/null 2>&1)
	ffmpeg -v error -i $d/vsr-bench-out.* -f rawvideo -pix_fmt yuv420p -y /dev/shm/vsr-raw.yuv
	rm -rf $d
	for c in ${CODECS:-libx264 libx265}; do
		for n in ${SEGS:-4 8}; do
			for r in 1 2; do
				floor $n $c
				for b in $(builds); do BUILD=$b ebench "$b $c $n segments round $r" --requests 3 --segments $n --codec $c --preset ultrafast --crf 20; done
			done
		done
	done
	rm -f /dev/shm/vsr-raw.yuv
}

# ---- profile: kernel times (Nsight Compute) of CDA-VSR's whole-file path ----
profile_bench() {
	command -v ncu >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
	command -v ncu >/dev/null || { echo "no ncu"; return; }
	[ -f $RUNDIR/cda.safetensors ] || $V checkpoint synth --family cdavsr --seed 1 -o $RUNDIR/cda.safetensors >/dev/null
	[ -f $RUNDIR/small.mp4 ] || ffmpeg -v error -i $clip -vf scale=320:180 -c:v libx264 -crf 18 $RUNDIR/small.mp4
	local in
	for in in $clip $RUNDIR/small.mp4; do
		say "ncu: CDA-VSR fp16, $(basename $in), --graphs off, kernels ${PSKIP:-3000} to +${PCOUNT:-600}"
		ncu --metrics gpu__time_duration.sum --csv --print-units base --log-file $OUT/ncu-cda.csv --launch-skip ${PSKIP:-3000} --launch-count ${PCOUNT:-600} \
			$V bench $in --device cuda --model $RUNDIR/cda.safetensors --frames 96 --requests 1 --no-encode --graphs off >/dev/null 2>$OUT/ncu.err || tail -3 $OUT/ncu.err
		$PY scripts/ncu_summary.py $OUT/ncu-cda.csv
		cp $OUT/ncu-cda.csv $OUT/ncu-cda-$(basename $in).csv
	done
}

# where a .pth network's time goes (PTH, default realplksr_x4): ncu's kernel
# summary of vsr's last of 4 one-frame batches, then torch.profiler's
# tables of PyTorch eager and torch.compile on the same network
pth_profile() {
	command -v ncu >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
	local d=$RUNDIR/pth-bench n
	for n in ${PTH:-realplksr_x4}; do
		[ -f $d/$n.pth ] || $PY scripts/bench_torch_pth.py save $d $n >/dev/null
		say "ncu: $n fp16, 4 frames at 640x360, one a batch; the last quarter of the kernels"
		ncu --metrics gpu__time_duration.sum --csv --print-units base --log-file $OUT/ncu-$n.csv \
			$V bench $clip --device cuda --model $d/$n.pth --frames 4 --batch 1 --requests 1 --no-encode >/dev/null 2>$OUT/ncu.err || tail -3 $OUT/ncu.err
		$PY scripts/ncu_summary.py $OUT/ncu-$n.csv 4
		say "torch.profiler: $n"
		$PY scripts/bench_torch_pth.py profile $d $n 2>&1 | grep -v Warning
	done
}

# the service on the GPU: a restore through descriptor paths, an overwrite refusal, metrics
serve_smoke() {
	say "vsr serve on cuda:0"
	local d port=8400 pid id
	d=$(mktemp -d)
	mkdir -p $d/input $d/output/sub
	cp $clip $d/input/clip.webm
	$V serve --device cuda:0 --listen 127.0.0.1:$port --data $d 2>$d/log &
	pid=$!
	for i in $(seq 100); do curl -s localhost:$port/healthz >/dev/null && break; sleep 0.2; done
	post() { curl -s -H 'Content-Type: application/json' localhost:$port/v1/tasks/video/ -d "$1" | tr -d '\n'; echo; }
	wait_task() {
		for i in $(seq 600); do
			s=$(curl -s localhost:$port/v1/tasks/$1/status)
			echo "$s" | grep -q '"status": "\(completed\|failed\|cancelled\)"' && { echo "$s" | grep -E '"(status|error|error_type|save_result_path)"'; return; }
			sleep 0.2
		done
		echo timeout
	}
	id=$(post '{"video_path":"clip.webm","sr_ratio":4,"save_result_path":"sub/x4.mp4","segments":4}' | sed -n 's/.*"task_id": "\([^"]*\)".*/\1/p')
	wait_task "$id"
	echo "overwrite: $(post '{"video_path":"clip.webm","save_result_path":"sub/x4.mp4"}')"
	echo "gpu metrics: $(curl -s localhost:$port/metrics | grep -c vsr_gpu_memory_bytes)"
	kill $pid
	wait $pid
	rm -rf $d
}

# ---- live ----
live() {
	local fam=${1:-compact} secs=${SECS:-15}
	src() { # rate: the clip retimed to rate frames/s for secs seconds, H.264 in MPEG-TS
		local s=$RUNDIR/src$1.ts a=(-an)
		[ $1 = 24 ] && a=(-c:a aac)
		[ -f $s ] || ffmpeg -v error -stream_loop 9 -i $clip -vf "fps=24,settb=1/$1,setpts=N" -r $1 -frames:v $(($1 * secs)) "${a[@]}" \
			-c:v libx264 -preset ultrafast -tune zerolatency -g $1 -f mpegts $s
		echo $s
	}
	stream() { # rate, sink (x264 or raw), then vsr's model arguments
		local rate=$1 sink=$2 s port pid
		shift 2
		s=$(src $rate)
		port=$((20000 + RANDOM % 20000))
		local out=(-o $OUT/live_out.ts --codec libx264 --preset ultrafast)
		[ $sink = raw ] && out=(-o /dev/null --container nut --codec rawvideo)
		$V restore --live "tcp://127.0.0.1:$port?listen=1" "${out[@]}" -y --device cuda:0 --json --stats-every 2s \
			--idle-timeout 5s --overload drop "$@" >$OUT/live.json 2>$OUT/live.err &
		pid=$!
		for i in $(seq 1 240); do # the listener is up once the model is loaded
			kill -0 $pid 2>/dev/null || break
			ffmpeg -v error -re -i $s -c copy -f mpegts "tcp://127.0.0.1:$port" 2>/dev/null && break
			sleep 0.5
		done
		wait $pid
		echo "rate $rate fps, $sink, $*: $(tail -1 $OUT/live.json)"
		STEADY=${STEADY:-10} $PY -c 'import json,os
st=[json.loads(l) for l in open(os.environ["OUT"]+"/live.json")]
for s in st: print("  %5.1f s  in %5d  out %5d  dropped %4d  p50 %.3f  p99 %.3f" % (s["seconds"], s["in_frames"], s["out_frames"], s["dropped_frames"], s["latency_p50_seconds"], s["latency_p99_seconds"]))
base=[s for s in st if s["seconds"] <= float(os.environ["STEADY"])]
if base and len(st) > len(base):
    b, e = base[-1], st[-1]
    print("  steady (after %.0f s): in %d, dropped %d" % (b["seconds"], e["in_frames"]-b["in_frames"], e["dropped_frames"]-b["dropped_frames"]))'
	}
	export OUT
	case $fam in
	compact)
		stream 24 x264 -s 4
		for r in ${RATES:-24 48 96}; do stream $r raw -s 4; done
		;;
	swiftvr)
		swck
		for r in ${RATES:-24 48}; do stream $r raw --model $SWCK --size 2560x1440; done
		;;
	cdavsr)
		[ -f $RUNDIR/cda.safetensors ] || $V checkpoint synth --family cdavsr --seed 1 -o $RUNDIR/cda.safetensors >/dev/null
		for r in ${RATES:-24 48 96}; do stream $r raw --model $RUNDIR/cda.safetensors; done
		;;
	*) echo "live: compact, swiftvr or cdavsr" && exit 2 ;;
	esac
}

# ---- golden-pth: needs only Python with PyTorch and NumPy, not .devbin ----
golden_pth() {
	findpy torch numpy
	$PY -c 'import torch, numpy' 2>/dev/null || { echo "golden-pth: no Python with torch and numpy (tried python3 and /opt/torch/.venv/bin/python3)"; exit 1; }
	local d=${1:-${OUT:-$RUNDIR/out}/pth}
	say "golden .pth fixtures into $d: $($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())')"
	$PY scripts/golden_pth.py "$d"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
pack) pack ;;
test) unpack && gputest ;;
check) unpack && check ;;
resume) unpack && resume_check ;;
bench) unpack && bench "$@" ;;
live) unpack && live "$@" ;;
golden-pth) golden_pth "$@" ;;
all)
	unpack
	rc=0
	gputest || rc=1
	check
	resume_check || rc=1
	bench "$@"
	exit $rc
	;;
*)
	sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	[ -z "$cmd" ] || [ "$cmd" = help ] || exit 2
	;;
esac
