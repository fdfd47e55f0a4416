package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/pipeline"
)

// freePort returns a port of network ("tcp" or "udp") free on loopback now.
func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// publisher is an ffmpeg sending a 32x24 test pattern with a tone at real
// time speed (-re) as MPEG-TS to url, for seconds.
func publisher(t *testing.T, url string, seconds int) *exec.Cmd {
	cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-re",
		"-f", "lavfi", "-i", "testsrc=size=32x24:rate=24", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000",
		"-t", strconv.Itoa(seconds), "-c:v", "libx264", "-preset", "ultrafast", "-g", "12", "-c:a", "aac", "-f", "mpegts", url)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// liveResult is how an in-process live restore ended.
type liveResult struct {
	s   pipeline.LiveStats // its final statistics
	err error
	log string // its stderr
}

// liveRun runs vsr restore on a live stream in process with --json.
func liveRun(ctx context.Context, args ...string) liveResult {
	var out, errb bytes.Buffer
	root := newRoot()
	root.SetArgs(append([]string{"restore", "--device", "cpu", "--preset", "ultrafast", "--json", "--stats-every", "500ms"}, args...))
	root.SetOut(&out)
	root.SetErr(&errb)
	r := liveResult{err: root.ExecuteContext(ctx), log: errb.String()}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var s pipeline.LiveStats
		if json.Unmarshal([]byte(l), &s) == nil && s.Final {
			r.s = s
		}
	}
	return r
}

// startLive starts liveRun, bounded to 90 s, and returns where its result
// comes.
func startLive(t *testing.T, args ...string) <-chan liveResult {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	done := make(chan liveResult, 1)
	go func() { done <- liveRun(ctx, args...) }()
	return done
}

// retry calls try until it succeeds, for 20 s at most: a publisher
// connecting once vsr listens, or vsr once a receiver does.
func retry(t *testing.T, what string, try func() error) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// framePTS returns the video frames' timestamps of a media file.
func framePTS(t *testing.T, path string) []float64 {
	t.Helper()
	cmd := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time", "-of", "csv=p=0", filepath.Base(path))
	cmd.Dir = filepath.Dir(path) // a DASH manifest names its segments relative to itself
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	var ts []float64
	for _, l := range strings.Fields(string(out)) {
		v, err := strconv.ParseFloat(strings.Trim(l, ","), 64)
		if err != nil {
			t.Fatalf("ffprobe %s: %q", path, l)
		}
		ts = append(ts, v)
	}
	return ts
}

// checkLiveOutput checks a live output: decodable, with audio, n frames,
// timestamps increasing.
func checkLiveOutput(t *testing.T, path string, n int) {
	t.Helper()
	ts := framePTS(t, path)
	if len(ts) != n {
		t.Errorf("%s: %d frames, the stream wrote %d", path, len(ts), n)
	}
	for i := 1; i < len(ts); i++ {
		if ts[i] <= ts[i-1] {
			t.Errorf("%s: frame %d at %v s after %v s", path, i, ts[i], ts[i-1])
			break
		}
	}
	if info := probe(t, path); !info.HasAudio || info.Width != 128 || info.Height != 96 {
		t.Errorf("%s: %dx%d, audio %v", path, info.Width, info.Height, info.HasAudio)
	}
}

// TestLiveTCPToHLS: a publisher connects over TCP to vsr, which restores
// the stream with the compact model into an HLS playlist; when the
// publisher ends, the playlist gets its end tag and holds every frame.
func TestLiveTCPToHLS(t *testing.T) {
	needFFmpeg(t)
	port := freePort(t, "tcp")
	dir := t.TempDir()
	out := filepath.Join(dir, "hls", "out.m3u8")
	os.Mkdir(filepath.Dir(out), 0o755)
	done := startLive(t, fmt.Sprintf("tcp://127.0.0.1:%d?listen=1", port), "-o", out, "--idle-timeout", "20s")
	retry(t, "the publisher could not connect to vsr", func() error { return publisher(t, fmt.Sprintf("tcp://127.0.0.1:%d", port), 2).Wait() })
	r := <-done
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.log)
	}
	t.Logf("%+v", r.s)
	if r.s.InFrames != 48 || r.s.OutFrames != 48 || r.s.Dropped != 0 {
		t.Errorf("2 s at 24 fps over TCP: %d in, %d out, %d dropped", r.s.InFrames, r.s.OutFrames, r.s.Dropped)
	}
	if r.s.LatencyP50 <= 0 || r.s.LatencyP99 < r.s.LatencyP50 {
		t.Errorf("latency p50 %v p99 %v", r.s.LatencyP50, r.s.LatencyP99)
	}
	pl, _ := os.ReadFile(out)
	if !strings.Contains(string(pl), "#EXT-X-ENDLIST") {
		t.Errorf("the playlist has no end tag:\n%s", pl)
	}
	checkLiveOutput(t, out, r.s.OutFrames)
}

