#!/bin/bash
# Run from a folder holding vsr, vsr-base (a build of an earlier commit) and the static ffmpeg's package/ (see ../shared/GPU-HOST.md).
# GPU smoke test of vsr serve: a restore through descriptor paths, an overwrite refusal, a swapped link.
set -u
cd "$(dirname "$0")"
d=$(mktemp -d); mkdir -p $d/input $d/output/sub; cp ../testdata/video/oa4_launch.webm $d/input/clip.webm
./vsr serve --device cuda:0 --listen 127.0.0.1:8400 --data $d 2>$d/log & pid=$!
for i in $(seq 50); do curl -s localhost:8400/healthz >/dev/null && break; sleep 0.2; done
post() { curl -s localhost:8400/v1/tasks/video/ -d "$1" | tee /dev/stderr | tr -d '\n'; echo; }
wait_task() { [ -z "${1:-}" ] && { echo "no task id"; return; }; for i in $(seq 300); do s=$(curl -s localhost:8400/v1/tasks/$1/status); echo "$s" | grep -q '"status": "\(completed\|failed\|cancelled\)"' && { echo "$s" | grep -E '"(status|error|error_type|save_result_path)"'; return; }; sleep 0.2; done; echo timeout; }
id=$(post '{"video_path":"clip.webm","sr_ratio":4,"target_shape":[1440,2560],"save_result_path":"sub/x4.mp4","segments":4}' | sed -n 's/.*"task_id": "\([^"]*\)".*/\1/p')
wait_task $id
ffmpeg -hide_banner -i $d/output/sub/x4.mp4 2>&1 | grep -E "Stream|Duration"
post '{"video_path":"clip.webm","save_result_path":"sub/x4.mp4"}'
id=$(post '{"video_path":"clip.webm","save_result_path":"sub/y.mp4","max_frames":48}' | sed -n 's/.*"task_id": "\([^"]*\)".*/\1/p')
wait_task $id
curl -s localhost:8400/v1/service/metadata | head -5
curl -s localhost:8400/metrics | grep -c vsr_gpu_memory_bytes
kill $pid; wait $pid; tail -3 $d/log; ls -la $d/output/sub
