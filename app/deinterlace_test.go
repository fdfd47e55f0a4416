package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/serve"
	"github.com/vsr-dev/vsr/video"
)

// TestDeinterlaceJob: a job's Deinterlace deinterlaces an interlaced
// input, telling Warn; a task's "deinterlace" does the same through the
// service, auto by default.
func TestDeinterlaceJob(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mpg")
	if out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-frames:v", "6",
		"-flags", "+ildct+ilme", "-top", "1", "-c:v", "mpeg2video", in).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
	devs, err := app.OpenDevices("cpu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := app.Load(devs[0], "level:x", model.Values{"level": 200}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	enc := video.EncodeOptions{Codec: "ffv1", PixFmt: "gbrp"}
	var warned []string
	res, err := ld.Run(context.Background(), app.Job{Input: in, Output: filepath.Join(dir, "double.mkv"), Params: model.Values{"level": 200},
		Encode: enc, Deinterlace: video.DeinterlaceDouble, Warn: func(m string) { warned = append(warned, m) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Frames != 12 || len(warned) != 1 || !strings.Contains(warned[0], "one frame per field") {
		t.Errorf("double: %d frames, warnings %q; want 12 and the notice", res.Frames, warned)
	}
	if !slices.Contains(res.Carried.Carried, "progressive (deinterlaced with double)") {
		t.Errorf("double: the report %q does not say it was deinterlaced", res.Carried.Carried)
	}
	res, err = ld.Run(context.Background(), app.Job{Input: in, Output: filepath.Join(dir, "as-is.mkv"), Params: model.Values{"level": 200}, Encode: enc})
	if err != nil || res.Frames != 6 {
		t.Errorf("no Deinterlace: %d frames, %v", res.Frames, err)
	}
	res, err = ld.Run(context.Background(), app.Job{Input: in, Output: filepath.Join(dir, "off.mkv"), Params: model.Values{"level": 200}, Encode: enc, Deinterlace: video.DeinterlaceOff})
	if err != nil || len(res.Carried.Dropped) == 0 || res.Carried.Dropped[len(res.Carried.Dropped)-1].What != "interlacing" {
		t.Errorf("off: the report %+v does not say the interlacing was dropped (%v)", res.Carried, err)
	}

	run, err := app.NewRunner(devs[:1], app.Served{Specs: []string{"level:x"}, Base: app.Job{Encode: enc}})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	svc, err := serve.New(serve.Config{Data: t.TempDir(), InputRoot: dir}, run)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	// A subtitled copy, for a task that leaves the subtitles out.
	srt := filepath.Join(dir, "subs.srt")
	os.WriteFile(srt, []byte("1\n00:00:00,000 --> 00:00:00,200\nhello\n"), 0o644)
	if out, err := exec.Command("ffmpeg", "-v", "error", "-i", in, "-i", srt, "-map", "0:v", "-map", "1", "-c:v", "mpeg2video", "-flags", "+ildct+ilme", "-top", "1", "-c:s", "srt",
		filepath.Join(dir, "subs.mkv")).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
	for body, want := range map[string]int{
		`{"video_path": "in.mpg", "save_result_path": "served-double.mkv", "deinterlace": "double"}`: 12,
		`{"video_path": "in.mpg", "save_result_path": "served-auto.mkv"}`:                            6,
		`{"video_path": "subs.mkv", "save_result_path": "nosubs.mkv", "no_subtitles": true}`:         6,
	} {
		resp, err := http.Post(srv.URL+"/v1/tasks/video/", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		id, _ := m["task_id"].(string)
		if resp.StatusCode != 200 || id == "" {
			t.Fatalf("%s: submit: %d %v", body, resp.StatusCode, m)
		}
		deadline := time.Now().Add(60 * time.Second)
		for m["status"] != "completed" {
			if m["status"] == "failed" || time.Now().After(deadline) {
				t.Fatalf("%s: task %v", body, m)
			}
			time.Sleep(20 * time.Millisecond)
			resp, err := http.Get(srv.URL + "/v1/tasks/" + id + "/status")
			if err != nil {
				t.Fatal(err)
			}
			json.NewDecoder(resp.Body).Decode(&m)
			resp.Body.Close()
		}
		info, err := video.Probe(context.Background(), m["save_result_path"].(string))
		if err != nil || info.Frames != want || info.FieldOrder != "progressive" {
			t.Errorf("%s: output %+v, %v; want %d progressive frames", body, info, err, want)
		}
		if strings.Contains(body, "no_subtitles") {
			if dropped := fmt.Sprint(m["dropped"]); !strings.Contains(dropped, "--no-subtitles") || len(info.Streams) != 1 {
				t.Errorf("%s: dropped %s, %d streams out; want the subtitles left out", body, dropped, len(info.Streams))
			}
		}
	}
}
