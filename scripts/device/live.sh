#!/bin/bash
# Live streams on the one H200 (issue 22). Run from .devbin holding vsr
# and package/ffmpeg. A publisher sends the real 640x360 clip as MPEG-TS
# over TCP at real time (-re) at RATE frames/s (the clip retimed; sound
# only at 24); vsr restore --live --overload drop restores it to
# 2560x1440 on cuda:0 into a sink; the final statistics line is printed.
#   live.sh compact    realesr-animevideov3 x4 at 24 fps into MPEG-TS by
#                      libx264 ultrafast, and at RATES (24 48 96) fps into
#                      raw NUT on /dev/null (the engine without the encoder)
#   live.sh swiftvr    the full-size synthetic checkpoint at RATES (24 48)
#                      fps into raw NUT
set -u
cd "$(dirname "$0")"; B=$PWD
export PATH=$PWD/package:$PATH
clip=../testdata/video/oa4_launch.webm
secs=${SECS:-15}
source() { # rate: a clip of secs seconds at rate frames/s
  s=/tmp/src$1.mkv
  if [ ! -f $s ]; then
    if [ $1 = 24 ]; then
      ffmpeg -v error -stream_loop 9 -i $clip -t $secs -vf fps=24 -c:v ffv1 -c:a pcm_s16le $s
    else
      ffmpeg -v error -stream_loop 9 -i $clip -vf "fps=24,setpts=PTS*24/$1" -r $1 -frames:v $(($1 * secs)) -an -c:v ffv1 $s
    fi
  fi
  echo $s
}
run() { # rate, sink (x264 or raw), then vsr's model arguments
  rate=$1 sink=$2; shift 2
  src=$(source $rate)
  port=$((20000 + RANDOM % 20000))
  out=(-o /tmp/live_out.ts --codec libx264 --preset ultrafast)
  [ $sink = raw ] && out=(-o /dev/null --container nut --codec rawvideo)
  ./vsr restore --live "tcp://127.0.0.1:$port?listen=1" "${out[@]}" -y --device cuda:0 --json --stats-every 1000s \
    --idle-timeout 5s --overload drop "$@" > /tmp/live.json 2> /tmp/live.err &
  pid=$!
  for i in $(seq 1 240); do # the listener is up once the model is loaded
    if ffmpeg -v error -re -i $src -c:v libx264 -preset ultrafast -tune zerolatency -g $rate -c:a aac -f mpegts "tcp://127.0.0.1:$port" 2>/dev/null; then break; fi
    sleep 0.5
  done
  wait $pid
  echo "rate $rate fps, $sink, $*: $(tail -1 /tmp/live.json) $(grep -v '^restoring' /tmp/live.err | tail -2)"
}
case "${1:-compact}" in
compact)
  run 24 x264 -s 4
  for r in ${RATES:-24 48 96}; do run $r raw -s 4; done ;;
swiftvr)
  ck=/tmp/swck
  [ -d $ck ] || ./vsr checkpoint synth --family swiftvr --preset full --seed 1 -o $ck | tail -1
  for r in ${RATES:-24 48}; do run $r raw --model $ck --size 2560x1440; done ;;
esac
