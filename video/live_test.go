package video

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// freeUDPPort returns a UDP port free on loopback now.
func freeUDPPort(t testing.TB) int {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// publish starts an ffmpeg that sends a test pattern with a tone at real
// time speed for seconds to url as MPEG-TS.
func publish(t testing.TB, url string, seconds float64, size string) *exec.Cmd {
	ffmpeg := needFFmpeg(t)
	cmd := exec.Command(ffmpeg, "-hide_banner", "-loglevel", "error", "-re",
		"-f", "lavfi", "-i", "testsrc=size="+size+":rate=24", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000",
		"-t", fmt.Sprint(seconds), "-c:v", "libx264", "-preset", "ultrafast", "-g", "12", "-c:a", "aac", "-f", "mpegts", url)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestLiveRoundTrip: frames and audio of a UDP stream published at real
// time come out of a LiveDecoder in order with their times, and a
// LiveEncoder writes them as HLS whose playlist ends with its end tag.
func TestLiveRoundTrip(t *testing.T) {
	ctx := testCtx(t)
	port := freeUDPPort(t)
	dec, err := OpenLive(ctx, LiveInput{URL: fmt.Sprintf("udp://127.0.0.1:%d", port)})
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	time.Sleep(300 * time.Millisecond) // the reader listens
	pub := publish(t, fmt.Sprintf("udp://127.0.0.1:%d?pkt_size=1316", port), 2, "64x48")
	go func() { pub.Wait(); time.Sleep(time.Second); dec.Stop() }() // an idle source ends the stream
	if err := dec.Header(); err != nil {
		t.Fatal(err)
	}
	w, h := dec.Size()
	if w != 64 || h != 48 || dec.AudioTrack() == nil {
		t.Fatalf("size %dx%d, audio %v", w, h, dec.AudioTrack() != nil)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.m3u8")
	enc, err := NewLiveEncoder(ctx, LiveOutput{URL: out, Encode: EncodeOptions{Width: w, Height: h, CRF: -1, Preset: "ultrafast"}, Audio: dec.AudioTrack()})
	if err != nil {
		t.Fatal(err)
	}
	var frames, audio int
	last := int64(-1)
	for {
		p, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Audio {
			audio++
			if err := enc.WriteAudio(p.NS, p.Key, p.Data); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if p.NS <= last {
			t.Errorf("frame %d at %d ns after %d", frames, p.NS, last)
		}
		last = p.NS
		frames++
		if err := enc.WriteFrame(p.NS, p.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d frames, %d audio packets, last at %v", frames, audio, time.Duration(last))
	if frames < 40 || audio < 40 {
		t.Errorf("%d frames, %d audio packets of 2 s", frames, audio)
	}
	pl, _ := os.ReadFile(out)
	if !strings.Contains(string(pl), "#EXT-X-ENDLIST") {
		t.Errorf("playlist without its end tag:\n%s", pl)
	}
	info, err := ProbeWith(ctx, out, ProbeOptions{AllowPlaylists: true}) // the playlist vsr wrote
	if err != nil {
		t.Fatal(err)
	}
	if info.Frames != frames || !info.HasAudio {
		t.Errorf("the HLS output has %d frames (audio %v), %d written", info.Frames, info.HasAudio, frames)
	}
}

// TestLiveInputWhitelists: a live input given Formats refuses a source
// that turns out to be a playlist (whose segments name another port), and
// one given max_redirects=0 follows no HTTP redirect: in neither case is
// the other port reached.
func TestLiveInputWhitelists(t *testing.T) {
	needFFmpeg(t)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	reached := make(chan bool, 4)
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			reached <- true
			c.Close()
		}
	}()
	serve := func(reply string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				c.Read(make([]byte, 4096))
				io.WriteString(c, reply)
				c.Close()
			}
		}()
		return l.Addr().String()
	}
	seg := fmt.Sprintf("http://%s/seg.ts", other.Addr())
	m3u8 := "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\n" + seg + "\n#EXT-X-ENDLIST\n"
	playlist := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/vnd.apple.mpegurl\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(m3u8), m3u8)
	redirect := fmt.Sprintf("HTTP/1.1 302 Found\r\nLocation: http://%s/x.ts\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", other.Addr())
	for _, in := range []LiveInput{
		{URL: "http://" + serve(playlist) + "/live.m3u8", Protocols: []string{"http", "tcp"}, Formats: []string{"mpegts", "matroska", "nut", "flv"}},
		{URL: "http://" + serve(redirect) + "/live.ts", Protocols: []string{"http", "tcp"}, Options: []string{"max_redirects=0"}},
	} {
		dec, err := OpenLive(testCtx(t), in)
		if err != nil {
			t.Fatal(err)
		}
		if err := dec.Header(); err == nil {
			t.Errorf("%s: read a header", in.URL)
		} else {
			t.Logf("%s: %v", in.URL, err)
		}
		dec.Close()
		select {
		case <-reached:
			t.Errorf("%s: ffmpeg reached %s", in.URL, other.Addr())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestLiveSegmentsBesidePlaylist: the segments of an HLS or DASH output
// to a URL go to the playlist's host, port and folder, named after it,
// whatever its URL holds (issue 35: ffmpeg named HLS segments by cutting
// the whole URL at its last '.', and DASH's from the URL's last '/', so
// that http://127.0.0.1:P.@localhost:S/live sent them to port P0 and
// http://127.0.0.1:P.@127.0.0.1:S to port P).
func TestLiveSegmentsBesidePlaylist(t *testing.T) {
	needFFmpeg(t)
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, r.URL.Path)
		mu.Unlock()
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	// A victim on a port P0 (P0+1 too), which the tricks aimed at.
	var victim net.Listener
	for p := 20000; victim == nil && p < 65500; p += 1230 {
		victim, _ = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	}
	if victim == nil {
		t.Skip("no free port to be the victim")
	}
	defer victim.Close()
	reached := make(chan bool, 8)
	go func() {
		for {
			c, err := victim.Accept()
			if err != nil {
				return
			}
			reached <- true
			c.Close()
		}
	}()
	vp := victim.Addr().(*net.TCPAddr).Port
	for _, c := range []struct {
		url, format string
		want        []string // paths the server must see; nil: the output is refused
	}{
		{"http://127.0.0.1:" + port + "/d/live.m3u8", "hls", []string{"/d/live.m3u8", "/d/live0.ts"}},
		{"http://127.0.0.1:" + port + "/d/live.mpd", "dash", []string{"/d/live.mpd", "/d/live-init-0.m4s", "/d/live-0-00001.m4s"}},
		{fmt.Sprintf("http://127.0.0.1:%d.@localhost:%s/live", vp/10, port), "hls", []string{"/live", "/live0.ts"}},
		{fmt.Sprintf("http://127.0.0.1:%d.@127.0.0.1:%s", vp, port), "dash", nil},
		{"http://127.0.0.1:" + port + "/d/live.m3u8?x=1", "hls", nil},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		enc, err := NewLiveEncoder(testCtx(t), LiveOutput{URL: c.url, Format: c.format,
			Encode: EncodeOptions{Width: 64, Height: 48, CRF: -1, Preset: "ultrafast"}})
		if err == nil {
			for i := range 5 {
				enc.WriteFrame(int64(i)*40e6, make([]byte, enc.FrameSize()))
			}
			err = enc.Close()
		}
		mu.Lock()
		paths := slices.Clone(got)
		mu.Unlock()
		switch {
		case c.want == nil && err == nil:
			t.Errorf("%s (%s): written, to %v", c.url, c.format, paths)
		case c.want != nil && err != nil:
			t.Errorf("%s (%s): %v", c.url, c.format, err)
		}
		for _, p := range c.want {
			if !slices.Contains(paths, p) {
				t.Errorf("%s (%s): the server got %v, want %s among them", c.url, c.format, paths, p)
			}
		}
		select {
		case <-reached:
			t.Errorf("%s (%s): ffmpeg reached port %d", c.url, c.format, vp)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestLiveSourceLimits: a live source whose frames are over
// DefaultLimits is refused at its header, as a file input is, before a
// frame is read (issue 35: live sessions skipped the limits).
func TestLiveSourceLimits(t *testing.T) {
	needFFmpeg(t)
	for _, size := range []string{"16400x2", "2x16400"} {
		var w, h int
		fmt.Sscanf(size, "%dx%d", &w, &h)
		dec, err := OpenLive(testCtx(t), LiveInput{URL: "-", Format: "rawvideo", Options: []string{"video_size=" + size, "pixel_format=gray"},
			Stdin: io.LimitReader(zeros{}, int64(2*w*h))})
		if err != nil {
			t.Fatal(err)
		}
		err = dec.Header()
		dec.Close()
		if err == nil || !strings.Contains(err.Error(), "over the limit") {
			t.Errorf("a %s source: %v", size, err)
		}
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
