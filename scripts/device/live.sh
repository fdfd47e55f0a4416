#!/bin/bash
# Live streams on the one H200 (issue 22). Run from .devbin holding vsr
# and package/ffmpeg. A publisher sends the real 640x360 clip as MPEG-TS
# over TCP at real time (-re, copied, pre-encoded) at RATE frames/s (the
# clip retimed; sound only at 24); vsr restore --live --overload drop restores it to
# 2560x1440 on cuda:0 into a sink; the final statistics line is printed.
#   live.sh compact    realesr-animevideov3 x4 at 24 fps into MPEG-TS by
#                      libx264 ultrafast, and at RATES (24 48 96) fps into
#                      raw NUT on /dev/null (the engine without the encoder)
#   live.sh swiftvr    the full-size synthetic checkpoint at RATES (24 48)
#                      fps into raw NUT
#   live.sh cdavsr     a synthetic x4 CDA-VSR checkpoint at RATES (24 48 96)
#                      fps into raw NUT
# After the table of 2 s intervals, "steady" counts the frames dropped
# after the first STEADY (10) seconds of the stream, when the backlog of
# the warm-up has been absorbed or dropped.
set -u
cd "$(dirname "$0")"; B=$PWD
export PATH=$PWD/package:$PATH
[ -x ./vsr ] && [ -x package/ffmpeg ] || { echo "no ./vsr or package/ffmpeg: unpack the .xz files first"; exit 1; }
clip=../testdata/video/oa4_launch.webm
secs=${SECS:-15}
source() { # rate: the clip retimed to rate frames/s for secs seconds, as H.264 in MPEG-TS
  s=/tmp/src$1.ts
  if [ ! -f $s ]; then
    a=(-an)
    [ $1 = 24 ] && a=(-c:a aac)
    ffmpeg -v error -stream_loop 9 -i $clip -vf "fps=24,settb=1/$1,setpts=N" -r $1 -frames:v $(($1 * secs)) "${a[@]}" \
      -c:v libx264 -preset ultrafast -tune zerolatency -g $1 -f mpegts $s
  fi
  echo $s
}
run() { # rate, sink (x264 or raw), then vsr's model arguments
  rate=$1 sink=$2; shift 2
  src=$(source $rate)
  port=$((20000 + RANDOM % 20000))
  out=(-o /tmp/live_out.ts --codec libx264 --preset ultrafast)
  [ $sink = raw ] && out=(-o /dev/null --container nut --codec rawvideo)
  ./vsr restore --live "tcp://127.0.0.1:$port?listen=1" "${out[@]}" -y --device cuda:0 --json --stats-every 2s \
    --idle-timeout 5s --overload drop "$@" > /tmp/live.json 2> /tmp/live.err &
  pid=$!
  for i in $(seq 1 240); do # the listener is up once the model is loaded
    kill -0 $pid 2>/dev/null || break
    if ffmpeg -v error -re -i $src -c copy -f mpegts "tcp://127.0.0.1:$port" 2>/dev/null; then break; fi
    sleep 0.5
  done
  wait $pid
  echo "rate $rate fps, $sink, $*: $(tail -1 /tmp/live.json) $(grep -v '^restoring' /tmp/live.err | tail -2)"
  # every 2 s: seconds, frames in, out, dropped so far, latency p50, p99 over the interval
  python3 -c 'import json,sys
for l in open("/tmp/live.json"):
    s=json.loads(l); print("  %5.1f s  in %5d  out %5d  dropped %4d  p50 %.3f  p99 %.3f" % (s["seconds"], s["in_frames"], s["out_frames"], s["dropped_frames"], s["latency_p50_seconds"], s["latency_p99_seconds"]))
st=[json.loads(l) for l in open("/tmp/live.json")]
base=[s for s in st if s["seconds"] <= '"${STEADY:-10}"']
if base and len(st) > len(base):
    b, e = base[-1], st[-1]
    print("  steady (after %.0f s): in %d, dropped %d" % (b["seconds"], e["in_frames"]-b["in_frames"], e["dropped_frames"]-b["dropped_frames"]))'
}
case "${1:-compact}" in
compact)
  run 24 x264 -s 4
  for r in ${RATES:-24 48 96}; do run $r raw -s 4; done ;;
swiftvr)
  ck=/tmp/swck
  [ -d $ck ] || ./vsr checkpoint synth --family swiftvr --preset full --seed 1 -o $ck | tail -1
  for r in ${RATES:-24 48}; do run $r raw --model $ck --size 2560x1440; done ;;
cdavsr)
  ck=/tmp/cda.safetensors
  [ -f $ck ] || ./vsr checkpoint synth --family cdavsr --seed 1 -o $ck | tail -1
  for r in ${RATES:-24 48 96}; do run $r raw --model $ck; done ;;
esac
