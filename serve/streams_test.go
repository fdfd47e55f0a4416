package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// streamFake runs live sessions: with ffmpeg it sends a few black frames
// to the session's output through a real video.LiveEncoder (what the
// service would run); fail makes the session fail with its URLs in the
// message, as ffmpeg's errors have them.
type streamFake struct {
	*fakeRunner
	encode, fail bool
	mu           sync.Mutex
	got          []LiveSession
}

func (f *streamFake) Stream(ctx context.Context, ls LiveSession) (func() error, error) {
	f.mu.Lock()
	f.got = append(f.got, ls)
	f.mu.Unlock()
	return func() error {
		q := ls.Request
		switch {
		case f.fail:
			return fmt.Errorf("live input %s: cannot open; live output %s: Connection refused", q.Input, q.Output)
		case f.encode:
			enc, err := video.NewLiveEncoder(ctx, video.LiveOutput{URL: q.Output, Format: q.Container,
				Encode: video.EncodeOptions{Width: 64, Height: 48, CRF: -1, Preset: "ultrafast"}, Protocols: ls.OutputProtocols})
			if err != nil {
				return err
			}
			for i := range 5 {
				enc.WriteFrame(int64(i)*40e6, make([]byte, enc.FrameSize()))
			}
			return enc.Close()
		}
		<-ctx.Done()
		return nil
	}, nil
}

func (f *streamFake) last() LiveSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got[len(f.got)-1]
}

// waitStream polls a session until it has ended (10 s at most).
func waitStream(e *env, id string) map[string]any {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, m, _ := e.do("GET", "/v1/streams/"+id, nil)
		if m["status"] != "running" || time.Now().After(deadline) {
			return m
		}
	}
}

// freeLoopbackPort returns a UDP port free on loopback now.
func freeLoopbackPort(t *testing.T) int {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// TestStreamTeeRefused: the tee muxer and the '|' and "[f=...]" of its
// output list are refused, and the file a tee output names is not touched
// (ffmpeg, given them, overwrote it: it runs with -y), nor is a TCP port
// the rules do not list reached through them.
func TestStreamTeeRefused(t *testing.T) {
	f := &streamFake{fakeRunner: newFake(false)}
	if _, err := exec.LookPath("ffmpeg"); err == nil {
		f.encode = true
	}
	e := newEnv(t, Config{StreamAllow: []string{"udp://127.0.0.1?listen"}}, f)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	reached := make(chan bool, 1)
	go func() {
		if c, err := tcp.Accept(); err == nil {
			c.Close()
			reached <- true
		}
	}()
	udp := fmt.Sprintf("udp://127.0.0.1:%d", freeLoopbackPort(t))
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"container": "tee", "output": udp + "/x.ts|[f=mpegts]" + victim}, "not a URL vsr takes"},
		{map[string]any{"container": "tee", "output": udp + "/x.ts|[f=mpegts]tcp://" + tcp.Addr().String()}, "not a URL vsr takes"},
		{map[string]any{"container": "tee", "output": "udp://127.0.0.1:5000"}, `field "container": "tee": a udp output takes mpegts, matroska, nut`},
		{map[string]any{"output": udp + "/[f=mpegts]" + victim}, "'|', '[', ']'"},
		{map[string]any{"container": "hls", "output": udp + "/" + filepath.Base(victim)}, `"hls": a udp output takes`},
	} {
		c.body["input"] = "udp://127.0.0.1:5000"
		code, m, _ := e.do("POST", "/v1/streams", c.body)
		if code == 201 {
			waitStream(e, m["stream_id"].(string))
		}
		if code != 400 || !strings.Contains(fmt.Sprint(m["error"]), c.want) {
			t.Errorf("%v: %d %v, want 400 with %q", c.body, code, m, c.want)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
		t.Errorf("the file a tee output named was touched: %q %v", b, err)
	}
	select {
	case <-reached:
		t.Errorf("a session reached %s, which no rule lists", tcp.Addr())
	case <-time.After(100 * time.Millisecond):
	}
}

