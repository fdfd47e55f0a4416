package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// send sends a request with the given Host (empty: the server's) and
// headers, and returns the status and the decoded JSON answer.
func (e *env) send(method, path, host string, hdr map[string]string, body string) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	m := map[string]any{}
	if json.Unmarshal(data, &m) != nil {
		m["_body"] = string(data)
	}
	return resp.StatusCode, m
}

// uploadBody is a multipart upload of a video file part and
// save_result_path out, and its Content-Type.
func uploadBody(out string) (string, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("save_result_path", out)
	fw, _ := mw.CreateFormFile("video", "clip.mp4")
	fw.Write([]byte("video"))
	mw.Close()
	return buf.String(), mw.FormDataContentType()
}

// TestHostAllowList: a Host header that names neither an IP address, nor
// localhost, nor a --public-host (what a DNS name rebound to the machine
// sends) gets 421 on the task list, a result and the page; the health
// checks answer whatever the Host.
func TestHostAllowList(t *testing.T) {
	e := newEnv(t, Config{PublicHosts: []string{"vsr.example", "Proxy.Example.:8443"}}, newFake(false))
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4"})
	e.wait(id, Completed)
	u, _ := url.Parse(e.srv.URL)
	port := u.Port()
	for _, host := range []string{"evil.example:" + port, "evil.example", "proxy.example:80", "vsr.example.evil.example:" + port,
		"localhost.evil.example:" + port, "127.0.0.1.evil.example"} {
		for _, path := range []string{"/v1/tasks/", "/v1/tasks/" + id + "/result", "/v1/tasks/" + id + "/status", "/"} {
			code, m := e.send("GET", path, host, nil, "")
			wantError(t, "GET "+path+" with Host "+host, code, m, http.StatusMisdirectedRequest, "--public-host")
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "LOCALHOST.", "app.localhost:" + port,
		"10.1.2.3", "[fe80::1]:80", "vsr.example:" + port, "VSR.example", "proxy.example:8443"} {
		if code, m := e.send("GET", "/v1/tasks/"+id+"/result", host, nil, ""); code != 200 {
			t.Errorf("GET the result with Host %s: %d %v, want 200", host, code, m)
		}
	}
	if code, m := e.send("GET", "/healthz", "evil.example", nil, ""); code != 200 {
		t.Errorf("GET /healthz with Host evil.example: %d %v, want 200", code, m)
	}
	for _, bad := range []string{"https://vsr.example/", "vsr.example:0", "vsr.example:http", "*.example", ""} {
		if _, err := New(Config{Data: t.TempDir(), PublicHosts: []string{bad}}, newFake(false)); err == nil || !strings.Contains(err.Error(), "--public-host") {
			t.Errorf("--public-host %q: %v, want a refusal naming the flag", bad, err)
		}
	}
}

// TestBrowserRequestsRefused: what a page of another site can send
// without asking first (a CORS simple request: text/plain, form-urlencoded
// or multipart bodies, no custom headers), or any request that says it
// comes from another origin, is refused and creates nothing; the
// service's own page, a reverse proxy's public name and clients that send
// no Origin (curl) pass.
func TestBrowserRequestsRefused(t *testing.T) {
	f := &streamFake{fakeRunner: newFake(false)}
	e := newEnv(t, Config{PublicHosts: []string{"vsr.example"}, StreamAllow: []string{"udp://127.0.0.1?listen"}}, f)
	e.input("a.mp4")
	task := `{"video_path": "a.mp4", "save_result_path": "x.mp4"}`
	stream := fmt.Sprintf(`{"input": "udp://127.0.0.1:%d", "output": "udp://127.0.0.1:%d"}`, freeLoopbackPort(t), freeLoopbackPort(t))
	up, upType := uploadBody("up.mp4")
	other := "http://127.0.0.1:1" // a page on another port of the same machine
	for _, c := range []struct {
		path, body string
		hdr        map[string]string
		code       int
	}{
		{"/v1/tasks/video/", task, map[string]string{"Content-Type": "text/plain"}, 415},
		{"/v1/tasks/video/", task, map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": other}, 403},
		{"/v1/tasks/video/", task, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"/v1/tasks/video/", task, nil, 415},
		{"/v1/tasks/", task, map[string]string{"Content-Type": "multipart/form-data; boundary=B"}, 415},
		{"/v1/tasks/video", task, map[string]string{"Content-Type": "application/json", "Origin": other}, 403},
		{"/v1/tasks/video/", task, map[string]string{"Content-Type": "application/json", "Origin": "null"}, 403},
		{"/v1/tasks/video/", task, map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403},
		{"/v1/streams", stream, map[string]string{"Content-Type": "text/plain"}, 415},
		{"/v1/streams", stream, map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, 403},
		{"/v1/tasks/video/upload", up, map[string]string{"Content-Type": upType, "Origin": other}, 403},
		{"/v1/tasks/video/upload", up, map[string]string{"Content-Type": upType, "Sec-Fetch-Site": "cross-site"}, 403},
		{"/v1/tasks/video/upload", up, map[string]string{"Content-Type": upType, "Origin": "http://vsr.example.evil.example"}, 403},
		{"/v1/tasks/video/upload", up, map[string]string{"Content-Type": "text/plain"}, 415},
	} {
		code, m := e.send("POST", c.path, "", c.hdr, c.body)
		wantError(t, fmt.Sprintf("POST %s %v", c.path, c.hdr), code, m, c.code, "")
	}
	if _, m, _ := e.do("GET", "/v1/tasks/", nil); len(m) != 0 {
		t.Errorf("the refused requests made tasks: %v", m)
	}
	if _, m, _ := e.do("GET", "/v1/streams", nil); fmt.Sprint(m["streams"]) != "[]" {
		t.Errorf("the refused requests made live sessions: %v", m)
	}

	own := e.srv.URL
	for i, hdr := range []map[string]string{
		{"Content-Type": "application/json; charset=utf-8", "Origin": own, "Sec-Fetch-Site": "same-origin"},
		{"Content-Type": "application/json", "Origin": "https://vsr.example"}, // behind a proxy that rewrites Host
		{"Content-Type": "application/json", "Sec-Fetch-Site": "none"},        // typed in the address bar
		{"Content-Type": "application/json"},                                  // curl
	} {
		body := fmt.Sprintf(`{"video_path": "a.mp4", "save_result_path": "ok%d.mp4"}`, i)
		if code, m := e.send("POST", "/v1/tasks/video/", "", hdr, body); code != 200 {
			t.Errorf("POST a task with %v: %d %v, want 200", hdr, code, m)
		}
	}
	for _, hdr := range []map[string]string{{"Origin": own, "Sec-Fetch-Site": "same-origin"}, {}} {
		up, upType := uploadBody(fmt.Sprintf("up%d.mp4", len(hdr)))
		hdr["Content-Type"] = upType
		if code, m := e.send("POST", "/v1/tasks/video/upload", "", hdr, up); code != 200 {
			t.Errorf("upload with %v: %d %v, want 200", hdr, code, m)
		}
	}
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "gone.mp4"})
	e.wait(id, Completed)
	code, m := e.send("DELETE", "/v1/tasks/"+id+"/record", "", map[string]string{"Origin": other}, "")
	wantError(t, "DELETE from another origin", code, m, 403, "Origin")
	if code, m := e.send("DELETE", "/v1/tasks/"+id+"/record", "", map[string]string{"Origin": own}, ""); code != 200 {
		t.Errorf("DELETE with no body from the page: %d %v, want 200", code, m)
	}
}

// TestTrickledJSONTail: a JSON object that arrives whole but whose body
// goes on past the body timeout (white space trickled, or a Content-Length
// longer than what is sent) gets 408, as any body that does not arrive in
// time, not 400.
func TestTrickledJSONTail(t *testing.T) {
	_, addr, _, _ := serveEnv(t, Config{BodyTimeout: 300 * time.Millisecond}, newFake(false))
	obj := `{"video_path": "a.mp4", "save_result_path": "x.mp4"}`
	for _, tail := range []string{"", strings.Repeat(" ", 20)} {
		// The object at once; then the tail a byte every 50 ms, and 3
		// bytes that never come.
		head := fmt.Sprintf("POST /v1/tasks/video/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			len(obj)+len(tail)+3, obj)
		start := time.Now()
		line, err := rawStatus(addr, head, tail, 50*time.Millisecond)
		if err != nil || !strings.Contains(line, "408") || time.Since(start) > 3*time.Second {
			t.Errorf("a tail of %d bytes trickled: %q %v after %v, want 408", len(tail), line, err, time.Since(start))
		}
	}
}
