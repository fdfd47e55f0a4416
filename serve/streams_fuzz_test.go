package serve

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
)

// ffmpegSplit reads a URL as ffmpeg's av_url_split does (libavformat
// utils.c): the authority ends at the first '/', '?' or '#', the user at
// its last '@', an IPv6 host is in [ ], else the port follows the first
// ':' and is read as atoi reads it.
func ffmpegSplit(url string) (proto, host string, port int) {
	p := strings.IndexByte(url, ':')
	if p < 0 {
		return "", "", -1
	}
	proto, rest := url[:p], url[p+1:]
	rest = strings.TrimPrefix(strings.TrimPrefix(rest, "/"), "/")
	ls := strings.IndexAny(rest, "/?#")
	if ls < 0 {
		ls = len(rest)
	}
	auth := rest[:ls]
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		auth = auth[at+1:]
	}
	atoi := func(s string) int {
		n := 0
		for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			n = n*10 + int(s[i]-'0')
		}
		return n
	}
	port = -1
	if brk := strings.IndexByte(auth, ']'); strings.HasPrefix(auth, "[") && brk > 0 {
		host = auth[1:brk]
		if strings.HasPrefix(auth[brk+1:], ":") {
			port = atoi(auth[brk+2:])
		}
	} else if col := strings.IndexByte(auth, ':'); col >= 0 {
		host, port = auth[:col], atoi(auth[col+1:])
	} else {
		host = auth
	}
	return proto, host, port
}

// FuzzStreamRequest: the live session decoder and checks never panic, and
// what they accept is, as ffmpeg reads the URL it is given, a scheme, host
// and port an allow rule lists, with only allowed options and none of the
// characters that let ffmpeg read more into a URL; answers show no
// secret. Seeded with the tricks of issue 35 (the seeds run in every go
// test; go test -run NONE -fuzz FuzzStreamRequest -fuzztime 60s ./serve/
// explores).
func FuzzStreamRequest(f *testing.F) {
	for _, s := range []string{
		`{"input":"udp://127.0.0.1:5000","output":"udp://127.0.0.1:5000/x.ts|[f=mpegts]/etc/passwd","container":"tee"}`,
		`{"input":"udp://127.0.0.1:5000","output":"udp://127.0.0.1:5000|[f=mpegts]tcp://127.0.0.1:9999","container":"tee"}`,
		`{"input":"tcp://127.0.0.1:9001:9000","output":"udp://127.0.0.1:5000"}`,
		`{"input":"udp://127.0.0.1:5000?localport=7777","output":"udp://127.0.0.1:5000"}`,
		`{"input":"udp://127.0.0.1:5000","output":"udp://127.0.0.1:5000","idle_timeout":1e10,"max_latency":1e300}`,
		`{"input":"http://127.0.0.1:8080/a.m3u8","output":"http://u:p@127.0.0.1:8080/o.m3u8","container":"hls"}`,
		`{"input":"tcp://[::1]:9000?listen=1","output":"srt://127.0.0.1:7000?mode=listener&passphrase=abcdefghij"}`,
		`{"input":"tcp://127.0.0.1:9000","output":"http://127.0.0.1:900.@localhost:8080/live","container":"hls"}`,
		`{"input":"tcp://127.0.0.1:9000","output":"http://127.0.0.1:9000.@localhost:8080","container":"dash"}`,
		`{"input":"tcp://a@b@127.0.0.1:9000","output":"rtmp://u:p:q@127.0.0.1/app/key"}`,
		`{"input":"tcp://[::ffff:127.0.0.1]:9000","output":"udp://127.0.0.1:5000?pkt_size=1316&ttl=2"}`,
		`{"input":"tcp://127.0.0.1:9000/x?timeout=1#f","output":"udp://0x7f.1:5000","crf":99,"codec":"x;y"}`,
	} {
		f.Add([]byte(s))
	}
	svc, err := New(Config{Data: f.TempDir(), StreamAllow: []string{"tcp://*:9000", "udp://127.0.0.1?listen", "udp://[::1]", "srt://127.0.0.1:7000?listen",
		"rtmp://127.0.0.1", "http://127.0.0.1:8080", "http://localhost:8080", "tcp://[::1]:9000?listen"}}, newFake(false))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Close() })
	api := svc.newAPI()
	f.Fuzz(func(t *testing.T, body []byte) {
		var q StreamRequest
		if _, err := decodeRequest(bytes.NewReader(body), &q); err != nil {
			return
		}
		ls, shown, redact, err := api.checkStream(context.Background(), q)
		if err != nil {
			return
		}
		for i, url := range []string{ls.Request.Input, ls.Request.Output} {
			if strings.ContainsAny(url, "|# \t\r\n\x00%\\") {
				t.Fatalf("accepted %q", url)
			}
			proto, host, port := ffmpegSplit(url)
			ok := false
			for _, r := range svc.allow {
				hostOK := r.host == "*" || r.host == host
				if a, b := net.ParseIP(r.host), net.ParseIP(host); a != nil && b != nil {
					hostOK = a.Equal(b)
				}
				listens := i == 0 && (proto == "udp" || proto == "rtp") // binds 0.0.0.0:port
				ok = ok || r.scheme == proto && hostOK && port > 0 && (r.port == 0 || r.port == port) && (r.canListen || !listens)
			}
			if !ok {
				t.Fatalf("ffmpeg reads %q as %s://%s:%d, which no rule lists", url, proto, host, port)
			}
			if strings.Count(url, "[") != strings.Count(url, "]") || strings.Count(url, "[") > 1 || strings.Count(url, "?") > 1 {
				t.Fatalf("accepted %q", url)
			}
			if _, query, ok := strings.Cut(url, "?"); ok {
				for _, kv := range strings.Split(query, "&") {
					k, _, _ := strings.Cut(kv, "=")
					if _, ok := streamOptions[proto][k]; !ok {
						t.Fatalf("accepted option %q in %q", k, url)
					}
				}
			}
			if u, err := parseStreamURL(url, false); err != nil || u.String() != url {
				t.Fatalf("the rebuilt %q does not rebuild to itself: %v", url, err)
			}
		}
		msg := redact("ffmpeg: " + ls.Request.Input + ": failed; " + ls.Request.Output + ": failed")
		for _, url := range []string{ls.Request.Input, ls.Request.Output} {
			u, _ := parseStreamURL(url, false)
			for _, x := range u.secrets() {
				if strings.Contains(msg, x) && strings.Trim(x, "x") != "" {
					t.Fatalf("a message on %s -> %s reads %q redacted, with %q", ls.Request.Input, ls.Request.Output, msg, x)
				}
			}
		}
		if ext := playlistExt[ls.Request.Container]; ext != "" {
			// Segments are named from the playlist's name (video.LiveEncoder).
			u, _ := parseStreamURL(ls.Request.Output, false)
			if name := u.path[strings.LastIndexByte(u.path, '/')+1:]; u.user != "" || len(name) <= len(ext) || !strings.HasSuffix(strings.ToLower(name), ext) {
				t.Fatalf("accepted %s output %q", ls.Request.Container, ls.Request.Output)
			}
		}
		if q.IdleTimeout > maxIdleTimeout || q.MaxLatency > maxLatency {
			t.Fatalf("accepted %+v", q)
		}
		for _, url := range []string{shown.Input, shown.Output} {
			u, err := parseStreamURL(url, false)
			if err != nil || u.hasPass && u.pass != "xxxxx" || slices.ContainsFunc(u.secrets(), func(s string) bool { return s != "xxxxx" }) {
				t.Fatalf("shown as %q: %v", url, err)
			}
		}
	})
}