// TestLiveUDPIdle: a UDP stream restored into MPEG-TS pushed to another
// loopback port; the publisher is killed mid-stream and the stream ends
// cleanly within the idle timeout; the receiver's file is decodable and
// holds the frames vsr wrote (frames the source sent and vsr never got are
// not vsr's to count).
func TestLiveUDPIdle(t *testing.T) {
	needFFmpeg(t)
	in, outPort := freePort(t, "udp"), freePort(t, "udp")
	dir := t.TempDir()
	got := filepath.Join(dir, "received.ts")
	recv := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-i", fmt.Sprintf("udp://127.0.0.1:%d?timeout=4000000", outPort), "-c", "copy", "-f", "mpegts", got)
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	defer recv.Process.Kill()
	done := startLive(t, fmt.Sprintf("udp://127.0.0.1:%d", in), "-o", fmt.Sprintf("udp://127.0.0.1:%d?pkt_size=1316", outPort), "--idle-timeout", "1s")
	time.Sleep(500 * time.Millisecond)
	pub := publisher(t, fmt.Sprintf("udp://127.0.0.1:%d?pkt_size=1316", in), 60)
	time.Sleep(3 * time.Second)
	pub.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	var r liveResult
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end after its source was killed")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	ended := time.Since(killed)
	t.Logf("%+v; ended %v after the publisher was killed (idle timeout 1 s)", r.s, ended.Round(10*time.Millisecond))
	if ended > 5*time.Second {
		t.Errorf("ended %v after the source stopped, idle timeout 1 s", ended)
	}
	if r.s.OutFrames < 24 || r.s.OutFrames != r.s.InFrames-r.s.Dropped {
		t.Errorf("%d in, %d out, %d dropped", r.s.InFrames, r.s.OutFrames, r.s.Dropped)
	}
	recv.Wait()
	ts := framePTS(t, got)
	if len(ts) < 24 || len(ts) > r.s.OutFrames {
		t.Errorf("the receiver got %d frames of the %d sent", len(ts), r.s.OutFrames)
	}
	for i := 1; i < len(ts); i++ {
		if ts[i] <= ts[i-1] {
			t.Errorf("frame %d at %v s after %v s", i, ts[i], ts[i-1])
			break
		}
	}
}

// TestLiveErrors: bad live requests fail in one line.
func TestLiveErrors(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	port := freePort(t, "tcp")
	for _, c := range [][]string{
		{`--overload "skip"`, "restore", "--device", "cpu", "udp://127.0.0.1:9", "-o", "x.m3u8", "--overload", "skip"},
		{"give its container with --container", "restore", "--device", "cpu", "udp://127.0.0.1:9", "-o", "-"},
		{`live input option "listen": want key=value`, "restore", "--device", "cpu", "udp://127.0.0.1:9", "-o", filepath.Join(dir, "o.m3u8"), "--input-opt", "listen"},
		{"Connection refused", "restore", "--device", "cpu", fmt.Sprintf("tcp://127.0.0.1:%d", port), "-o", filepath.Join(dir, "a.m3u8")},
		{"nothing arrived within 10s", "restore", "--device", "cpu", fmt.Sprintf("udp://127.0.0.1:%d", freePort(t, "udp")), "-o", filepath.Join(dir, "b.m3u8"), "--idle-timeout", "500ms"},
		{"live output tcp://127.0.0.1:" + strconv.Itoa(port) + ": tcp://127.0.0.1:" + strconv.Itoa(port) + ": Connection refused", "restore", "--device", "cpu", "--live", genClip(t, dir, 3, false, "mp4"), "-o", fmt.Sprintf("tcp://127.0.0.1:%d", port)},
		{"does not exist: create it first", "restore", "--device", "cpu", "--live", genClip(t, dir, 3, false, "mp4"), "-o", filepath.Join(dir, "none", "c.m3u8")},
	} {
		_, stderr, err := vsrOutputs(c[1:]...)
		if err == nil || !strings.Contains(fmt.Sprint(err, stderr), c[0]) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line with %q", c[1:], err, c[0])
		}
	}
}

