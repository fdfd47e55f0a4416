package serve_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// elsewherePage is a page of another site (another port of the same
// machine) that tries to drive the API at %[1]s without a token, with
// what a page may send anywhere without asking first: fetch() in no-cors
// mode with text/plain, form-urlencoded and multipart bodies, and forms
// (text/plain, form-urlencoded, multipart with a file) submitted into
// frames. window.done gets what became of each: "answered" (a fetch got
// an answer), "loaded" (a frame left about:blank for the API's answer)
// or an error.
const elsewherePage = `<!doctype html><meta charset="utf-8"><title>elsewhere</title>
<form id="text" method="post" enctype="text/plain" action="%[1]s/v1/tasks/video/">
<input name='{"video_path": "clip.mp4", "save_result_path": "form_text' value='.mp4"}'></form>
<form id="urlencoded" method="post" action="%[1]s/v1/tasks/video/">
<input name="video_path" value="clip.mp4"><input name="save_result_path" value="form_urlencoded.mp4"></form>
<form id="multipart" method="post" enctype="multipart/form-data" action="%[1]s/v1/tasks/video/upload">
<input name="save_result_path" value="form_multipart.mp4"><input type="file" name="video"></form>
<script>
const API = %[1]q;
const post = (path, type, body) => fetch(API + path, { method: 'POST', mode: 'no-cors', headers: type ? { 'Content-Type': type } : {}, body })
  .then(() => 'answered', (e) => 'error: ' + e.message);
const task = (out) => JSON.stringify({ video_path: 'clip.mp4', save_result_path: out });
function submit(form) {
  return new Promise((resolve) => {
    const frame = document.createElement('iframe');
    frame.name = form.id + '-frame';
    document.body.append(frame);
    frame.addEventListener('load', () => { if (!frame.contentDocument) resolve('loaded'); });
    setTimeout(() => resolve('no answer in 20 s'), 20000);
    form.target = frame.name;
    form.submit();
  });
}
(async () => {
  const clip = await (await fetch('/clip.mp4')).blob();
  const fd = new FormData();
  fd.append('save_result_path', 'fetch_multipart.mp4');
  fd.append('video', clip, 'clip.mp4');
  const dt = new DataTransfer();
  dt.items.add(new File([clip], 'clip.mp4', { type: 'video/mp4' }));
  document.querySelector('#multipart input[type=file]').files = dt.files;
  const r = {};
  // The live session first: it would need the device the tasks take.
  r.fetchStream = await post('/v1/streams', 'text/plain', %[2]q);
  r.fetchText = await post('/v1/tasks/video/', 'text/plain', task('fetch_text.mp4'));
  r.fetchURLEncoded = await post('/v1/tasks/video/', 'application/x-www-form-urlencoded', task('fetch_urlencoded.mp4'));
  r.fetchMultipart = await post('/v1/tasks/video/upload', '', fd);
  for (const f of document.forms) r['form-' + f.id] = await submit(f);
  window.done = r;
})().catch((e) => { window.done = { error: String(e) }; });
</script>`

// TestCrossOriginRefused: a page served on another port of the machine,
// in a real browser, cannot create tasks or live sessions on a service
// without a token; the service's own page, in the same browser, still
// submits JSON and uploads.
func TestCrossOriginRefused(t *testing.T) {
	findChromium(t)
	dir := t.TempDir()
	clip := filepath.Join(dir, "clip.mp4")
	makeClip(t, clip, 64, 36, 6)
	data, err := os.ReadFile(clip)
	if err != nil {
		t.Fatal(err)
	}
	svc, api := pageServer(t, "")
	if err := os.WriteFile(filepath.Join(svc.InputRoot(), "clip.mp4"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	stream := fmt.Sprintf(`{"input": "udp://127.0.0.1:%d", "output": "udp://127.0.0.1:%d", "idle_timeout": 3}`, freeUDP(t), freeUDP(t))
	page := fmt.Sprintf(elsewherePage, api, stream)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/clip.mp4" {
			w.Write(data)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}))
	defer elsewhere.Close()

	b := newTab(t)
	b.do(chromedp.Navigate(elsewhere.URL + "/"))
	b.wait("window.done", "document.body.innerText", 60*time.Second)
	for k, v := range eval[map[string]string](b, "window.done") {
		if v != "answered" && v != "loaded" {
			t.Errorf("the other page's %s was not sent: %s", k, v)
		}
	}
	tasks := getJSON(t, api+"/v1/tasks/")
	if len(tasks) != 0 {
		t.Errorf("the other page's requests made %d tasks: %v", len(tasks), tasks)
	}
	if live := getJSON(t, api+"/v1/streams"); fmt.Sprint(live["streams"]) != "[]" {
		t.Errorf("the other page's requests made live sessions: %v", live)
	}

	// The service's own page, with its own client (api.js).
	b.do(chromedp.Navigate(api + "/"))
	b.wait("!document.getElementById('app').hidden", "document.body.innerText", 20*time.Second)
	got := eval[string](b, fmt.Sprintf(`(async () => {
		const api = await import('/web/api.js');
		const a = await api.call('POST', '/v1/tasks/video/', { video_path: 'clip.mp4', save_result_path: 'page_json.mp4' });
		const file = new File([Uint8Array.from(atob(%q), (c) => c.charCodeAt(0))], 'clip.mp4', { type: 'video/mp4' });
		const u = await api.upload({ save_result_path: 'page_upload.mp4' }, file, () => {}).promise;
		return a.task_status + ' ' + u.task_status;
	})().catch((e) => e.status + ' ' + e.message)`, base64.StdEncoding.EncodeToString(data)))
	if got != "pending pending" {
		t.Errorf("the service's own page submitting a task and an upload: %s", got)
	}
	var outs []string
	for _, v := range getJSON(t, api+"/v1/tasks/") {
		outs = append(outs, filepath.Base(v.(map[string]any)["save_result_path"].(string)))
	}
	if s := strings.Join(outs, " "); len(outs) != 2 || !strings.Contains(s, "page_json.mp4") || !strings.Contains(s, "page_upload.mp4") {
		t.Errorf("tasks after the page's submissions: %s, want page_json.mp4 and page_upload.mp4", s)
	}
}

// getJSON GETs url (no token) and decodes its JSON object.
func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]any{}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return m
}

// freeUDP returns a UDP port free on loopback now.
func freeUDP(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}
