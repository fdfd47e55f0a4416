package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/video"
)

// mediaRunner reads its inputs as the real runner does: Run probes the
// input and writes its decoded frames (raw RGB) as the result, so a result
// holds whatever the task read. It checks inputs at submit only when it
// is a checkingRunner.
type mediaRunner struct{}

func (mediaRunner) Run(ctx context.Context, t *Task, progress func(int, int)) error {
	info, err := video.Probe(ctx, t.Input)
	if err != nil {
		return err
	}
	d, err := video.NewDecoder(ctx, info, video.DecodeOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	var out bytes.Buffer
	buf := make([]byte, d.FrameSize())
	for {
		err := d.Read(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		out.Write(buf)
	}
	return os.WriteFile(t.Output, out.Bytes(), 0o644)
}

// checkingRunner is a mediaRunner that checks inputs at submit, as the
// app's runner does.
type checkingRunner struct{ mediaRunner }

func (checkingRunner) CheckInput(ctx context.Context, r *Request, path string) error {
	_, err := video.ProbeHeader(ctx, path, video.ProbeOptions{})
	return err
}

// clipFile makes a small clip (10 frames of 32x24) at path with ffmpeg.
func clipFile(t *testing.T, path string) []byte {
	t.Helper()
	cmd := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10:d=1",
		"-c:v", "libx264", "-pix_fmt", "yuv420p", "-y", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestPlaylistInputs: an uploaded or named input that is a playlist or a
// list of files naming a file outside the input root is refused at submit
// (400, saying why, nothing left in the input root); a runner that does
// not check at submit fails the task when it probes; no result ever
// serves the file named. A real video still goes through.
func TestPlaylistInputs(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	secret := filepath.Join(t.TempDir(), "secret.ts")
	clipFile(t, secret)
	hls := func(seg string) []byte {
		return []byte("#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n" + seg + "\n#EXT-X-ENDLIST\n")
	}
	lists := []struct {
		name, file string
		data       []byte
		format     string
	}{
		{"hls-file-url", "clip.m3u8", hls("file://" + secret), "hls"},
		{"hls-absolute", "clip.mp4", hls(secret), "hls"},
		{"ffconcat", "list.mkv", []byte("ffconcat version 1.0\nfile '" + secret + "'\n"), "concat"},
	}
	for _, checked := range []bool{true, false} {
		t.Run(fmt.Sprintf("checked=%v", checked), func(t *testing.T) {
			var r Runner = mediaRunner{}
			if checked {
				r = checkingRunner{}
			}
			e := newEnv(t, Config{}, r)
			var ids []string
			for _, l := range lists {
				// Uploaded.
				code, m := e.upload(map[string]string{"save_result_path": l.name + "-up.mkv"}, l.file, l.data)
				if checked {
					wantError(t, l.name+" upload", code, m, 400, l.format+" demuxer")
					if msg, _ := m["error"].(string); strings.Contains(msg, "/proc/") {
						t.Errorf("%s: the error names a descriptor: %q", l.name, msg)
					}
				} else if code != 200 {
					t.Fatalf("%s upload: %d %v", l.name, code, m)
				} else {
					ids = append(ids, m["task_id"].(string))
				}
				// Named by video_path.
				if err := os.WriteFile(filepath.Join(e.svc.InputRoot(), l.file), l.data, 0o644); err != nil {
					t.Fatal(err)
				}
				body := map[string]any{"video_path": l.file, "save_result_path": l.name + "-path.mkv"}
				code, m, _ = e.do("POST", "/v1/tasks/video/", body)
				if checked {
					wantError(t, l.name+" video_path", code, m, 400, l.format+" demuxer")
					if msg, _ := m["error"].(string); !strings.Contains(msg, `"`+l.file+`"`) {
						t.Errorf("%s: the error does not name %q: %q", l.name, l.file, msg)
					}
				} else if code != 200 {
					t.Fatalf("%s video_path: %d %v", l.name, code, m)
				} else {
					ids = append(ids, m["task_id"].(string))
				}
				if checked {
					os.Remove(filepath.Join(e.svc.InputRoot(), l.file))
				}
			}
			for _, id := range ids {
				m := e.wait(id, Failed)
				if msg, _ := m["error"].(string); !strings.Contains(msg, "demuxer") || strings.Contains(msg, "\n") || m["error_type"] != "InputFormat" {
					t.Errorf("task %s failed with %q (%v), not the format's refusal", id, msg, m["error_type"])
				}
				if code, m, _ := e.do("GET", "/v1/tasks/"+id+"/result", nil); code == 200 {
					t.Errorf("task %s serves a result: %v", id, m)
				}
			}
			if ents, _ := os.ReadDir(e.svc.OutputRoot()); len(ents) != 0 {
				t.Errorf("the output root holds %d files", len(ents))
			}
			if checked {
				if ents, _ := os.ReadDir(e.svc.InputRoot()); len(ents) != 0 {
					t.Errorf("the input root holds %d files after refused submits", len(ents))
				}
			}
			// A video goes through, uploaded and named.
			video := clipFile(t, filepath.Join(t.TempDir(), "ok.mp4"))
			code, m := e.upload(map[string]string{"save_result_path": "ok.mkv"}, "ok.mp4", video)
			if code != 200 {
				t.Fatalf("upload of a video: %d %v", code, m)
			}
			e.wait(m["task_id"].(string), Completed)
			os.WriteFile(filepath.Join(e.svc.InputRoot(), "ok.mp4"), video, 0o644)
			id := e.submit(map[string]any{"video_path": "ok.mp4", "save_result_path": "ok2.mkv"})
			e.wait(id, Completed)
			code, m, _ = e.do("GET", "/v1/tasks/"+id+"/result", nil)
			if body, _ := m["_body"].(string); code != 200 || len(body) != 10*32*24*3 {
				t.Errorf("result of a video: %d, %d bytes", code, len(body))
			}
		})
	}
}