// TestStreamURLTricks: URLs that Go and ffmpeg would read differently,
// options that bind or listen, and unbounded numbers are refused with
// 400; what is accepted reaches the runner rebuilt from its parts.
func TestStreamURLTricks(t *testing.T) {
	f := &streamFake{fakeRunner: newFake(false)}
	e := newEnv(t, Config{StreamAllow: []string{"tcp://*:9000", "udp://127.0.0.1?listen", "srt://127.0.0.1:7000",
		"rtmp://127.0.0.1", "http://127.0.0.1:8080", "https://*", "http://*:8081"}}, f)
	const out = "udp://127.0.0.1:5000"
	for _, c := range []struct {
		in, want string
		more     map[string]any
	}{
		{in: "tcp://127.0.0.1:9001:9000", want: "more than one ':'"},
		{in: "tcp://127.0.0.1:9000:9001", want: "more than one ':'"},
		{in: "tcp://[127.0.0.1]:9000", want: "only around an IPv6 address"},
		{in: "udp://127.0.0.1:5000?localport=7777", want: `option "localport" is not allowed in udp URLs`},
		{in: "udp://127.0.0.1:5000?localaddr=0.0.0.0", want: `option "localaddr" is not allowed`},
		{in: "udp://127.0.0.1:5000?pkt_size=1316&pkt_size=1", want: "given twice"},
		{in: "udp://127.0.0.1:5000?pkt_size=99999999", want: "0..65507"},
		{in: "tcp://127.0.0.1:9000?listen=1", want: "a rule needs ?listen"},
		{in: "srt://127.0.0.1:7000?mode=listener", want: "a rule needs ?listen"},
		{in: "rtmp://127.0.0.1/live?x=1", want: "rtmp URLs take no options"},
		{in: "udp://127.0.0.1:5000/a|b", want: "not a URL vsr takes"},
		{in: "udp://127.0.0.1:5000/a b", want: "a space, control"},
		{in: "udp://127.0.0.1:5000/a\x00b", want: "a space, control"},
		{in: "udp://127.0.0.1:5000/%7C", want: "not a URL vsr takes"},
		{in: "udp://127.0.0.1:5000#x", want: "not a URL vsr takes"},
		{in: "udp://a@b@127.0.0.1:5000", want: "user:password@"},
		{in: "udp://127.1:5000", want: "want a host name or an IP address"},
		{in: "udp://0x7f.0.0.1:5000", want: "want a host name or an IP address"},
		{in: "udp://127.0.0.1:05000", want: "want 1..65535"},
		{in: "udp://127.0.0.1", want: "a udp URL needs its port"},
		{in: "tcp://127.0.0.1:9001", want: "is not allowed (--stream-allow lets in tcp://*:9000"},
		{in: "/etc/passwd", want: "want scheme://host:port"},
		{in: out, more: map[string]any{"idle_timeout": 1e10}, want: `field "idle_timeout": 1e+10: want seconds in 0..3600`},
		{in: out, more: map[string]any{"idle_timeout": -1}, want: `field "idle_timeout"`},
		{in: out, more: map[string]any{"max_latency": 1e10}, want: `field "max_latency": 1e+10: want seconds in 0..60`},
		{in: out, more: map[string]any{"crf": 99}, want: `field "crf": want -1..63`},
		{in: out, more: map[string]any{"codec": "libx264 -f tee"}, want: `field "codec": "libx264 -f tee" is not a name`},
		{in: out, more: map[string]any{"preset": "a|b"}, want: `field "preset"`},
		{in: out, more: map[string]any{"container": "flv"}, want: `a udp output takes mpegts, matroska, nut`},
		{in: out, more: map[string]any{"model": "bogus"}, want: "unknown model"},
	} {
		body := map[string]any{"input": c.in, "output": out}
		for k, v := range c.more {
			body[k] = v
		}
		if code, m, _ := e.do("POST", "/v1/streams", body); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), c.want) {
			t.Errorf("%q %v: %d %v, want 400 with %q", c.in, c.more, code, m, c.want)
		}
	}
	for _, c := range []struct {
		in, out, wantIn, wantOut string
		formats, opts            []string
	}{
		{"UDP://127.0.0.1:5000?pkt_size=1316", out, "udp://127.0.0.1:5000?pkt_size=1316", out, []string{"mpegts", "matroska", "nut"}, nil},
		{"tcp://example.com:9000", "rtmp://127.0.0.1/live/key", "tcp://example.com:9000", "rtmp://127.0.0.1:1935/live/key", nil, nil},
		{"tcp://example.com:9000", "udp://[::ffff:127.0.0.1]:5000", "tcp://example.com:9000", out, nil, nil},
		{"srt://127.0.0.1:7000?mode=caller&latency=200000", out, "srt://127.0.0.1:7000?mode=caller&latency=200000", out, nil, nil},
		// An http source of a named host follows no redirect and is no
		// playlist; one from any host may be.
		{"http://127.0.0.1:8080/live.ts", out, "http://127.0.0.1:8080/live.ts", out, []string{"mpegts", "matroska", "nut", "flv"}, []string{"max_redirects=0"}},
		{"http://cdn.example.com:8081/live.ts", out, "http://cdn.example.com:8081/live.ts", out, []string{"mpegts", "matroska", "nut", "flv"}, []string{"max_redirects=0"}},
		{"https://cdn.example.com/live.m3u8", out, "https://cdn.example.com:443/live.m3u8", out, []string{"mpegts", "matroska", "nut", "flv", "hls", "dash"}, nil},
	} {
		code, m, _ := e.do("POST", "/v1/streams", map[string]any{"input": c.in, "output": c.out})
		if code != 201 {
			t.Errorf("%s -> %s: %d %v", c.in, c.out, code, m)
			continue
		}
		ls := f.last()
		if ls.Request.Input != c.wantIn || ls.Request.Output != c.wantOut {
			t.Errorf("%s -> %s reached the runner as %s -> %s, want %s -> %s", c.in, c.out, ls.Request.Input, ls.Request.Output, c.wantIn, c.wantOut)
		}
		if c.formats != nil && !slices.Equal(ls.InputFormats, c.formats) || !slices.Equal(ls.InputOptions, c.opts) {
			t.Errorf("%s: demuxers %v, options %v; want %v, %v", c.in, ls.InputFormats, ls.InputOptions, c.formats, c.opts)
		}
		if ls.Request.Container == "" {
			t.Errorf("%s: no container", c.out)
		}
		e.do("DELETE", "/v1/streams/"+m["stream_id"].(string), nil)
	}
}