// TestServeStreams: the service starts a live session from an allowed UDP
// source to an allowed UDP sink, reports its statistics, refuses a second
// while the only device is reserved, refuses disallowed URLs with 400, and
// stops the session on DELETE with its output finished.
func TestServeStreams(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	bin := buildVSR(t, dir)
	_, got := startLogged(t, bin, []string{`url=(http://\S+)`}, "serve", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"),
		"--device", "cpu", "--preset", "ultrafast", "--stream-allow", "udp://127.0.0.1?listen")
	a := api{t, got[0]}
	in, outPort := freePort(t, "udp"), freePort(t, "udp")
	inURL, outURL := fmt.Sprintf("udp://127.0.0.1:%d", in), fmt.Sprintf("udp://127.0.0.1:%d?pkt_size=1316", outPort)
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"input": "udp://10.1.2.3:5000", "output": outURL}, "(--stream-allow lets in udp://127.0.0.1?listen)"},
		{map[string]any{"input": inURL, "output": "tcp://127.0.0.1:80"}, `field "output": tcp://127.0.0.1:80 is not allowed`},
		{map[string]any{"input": "/etc/passwd", "output": outURL}, "is not a URL"},
		{map[string]any{"input": inURL, "output": outURL, "overload": "skip"}, "want wait or drop"},
		{map[string]any{"input": inURL, "output": outURL, "model": "nope"}, "is not served"},
	} {
		if code, m := a.call("POST", "/v1/streams", c.body); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), c.want) {
			t.Errorf("%v: %d %v, want 400 with %q", c.body, code, m, c.want)
		}
	}
	// The body is read as a task's: one object, nothing after it.
	resp, err := http.Post(got[0]+"/v1/streams", "application/json", strings.NewReader(`{"input": "`+inURL+`", "output": "`+inURL+`"} {}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "data after the request object") {
		t.Errorf("a body with data after its object: %d %s", resp.StatusCode, body)
	}
	received := filepath.Join(dir, "received.ts")
	recv := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-i", fmt.Sprintf("udp://127.0.0.1:%d?timeout=4000000", outPort), "-c", "copy", "-f", "mpegts", received)
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	defer recv.Process.Kill()
	code, m := a.call("POST", "/v1/streams", map[string]any{"input": inURL, "output": outURL, "idle_timeout": 30})
	if code != 201 {
		t.Fatalf("start: %d %v", code, m)
	}
	id := m["stream_id"].(string)
	if code, m := a.call("POST", "/v1/streams", map[string]any{"input": inURL, "output": outURL}); code != 503 {
		t.Errorf("a second session on the one device: %d %v, want 503", code, m)
	}
	time.Sleep(300 * time.Millisecond)
	publisher(t, inURL+"?pkt_size=1316", 60)
	var stats map[string]any
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, m = a.call("GET", "/v1/streams/"+id, nil)
		stats, _ = m["stats"].(map[string]any)
		if stats != nil && stats["out_frames"].(float64) >= 24 {
			break
		}
		if m["status"] != "running" || time.Now().After(deadline) {
			t.Fatalf("the session wrote no frames: %v", m)
		}
	}
	code, m = a.call("DELETE", "/v1/streams/"+id, nil)
	if code != 200 || m["status"] != "stopped" {
		t.Fatalf("stop: %d %v", code, m)
	}
	t.Logf("stopped: %v", m["stats"])
	recv.Wait()
	if ts := framePTS(t, received); len(ts) < 24 {
		t.Errorf("the sink received %d frames", len(ts))
	}
	// The device is free again.
	code, m = a.call("POST", "/v1/streams", map[string]any{"input": inURL, "output": outURL, "idle_timeout": 1})
	if code != 201 {
		t.Fatalf("after the stop: %d %v", code, m)
	}
	_, list := a.call("GET", "/v1/streams", nil)
	if n := len(list["streams"].([]any)); n != 2 {
		t.Errorf("%d streams listed, want 2", n)
	}
	if code, _ := a.call("GET", "/v1/streams/s-none", nil); code != 404 {
		t.Errorf("an unknown stream: %d", code)
	}
	resp, err = http.Get(got[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`vsr_live_sessions{status="stopped"} 1`, `vsr_live_frames_total{kind="out"} `, `vsr_live_frames_total{kind="dropped"} 0`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if strings.Contains(string(metrics), `vsr_live_frames_total{kind="out"} 0`+"\n") {
		t.Error("/metrics counts no frame out")
	}
}

// TestLiveReconnect: with --reconnect, a source that ends and connects
// again continues the same output (the model's state reset), its
// timestamps after the first connection's; the stream ends when the
// source stays away for the idle timeout.
func TestLiveReconnect(t *testing.T) {
	needFFmpeg(t)
	port := freePort(t, "tcp")
	out := filepath.Join(t.TempDir(), "out.mkv")
	done := startLive(t, fmt.Sprintf("tcp://127.0.0.1:%d?listen=1", port), "-o", out, "--reconnect", "--idle-timeout", "10s")
	for conn := range 2 {
		retry(t, fmt.Sprintf("connection %d: the publisher could not connect", conn+1), func() error {
			return publisher(t, fmt.Sprintf("tcp://127.0.0.1:%d", port), 1).Wait()
		})
	}
	published := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("%+v; ended %v after the last publisher", r.s, time.Since(published).Round(10*time.Millisecond))
	if r.s.Connections != 2 || r.s.InFrames != 48 || r.s.OutFrames != 48 {
		t.Errorf("%d connections, %d frames in, %d out; want 2, 48, 48", r.s.Connections, r.s.InFrames, r.s.OutFrames)
	}
	checkLiveOutput(t, out, r.s.OutFrames)
	if ts := framePTS(t, out); len(ts) == 48 && ts[47]-ts[0] < 1.9 {
		t.Errorf("the second connection's frames overlap the first's: %v s for 48 frames at 24 fps", ts[47]-ts[0])
	}
}

// TestLiveEqualsFile: SwiftVR (the tiny checkpoint with its DiT) and
// CDA-VSR (a synthetic x2 checkpoint) restoring a clip read as a live
// stream, whose length they learn only at its end, give the frames of the
// same clip restored as a file, bitwise (lossless output), for lengths that
// end inside a SwiftVR chunk and on a chunk's boundary. The clip has one
// key frame, so CDA-VSR restarts its recurrence at the same frames both
// ways (a live stream's key frames are not known).
func TestLiveEqualsFile(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	ck, cda := filepath.Join(dir, "ck"), filepath.Join(dir, "cda.safetensors")
	if _, err := vsr(t, "checkpoint", "synth", "--family", "swiftvr", "--preset", "tiny", "-o", ck); err != nil {
		t.Fatal(err)
	}
	if _, err := vsr(t, "checkpoint", "synth", "--family", "cdavsr", "--scale", "2", "--seed", "3", "-o", cda); err != nil {
		t.Fatal(err)
	}
	clip := genClip(t, dir, 3, false, "mp4")
	if _, err := vsr(t, "restore", "--live", clip, "-o", filepath.Join(dir, "x.mkv"), "--model", ck, "--device", "cpu,cpu", "--progress", "none"); err == nil || !strings.Contains(err.Error(), "a live stream runs on one: give one device") {
		t.Errorf("SwiftVR live on a device list: %v", err)
	}
	for _, c := range []struct {
		model  string
		frames []int
	}{{ck, []int{20, 28, 53}}, {cda, []int{13}}} {
		for _, n := range c.frames {
			in := filepath.Join(dir, fmt.Sprintf("in%d.mkv", n))
			ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=24x16:rate=24:duration=4", "-vf", fmt.Sprintf("trim=end_frame=%d", n), "-c:v", "libx264", "-g", "1000", in)
			lossless := []string{"--model", c.model, "--codec", "ffv1", "--pix-fmt", "gbrp", "--progress", "none", "--device", "cpu"}
			file, live := filepath.Join(dir, fmt.Sprintf("file%d.mkv", n)), filepath.Join(dir, fmt.Sprintf("live%d.mkv", n))
			if _, err := vsr(t, append([]string{"restore", in, "-o", file, "-y"}, lossless...)...); err != nil {
				t.Fatal(err)
			}
			if _, err := vsr(t, append([]string{"restore", "--live", in, "-o", live, "-y"}, lossless...)...); err != nil {
				t.Fatal(err)
			}
			a, b := probe(t, file), probe(t, live)
			if a.Frames != n || b.Frames != n {
				t.Fatalf("%s, %d frames: %d from the file, %d live", filepath.Base(c.model), n, a.Frames, b.Frames)
			}
			if !bytes.Equal(decodeAll(t, a), decodeAll(t, b)) {
				t.Errorf("%s, %d frames: the live stream's frames differ from the file's", filepath.Base(c.model), n)
			}
		}
	}
}

// TestLivePipes: vsr restore - -o - --container mpegts restores what comes
// on stdin onto stdout, as a pipe between two ffmpeg commands would, with
// its statistics (--json) on stderr.
func TestLivePipes(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src.ts")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc=size=32x24:rate=24:duration=1", "-f", "lavfi", "-i", "sine=duration=1", "-c:v", "libx264", "-c:a", "aac", "-f", "mpegts", src)
	in, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	root := newRoot()
	root.SetArgs([]string{"restore", "-", "-o", "-", "--container", "mpegts", "--device", "cpu", "--preset", "ultrafast", "--json"})
	root.SetIn(bytes.NewReader(in))
	root.SetOut(&out)
	root.SetErr(&errb)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	got := filepath.Join(dir, "out.ts")
	os.WriteFile(got, out.Bytes(), 0o644)
	var final pipeline.LiveStats
	for _, l := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		json.Unmarshal([]byte(l), &final)
	}
	if !final.Final || final.OutFrames != 24 {
		t.Errorf("statistics on stderr: %+v\n%s", final, errb.String())
	}
	if strings.Join(final.Carried.Carried, ",") != "audio (the first stream, re-encoded)" || len(final.Carried.Dropped) != 1 {
		t.Errorf("statistics say the stream carries %v and drops %v", final.Carried.Carried, final.Carried.Dropped)
	}
	checkLiveOutput(t, got, 24)
}

// TestLiveDASH: two DASH outputs in one folder, each with its own
// segments (named after the manifest), every frame in each.
func TestLiveDASH(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	for i, n := range []int{12, 20} {
		src := filepath.Join(dir, fmt.Sprintf("src%d.ts", i))
		ffmpeg(t, "-f", "lavfi", "-i", fmt.Sprintf("testsrc=size=32x24:rate=24:duration=%v", float64(n)/24), "-c:v", "libx264", "-f", "mpegts", src)
		mpd := filepath.Join(dir, fmt.Sprintf("out%d.mpd", i))
		if _, err := vsr(t, "restore", "--live", src, "-o", mpd, "--device", "cpu", "--preset", "ultrafast", "--progress", "none"); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range []int{12, 20} {
		if ts := framePTS(t, filepath.Join(dir, fmt.Sprintf("out%d.mpd", i))); len(ts) != n {
			t.Errorf("out%d.mpd: %d frames, want %d", i, len(ts), n)
		}
	}
}

// TestLiveSRT: a publisher calls vsr, which listens on SRT; every frame
// comes out into MPEG-TS with its sound, in order.
func TestLiveSRT(t *testing.T) {
	needFFmpeg(t)
	if out, _ := exec.Command("ffmpeg", "-hide_banner", "-protocols").Output(); !strings.Contains(string(out), " srt\n") {
		t.Skip("this ffmpeg has no SRT")
	}
	port := freePort(t, "udp")
	out := filepath.Join(t.TempDir(), "out.ts")
	done := startLive(t, fmt.Sprintf("srt://127.0.0.1:%d?mode=listener", port), "-o", out, "--idle-timeout", "5s")
	retry(t, "the publisher could not connect to vsr", func() error {
		return publisher(t, fmt.Sprintf("srt://127.0.0.1:%d?mode=caller", port), 2).Wait()
	})
	r := <-done
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.log)
	}
	t.Logf("%+v", r.s)
	if r.s.OutFrames < 40 || r.s.OutFrames != r.s.InFrames-r.s.Dropped {
		t.Errorf("2 s at 24 fps over SRT: %d in, %d out, %d dropped", r.s.InFrames, r.s.OutFrames, r.s.Dropped)
	}
	checkLiveOutput(t, out, r.s.OutFrames)
}

// TestLiveRTMP: vsr is the RTMP server (--input-opt listen=1) a publisher
// pushes FLV to, and writes HLS.
func TestLiveRTMP(t *testing.T) {
	needFFmpeg(t)
	url := fmt.Sprintf("rtmp://127.0.0.1:%d/live/cam", freePort(t, "tcp"))
	out := filepath.Join(t.TempDir(), "out.m3u8")
	done := startLive(t, url, "-o", out, "--input-opt", "listen=1", "--idle-timeout", "5s")
	retry(t, "the publisher could not connect to vsr", func() error {
		return exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi", "-i", "testsrc=size=32x24:rate=24",
			"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "2", "-c:v", "libx264", "-preset", "ultrafast", "-g", "12", "-c:a", "aac", "-f", "flv", url).Run()
	})
	r := <-done
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.log)
	}
	t.Logf("%+v", r.s)
	if r.s.InFrames != 48 || r.s.OutFrames != 48 {
		t.Errorf("2 s at 24 fps over RTMP: %d in, %d out", r.s.InFrames, r.s.OutFrames)
	}
	checkLiveOutput(t, out, r.s.OutFrames)
}

// TestLivePushOutputs: vsr pushes a stream to an RTMP server and to an
// RTSP server (ffmpeg receivers listening on loopback), which record
// every frame.
func TestLivePushOutputs(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src.ts")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc=size=32x24:rate=24:duration=1", "-f", "lavfi", "-i", "sine=duration=1", "-c:v", "libx264", "-c:a", "aac", "-f", "mpegts", src)
	for _, c := range []struct{ name, url string }{
		{"rtmp", "rtmp://127.0.0.1:%d/live/out"},
		{"rtsp", "rtsp://127.0.0.1:%d/out"},
	} {
		url := fmt.Sprintf(c.url, freePort(t, "tcp"))
		got := filepath.Join(dir, c.name+".mkv")
		listen := []string{"-listen", "1"}
		if c.name == "rtsp" {
			listen = []string{"-rtsp_flags", "listen"}
		}
		recv := exec.Command("ffmpeg", append(append([]string{"-hide_banner", "-loglevel", "error"}, listen...), "-i", url, "-c", "copy", "-y", got)...)
		if err := recv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { recv.Process.Kill() })
		retry(t, c.name+": vsr could not push to the receiver", func() error {
			_, err := vsr(t, "restore", "--live", src, "-o", url, "--device", "cpu", "--preset", "ultrafast", "--progress", "none")
			return err
		})
		waited := make(chan error, 1)
		go func() { waited <- recv.Wait() }()
		select {
		case <-waited:
		case <-time.After(20 * time.Second):
			recv.Process.Kill()
			t.Fatalf("%s: the receiver did not finish", c.name)
		}
		if ts := framePTS(t, got); len(ts) != 24 {
			t.Errorf("%s: the receiver recorded %d frames, want 24", c.name, len(ts))
		}
	}
}
