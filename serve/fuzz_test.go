package serve

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unicode"
)

// FuzzTaskRequest runs a task request's body through the checks that run
// before a task is queued (decodeRequest, CheckRequest, resolveOutput):
// they must never panic, and what they pass must hold what they promise.
// Seeded with the requests of issue 35.
func FuzzTaskRequest(f *testing.F) {
	for _, s := range []string{
		`{"video_path": "a.mp4", "params": {"size": [60000, 60000]}}`,
		`{"video_path": "a.mp4", "target_shape": [16384, 16384]}`,
		`{"video_path": "a.mp4", "size": [1, 1], "target_shape": [1, 2]}`,
		`{"video_path": "a.mp4", "params": {"size": [48, 64], "reae_frame_batch": 0}}`,
		`{"video_path": "a.mp4", "params": {"sr_ratio": 1e308, "tile": -1}}`,
		`{"video_path": "a.mp4", "params": {"video_path": "/etc/passwd"}}`,
		`{"video_path": "a.mp4", "sr_ratio": 2, "params": {"sr_ratio": 2}}`,
		`{"video_path": "a.mp4", "params": {"size": null, "target_shape": [2]}}`,
		`{"video_path": "a.mp4", "params": {"a": {"b\u0000": ["\u001b"]}}}`,
		`{"video_path": "a.mp4", "save_result_path": "out\u0000.mp4"}`,
		`{"video_path": "a.mp4", "save_result_path": "live.m3u8"}`,
		`{"video_path": "a.mp4", "save_result_path": "../x.mpd"}`,
		`{"video_path": "a.mp4", "task_id": "queue"}`,
		`{"video_path": "a.mp4", "task_id": "..", "crf": 64, "dit": "maybe"}`,
		`{"video_path": "a.mp4", "params": {"params": {"size": [1, 1]}}}`,
		`{"video_path": "a.mp4", "params": {"clip_len": 1e10}}`,
		`[]`, `null`, `{}`, `{"params": null}`, `{"params": []}`,
	} {
		f.Add([]byte(s))
	}
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, body []byte) {
		var r Request
		if _, err := decodeRequest(bytes.NewReader(body), &r); err != nil {
			return
		}
		if err := CheckRequest(&r); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("a message of several lines: %q", err)
			}
			return
		}
		if r.TargetShape != nil || r.Size != nil && (len(r.Size) != 2 || r.Size[0] < 1 || r.Size[1] < 1 || r.Size[0] > 16384 || r.Size[1] > 16384) {
			t.Fatalf("size passed: %v %v", r.TargetShape, r.Size)
		}
		if !(r.SRRatio >= 0 && r.SRRatio <= 16) || r.Tile < 0 || r.ClipLen < 0 {
			t.Fatalf("values passed: %+v", r)
		}
		for k := range r.Params {
			if requestFields[k] {
				t.Fatalf("params keeps field %q", k)
			}
		}
		for _, s := range []string{r.TaskID, r.VideoPath, r.SaveResultPath, r.Model, r.Codec, r.Preset, r.PixFmt, r.DiT} {
			if strings.ContainsFunc(s, unicode.IsControl) {
				t.Fatalf("control character passed: %q", s)
			}
		}
		if reservedIDs[r.TaskID] {
			t.Fatalf("task id %q passed", r.TaskID)
		}
		again := r
		if err := CheckRequest(&again); err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("not idempotent: %v, %+v then %+v", err, r, again)
		}
		id := r.TaskID
		if id == "" {
			id = "t"
		}
		if out, err := resolveOutput(root, r.SaveResultPath, id); err == nil && !within(root, out) {
			t.Fatalf("output %q outside the root", out)
		}
	})
}