// TestStreamListen: a session listens only where a rule says ?listen; a
// udp or rtp input always listens (ffmpeg binds 0.0.0.0:port, rtp
// port+1 too, and takes packets from any sender), so it needs such a rule
// (issue 35: one was let in by udp://127.0.0.1).
func TestStreamListen(t *testing.T) {
	f := &streamFake{fakeRunner: newFake(false)}
	e := newEnv(t, Config{StreamAllow: []string{"tcp://127.0.0.1:9100?listen", "tcp://127.0.0.1:9200", "srt://[::1]:7000?listen=1", "udp://127.0.0.1",
		"udp://127.0.0.1:6000?listen", "rtp://127.0.0.1", "rtp://127.0.0.1:6100?listen"}}, f)
	for in, want := range map[string]int{"tcp://127.0.0.1:9100?listen=1": 201, "tcp://127.0.0.1:9200?listen=1": 400, "tcp://127.0.0.1:9200": 201,
		"srt://[::1]:7000?mode=listener": 201, "srt://[0:0::1]:7000?mode=caller": 201, "srt://127.0.0.1:7000?mode=listener": 400,
		"udp://127.0.0.1:5000": 400, "udp://127.0.0.1:6000": 201, "rtp://127.0.0.1:5000": 400, "rtp://127.0.0.1:6100": 201} {
		code, m, _ := e.do("POST", "/v1/streams", map[string]any{"input": in, "output": "udp://127.0.0.1:5000"})
		if code != want {
			t.Errorf("%s: %d %v, want %d", in, code, m, want)
		}
		if code == 400 && strings.HasPrefix(in, "udp") && !strings.Contains(fmt.Sprint(m["error"]), "a udp input listens on its port") {
			t.Errorf("%s: %v", in, m)
		}
		if code == 201 {
			e.do("DELETE", "/v1/streams/"+m["stream_id"].(string), nil)
		}
	}
}

// TestStreamAllowRules: --stream-allow entries are parsed as the URLs are.
func TestStreamAllowRules(t *testing.T) {
	for _, c := range []struct{ rule, want string }{
		{"rtsp://127.0.0.1:554", "allow them only as rtsp://*"},
		{"tcp://127.0.0.1:9000:9001", "more than one ':'"},
		{"tcp://127.0.0.1?localport=1", "the only option a rule takes is ?listen"},
		{"tcp://u:p@127.0.0.1", "user:password@"},
		{"tcp://127.0.0.1/path", "want scheme://host"},
		{"file://x", "want scheme://host:port with a scheme of"},
	} {
		if _, err := New(Config{Data: t.TempDir(), StreamAllow: []string{c.rule}}, newFake(false)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--stream-allow %s: %v, want %q", c.rule, err, c.want)
		}
	}
}

