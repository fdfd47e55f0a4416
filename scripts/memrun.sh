#!/bin/bash
# usage: memrun.sh BINARY PORT
# Resident memory of `vsr serve --device cpu` around one task (docs/BENCHMARKS.md).
bin=$1; port=$2; d=$(mktemp -d)
mkdir -p $d/input; cp "$(dirname "$0")/../testdata/video/oa4_launch.webm" $d/input/clip.webm
$bin serve --device cpu --listen 127.0.0.1:$port --data $d 2>/dev/null & pid=$!
sleep 2
rss() { awk '/VmRSS/{print int($2/1024)}' /proc/$pid/status; }
idle=$(rss)
curl -s -H 'Content-Type: application/json' localhost:$port/v1/tasks/video/ -d '{"video_path":"clip.webm","sr_ratio":2,"max_frames":12,"save_result_path":"o.mp4","preset":"ultrafast"}' >/dev/null
peak=0
while ! curl -s localhost:$port/v1/tasks/ | grep -q completed; do r=$(rss); [ $r -gt $peak ] && peak=$r; sleep 0.2; done
sleep 1; a1=$(rss); sleep 9; a10=$(rss)
echo "$(basename $bin): RSS idle ${idle} MiB, peak ${peak} MiB, 1 s after the task ${a1} MiB, 10 s after ${a10} MiB"
kill $pid; wait $pid 2>/dev/null; rm -rf $d