// TestStreamSecretsRedacted: passwords, SRT passphrases, rtmp stream keys
// and the values of secret-named options are in no API answer (create,
// get, list, stop, a failed session's error, a 400) nor the log, while the
// runner gets them.
func TestStreamSecretsRedacted(t *testing.T) {
	f := &streamFake{fakeRunner: newFake(false)}
	var log syncBuffer
	e := newEnv(t, Config{StreamAllow: []string{"rtmp://127.0.0.1", "srt://127.0.0.1", "udp://127.0.0.1"},
		Logger: slog.New(slog.NewTextHandler(&log, nil))}, f)
	const pass, phrase, key, token = "hunter2secret", "s3cretphrase99", "streamkey1234", "tok3nvalue77"
	secrets := []string{pass, phrase, key, token}
	in, out := "srt://127.0.0.1:7000?passphrase="+phrase, "rtmp://bob:"+pass+"@127.0.0.1/live/"+key
	var answers []any
	check := func(what string, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		for _, x := range secrets {
			if bytes.Contains(b, []byte(x)) {
				t.Errorf("%s shows a secret: %s", what, b)
			}
		}
		answers = append(answers, v)
	}
	_, m, _ := e.do("POST", "/v1/streams", map[string]any{"input": in, "output": out})
	check("POST", m)
	id, _ := m["stream_id"].(string)
	if got := f.last().Request; got.Input != in || got.Output != "rtmp://bob:"+pass+"@127.0.0.1:1935/live/"+key {
		t.Errorf("the runner got %s -> %s", got.Input, got.Output)
	}
	_, m, _ = e.do("GET", "/v1/streams/"+id, nil)
	check("GET", m)
	if r, _ := m["request"].(map[string]any); r["output"] != "rtmp://bob:xxxxx@127.0.0.1:1935/live/xxxxx" || r["input"] != "srt://127.0.0.1:7000?passphrase=xxxxx" {
		t.Errorf("GET shows %v", r)
	}
	_, m, _ = e.do("GET", "/v1/streams", nil)
	check("GET list", m)
	_, m, _ = e.do("DELETE", "/v1/streams/"+id, nil)
	check("DELETE", m)
	f.fail = true
	_, m, _ = e.do("POST", "/v1/streams", map[string]any{"input": in, "output": out})
	m = waitStream(e, m["stream_id"].(string))
	check("a failed session", m)
	if m["status"] != "failed" || !strings.Contains(fmt.Sprint(m["error"]), "rtmp://bob:xxxxx@127.0.0.1:1935/live/xxxxx: Connection refused") {
		t.Errorf("a failed session: %v", m)
	}
	code, m, _ := e.do("POST", "/v1/streams", map[string]any{"input": in, "output": "rtmp://bob:" + pass + "@10.0.0.1/live/" + key})
	check("a refused URL", m)
	if code != 400 {
		t.Errorf("a URL no rule lists: %d %v", code, m)
	}
	for _, bad := range []struct{ field, url string }{
		{"output", "rtmp://bob:" + pass + "@127.0.0.1/live/x|y"},
		{"output", "rtmp://bob:" + pass + "/x@127.0.0.1/live|y"},
		{"output", "rtmp://127.0.0.1/live/" + key + "|y"},
		{"output", "rtmp://127.0.0.1/live/a b/" + key},
		// issue 35: the passphrase was quoted in the refusal of another option
		{"input", "srt://127.0.0.1:9000?passphrase=" + phrase + "&foo=1"},
		{"input", "srt://127.0.0.1:9000?passphrase=" + phrase + "|"},
		{"input", "udp://127.0.0.1:9000?api_token=" + token},
	} {
		body := map[string]any{"input": in, "output": out}
		body[bad.field] = bad.url
		code, m, _ = e.do("POST", "/v1/streams", body)
		check("a URL that does not parse", m)
		if code != 400 || !strings.Contains(fmt.Sprint(m["error"]), "xxxxx") {
			t.Errorf("%s: %d %v", bad.url, code, m)
		}
	}
	if len(answers) != 13 {
		t.Errorf("%d answers checked", len(answers))
	}
	for _, x := range secrets {
		if strings.Contains(log.String(), x) {
			t.Errorf("the log shows a secret:\n%s", log.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStreamClipLen: clip_len is bounded (SwiftVR holds clip_len+4 frames
// at once), for file tasks and live sessions alike (issue 35: 400000000
// was accepted).
func TestStreamClipLen(t *testing.T) {
	e := newEnv(t, Config{StreamAllow: []string{"udp://127.0.0.1?listen"}}, &streamFake{fakeRunner: newFake(false)})
	e.input("a.mp4")
	for _, params := range []map[string]any{{"clip_len": 400000000}, {"clip_len": MaxClipLen + 4}} {
		code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "params": params})
		wantError(t, fmt.Sprintf("a task with %v", params), code, m, 400, `field "clip_len"`)
		code, m, _ = e.do("POST", "/v1/streams", map[string]any{"input": "udp://127.0.0.1:5000", "output": "udp://127.0.0.1:5001", "params": params})
		wantError(t, fmt.Sprintf("a stream with %v", params), code, m, 400, `field "clip_len"`)
	}
}

// TestStreamPlaylistURLs: an HLS or DASH output names its playlist in the
// last element of its path and has no user:password, so that its segments
// go beside it (issue 35: with a rule for http://localhost:8080, the
// segments of these went to port 9000 and 9001).
func TestStreamPlaylistURLs(t *testing.T) {
	f := &streamFake{fakeRunner: newFake(false)}
	e := newEnv(t, Config{StreamAllow: []string{"udp://127.0.0.1?listen", "http://localhost:8080"}}, f)
	for _, c := range []struct{ out, container, want string }{
		{"http://127.0.0.1:900.@localhost:8080/live", "hls", "name.m3u8"},
		{"http://127.0.0.1:9000.@localhost:8080", "dash", "name.mpd"},
		{"http://localhost:8080/live.m3u8", "dash", "name.mpd"},
		{"http://localhost:8080/.m3u8", "hls", "name.m3u8"},
		{"http://localhost:8080/live.m3u8/", "hls", "name.m3u8"},
		{"http://bob:pw@localhost:8080/live.m3u8", "hls", "no user:password"},
	} {
		code, m, _ := e.do("POST", "/v1/streams", map[string]any{"input": "udp://127.0.0.1:5000", "output": c.out, "container": c.container})
		wantError(t, c.out, code, m, 400, c.want)
	}
	for _, c := range []struct{ out, container string }{
		{"http://localhost:8080/d/live.m3u8", "hls"}, {"http://localhost:8080/LIVE.M3U8", "hls"}, {"http://localhost:8080/d/live.mpd", "dash"},
		{"http://localhost:8080/live", "mpegts"},
	} {
		code, m, _ := e.do("POST", "/v1/streams", map[string]any{"input": "udp://127.0.0.1:5000", "output": c.out, "container": c.container})
		if code != 201 {
			t.Errorf("%s (%s): %d %v", c.out, c.container, code, m)
			continue
		}
		e.do("DELETE", "/v1/streams/"+m["stream_id"].(string), nil)
	}
}

// TestStreamOutputBudget: a live session asking for a size over
// --max-output-pixels is refused as a task is, and the runner gets the
// budget to check the model's output once the source's size is known
// (issue 35: {"params":{"size":[16384,16384]}} was accepted).
func TestStreamOutputBudget(t *testing.T) {
	f := &streamFake{fakeRunner: newFake(false)}
	e := newEnv(t, Config{StreamAllow: []string{"udp://127.0.0.1?listen"}, MaxOutputPixels: 1920 * 1080}, f)
	body := func(size []int) map[string]any {
		return map[string]any{"input": "udp://127.0.0.1:5000", "output": "udp://127.0.0.1:5001", "params": map[string]any{"size": size}}
	}
	code, m, _ := e.do("POST", "/v1/streams", body([]int{16384, 16384}))
	wantError(t, "16384x16384", code, m, 400, "over this server's limit of 2073600 (vsr serve --max-output-pixels)")
	code, m, _ = e.do("POST", "/v1/streams", body([]int{1080, 1920}))
	if code != 201 {
		t.Fatalf("1920x1080: %d %v", code, m)
	}
	if got := f.last().MaxOutputPixels; got != 1920*1080 {
		t.Errorf("the runner got a budget of %d", got)
	}
	e.do("DELETE", "/v1/streams/"+m["stream_id"].(string), nil)
}
