package serve_test

// The page in a real browser: a headless Chromium (chromedp) drives the
// page of a real service (the bundled model on the CPU, the runner of vsr
// serve) on loopback. Screenshots of each state are written to
// $VSR_SHOTS (default: the test's temporary directory) for a person to
// look at. The test skips without chromium or ffmpeg.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/serve"
	"github.com/vsr-dev/vsr/video"
)

// findChromium returns the browser the test drives, or skips the test.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VSR_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (apt-get install chromium, or set VSR_CHROMIUM)")
	return ""
}

// makeClip writes a w x h test clip of n frames at path.
func makeClip(t *testing.T, path string, w, h, n int) {
	t.Helper()
	ff, err := video.FFmpeg()
	if err != nil {
		t.Skip(err)
	}
	out, err := exec.Command(ff, "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=25", w, h),
		"-frames:v", strconv.Itoa(n), "-c:v", "libx264", "-pix_fmt", "yuv420p", "-y", path).CombinedOutput()
	if err != nil {
		t.Fatalf("make clip: %v: %s", err, out)
	}
}

// pageServer runs a service as vsr serve does (the bundled model on the
// CPU, served on a loopback listener) until the test ends.
func pageServer(t *testing.T, token string) (*serve.Service, string) {
	t.Helper()
	devs, err := app.OpenDevices("cpu", app.StorageType("f16"))
	if err != nil {
		t.Fatal(err)
	}
	run, err := app.NewRunner(devs, app.Served{FieldDefaults: map[string]any{"sr_ratio": 2.0},
		Base: app.Job{Encode: video.EncodeOptions{Codec: "libx264", CRF: 18, Preset: "ultrafast", PixFmt: "yuv420p"}}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := serve.New(serve.Config{Data: t.TempDir(), Token: token, Workers: run.Workers(), Version: "test",
		StreamAllow: []string{"udp://127.0.0.1?listen"}}, run)
	if err != nil {
		run.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		svc.Close()
		run.Close()
	})
	return svc, "http://" + ln.Addr().String()
}

// tab is a browser tab on the page, with where its screenshots go.
type tab struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

// newTab starts a headless Chromium with one tab, closed when the test
// ends (before the server: cleanups run last first).
func newTab(t *testing.T) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(findChromium(t)),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-component-update", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Skipf("chromium does not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	shots := os.Getenv("VSR_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return &tab{t: t, ctx: ctx, shots: shots}
}

// do runs steps, failing the test on an error.
func (b *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

// call runs a protocol command on the tab (browser: on the browser).
func call[P, R any](b *tab, cmd cdp.Command[P, R], params P, onBrowser bool) {
	b.t.Helper()
	var err error
	if onBrowser {
		_, err = chromedp.CallBrowser(b.ctx, cmd, params)
	} else {
		_, err = chromedp.Call(b.ctx, cmd, params)
	}
	if err != nil {
		b.t.Fatal(err)
	}
}

// eval returns the value of a JavaScript expression (awaited, if a promise).
func eval[T any](b *tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// wait waits until the JavaScript expression is true, failing after
// timeout with what describe (an expression) says of the page then.
func (b *tab) wait(expr, describe string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for !eval[bool](b, "!!("+expr+")") {
		if time.Now().After(deadline) {
			state := eval[string](b, "String("+describe+")")
			b.shot("timeout-" + strings.ReplaceAll(b.t.Name(), "/", "-"))
			b.t.Fatalf("waited %s for %s: %s", timeout, expr, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shot saves a screenshot of the whole page as NAME.png.
func (b *tab) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// taskCard is the expression of the card of the task whose name has s.
func taskCard(s string) string {
	return fmt.Sprintf("[...document.querySelectorAll('.task')].find((c) => c.querySelector('.name').textContent.includes(%q))", s)
}

// tasksText describes the task cards, for failures.
const tasksText = "[...document.querySelectorAll('.task')].map((c) => c.dataset.status + ': ' + c.innerText.replaceAll('\\n', ' | ')).join(' // ') + ' toast: ' + document.getElementById('toast').textContent"

func TestPageInBrowser(t *testing.T) {
	findChromium(t)
	dir := t.TempDir()
	clip := filepath.Join(dir, "clip.mp4")
	makeClip(t, clip, 64, 36, 6)
	long := filepath.Join(dir, "long.mp4")
	makeClip(t, long, 320, 180, 1500)
	bad := filepath.Join(dir, "notes.mp4")
	os.WriteFile(bad, []byte("not a video"), 0o644)
	const token = "page-test-token"
	svc, url := pageServer(t, token)
	b := newTab(t)
	downloads := t.TempDir()
	call(b, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads}, true)

	t.Run("token", func(t *testing.T) {
		b.t = t
		b.do(chromedp.Navigate(url + "/"))
		b.wait("!document.getElementById('login').hidden", "document.body.innerText", 20*time.Second)
		if !eval[bool](b, "document.getElementById('app').hidden && document.getElementById('tasks').children.length === 0") {
			t.Error("the queue shows without the token")
		}
		if code := eval[int](b, "fetch('/v1/tasks/').then((r) => r.status)"); code != 401 {
			t.Errorf("GET /v1/tasks/ without the token from the page: %d, want 401", code)
		}
		b.shot("01-token-asked")
		b.do(chromedp.SendKeys(chromedp.ID("token"), "wrong"), chromedp.Click(chromedp.CSS("#login-form button")))
		b.wait("document.getElementById('login-error').textContent.includes('refused')", "document.getElementById('login-error').textContent", 10*time.Second)
		b.shot("02-token-refused")
		b.do(chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS("#login-form button")))
		b.wait("!document.getElementById('app').hidden && document.getElementById('mode').dataset.mode === 'live'", "document.body.innerText", 20*time.Second)
		if stored := eval[string](b, "sessionStorage.getItem('vsr.token') + ' ' + document.cookie + ' ' + location.href"); stored != token+"  "+url+"/" {
			t.Errorf("token kept as %q, want only in sessionStorage", stored)
		}
		b.wait("document.querySelector('#device-list li')", "document.getElementById('devices').innerText", 10*time.Second)
		b.shot("03-unlocked-empty")
	})
	if t.Failed() {
		return
	}

	t.Run("upload", func(t *testing.T) {
		b.t = t
		b.do(chromedp.SetUploadFiles(chromedp.ID("files"), []string{clip}))
		b.wait("document.querySelectorAll('#picked li').length === 1", "document.getElementById('picked').innerText", 5*time.Second)
		b.shot("04-file-picked")
		b.do(chromedp.Click(chromedp.ID("submit")))
		card := taskCard("clip_vsr.mp4")
		b.wait(card+"?.dataset.status === 'completed'", tasksText, 60*time.Second)
		if pct := eval[string](b, card+".querySelector('[role=progressbar]').getAttribute('aria-valuenow')"); pct != "100" {
			t.Errorf("progress of the completed task: %s%%, want 100%%", pct)
		}
		b.wait("document.querySelectorAll('#picked li').length === 0", "document.getElementById('picked').innerText", 10*time.Second)
		b.shot("05-task-completed")
	})
	if t.Failed() {
		return
	}

	t.Run("compare and download", func(t *testing.T) {
		b.t = t
		b.do(chromedp.Click(chromedp.JSPath(taskCard("clip_vsr.mp4") + ".querySelector('.actions button')")))
		b.wait("document.getElementById('cmp').getAttribute('aria-busy') === 'false'", "document.getElementById('cmp-status').textContent", 30*time.Second)
		if size := eval[string](b, "[document.getElementById('cmp-before'), document.getElementById('cmp-after')].map((i) => i.naturalWidth + 'x' + i.naturalHeight).join(' ')"); size != "128x72 128x72" {
			t.Errorf("comparison frames %s, want 128x72 each", size)
		}
		eval[bool](b, "(() => { const s = document.getElementById('cmp-pos'); s.value = 30; return s.dispatchEvent(new Event('input')); })()")
		b.shot("06-comparison")
		b.do(chromedp.Click(chromedp.ID("download")))
		want, err := os.ReadFile(filepath.Join(svc.OutputRoot(), "clip_vsr.mp4"))
		if err != nil {
			t.Fatal(err)
		}
		got := waitFile(t, filepath.Join(downloads, "clip_vsr.mp4"), len(want))
		if !bytes.Equal(got, want) {
			t.Errorf("the download (%d bytes) differs from the output (%d bytes)", len(got), len(want))
		}
	})

	t.Run("api error", func(t *testing.T) {
		b.t = t
		b.do(chromedp.SetUploadFiles(chromedp.ID("files"), []string{bad}), chromedp.Click(chromedp.ID("submit")))
		b.wait("document.querySelector('#picked li.failed')", "document.getElementById('picked').innerText", 20*time.Second)
		if msg := eval[string](b, "document.querySelector('#picked li.failed .error').textContent"); !strings.Contains(msg, "is not a video file") {
			t.Errorf("the refusal shown: %q, want the service's error", msg)
		}
		b.shot("07-api-error")
		b.do(chromedp.Click(chromedp.CSS("#picked li.failed button")))
	})

	t.Run("queue and cancel", func(t *testing.T) {
		b.t = t
		b.do(chromedp.SetUploadFiles(chromedp.ID("files"), []string{long}), chromedp.Click(chromedp.ID("submit")))
		running := taskCard("long_vsr.mp4")
		b.wait(running+"?.dataset.status === 'processing' && "+running+".querySelector('.stats').textContent.includes('frames/s')", tasksText, 60*time.Second)
		// A second task waits behind it, at position 1.
		b.do(chromedp.SetValue(chromedp.ID("outname"), "{name}_queued.mp4"),
			chromedp.SetUploadFiles(chromedp.ID("files"), []string{clip}), chromedp.Click(chromedp.ID("submit")))
		queued := taskCard("clip_queued.mp4")
		b.wait(queued+"?.dataset.status === 'pending' && "+queued+".querySelector('.stats').textContent.includes('Position 1 in the queue')", tasksText, 30*time.Second)
		b.shot("08-running-and-queued")
		b.do(chromedp.Click(chromedp.JSPath(queued + ".querySelector('button[aria-label^=Cancel]')")))
		b.wait(queued+"?.dataset.status === 'cancelled'", tasksText, 30*time.Second)
		b.do(chromedp.Click(chromedp.JSPath(running + ".querySelector('button[aria-label^=Cancel]')")))
		b.wait(running+"?.dataset.status === 'cancelled'", tasksText, 60*time.Second)
		if _, err := os.Stat(filepath.Join(svc.OutputRoot(), "long_vsr.mp4")); err == nil {
			t.Error("the cancelled task left its output")
		}
		b.shot("09-tasks-cancelled")
		// Delete takes a finished task off the list, on the server.
		b.do(chromedp.Click(chromedp.JSPath(queued + ".querySelector('button[aria-label^=Delete]')")))
		b.wait("!("+queued+")", tasksText, 30*time.Second)
		list := eval[string](b, "fetch('/v1/tasks/', {headers: {Authorization: 'Bearer "+token+"'}}).then((r) => r.text())")
		if strings.Contains(list, "clip_queued.mp4") || !strings.Contains(list, "long_vsr.mp4") {
			t.Errorf("the server's tasks after deleting clip_queued.mp4: %s", list)
		}
	})

	t.Run("labels and keyboard", func(t *testing.T) {
		b.t = t
		// Every visible control has a name a screen reader reads.
		unnamed := eval[[]string](b, `[...document.querySelectorAll('input, select, button, [role=progressbar]')]
			.filter((e) => e.getClientRects().length > 0 || e.type === 'file')
			.filter((e) => !((e.labels && e.labels.length) || e.getAttribute('aria-label') || e.getAttribute('aria-labelledby') || (e.tagName === 'BUTTON' && e.textContent.trim())))
			.map((e) => e.outerHTML.slice(0, 80))`)
		for _, u := range unnamed {
			t.Errorf("a control without a label: %s", u)
		}
		// The divider moves with the arrow keys.
		b.do(chromedp.Focus(chromedp.ID("cmp-pos")), chromedp.SendKeys(chromedp.ID("cmp-pos"), kb.ArrowRight+kb.ArrowRight))
		if pos := eval[string](b, "document.getElementById('cmp').style.getPropertyValue('--pos')"); pos != "32%" {
			t.Errorf("the divider after two right arrows from 30%%: %q", pos)
		}
		// Escape closes the comparison and gives the focus back to its task.
		b.do(chromedp.SendKeys(chromedp.ID("cmp-pos"), kb.Escape))
		b.wait("document.getElementById('compare').hidden && document.activeElement.textContent === 'Compare & download'", "document.activeElement.outerHTML", 5*time.Second)
	})

	t.Run("javascript units", func(t *testing.T) {
		b.t = t
		src, err := os.ReadFile("testdata/format_test.js")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range eval[[]string](b, string(src)) {
			t.Error(f)
		}
	})

	t.Run("layouts", func(t *testing.T) {
		b.t = t
		b.do(chromedp.Click(chromedp.CSS("#more-params summary")))
		b.wait("document.getElementById('more-params').open && document.getElementById('p-tile')", "document.getElementById('more-params').outerHTML", 5*time.Second)
		call(b, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: 390, Height: 844, DeviceScaleFactor: 2, Mobile: true}, false)
		b.shot("10-phone")
		call(b, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: 1280, Height: 900, DeviceScaleFactor: 1}, false)
		call(b, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}, false)
		b.shot("11-dark")
		call(b, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{}, false)
	})

	t.Run("polling fallback", func(t *testing.T) {
		b.t = t
		call(b, network.Enable, network.EnableParams{}, false)
		call(b, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: []*network.BlockPattern{{URLPattern: url + "/v1/events", Block: true}}}, false)
		defer call(b, network.SetBlockedURLs, network.SetBlockedURLsParams{}, false)
		b.do(chromedp.Navigate(url + "/")) // the token is still in the tab's sessionStorage
		b.wait("document.getElementById('mode').dataset.mode === 'polling' && "+taskCard("clip_vsr.mp4"), "document.body.innerText", 20*time.Second)
		data, _ := os.ReadFile(clip)
		os.WriteFile(filepath.Join(svc.InputRoot(), "polled.mp4"), data, 0o644)
		req, _ := http.NewRequest("POST", url+"/v1/tasks/video/", strings.NewReader(`{"video_path": "polled.mp4", "save_result_path": "polled_vsr.mp4"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("submit: %v %v", resp.StatusCode, err)
		}
		resp.Body.Close()
		b.wait(taskCard("polled_vsr.mp4")+"?.dataset.status === 'completed'", tasksText, 60*time.Second)
		b.shot("12-polling-fallback")
	})

	t.Run("live session", func(t *testing.T) {
		b.t = t
		// A UDP sink that drops what it gets, a session from a UDP source
		// to it, and ffmpeg publishing a clip in real time.
		sink, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		go func() {
			buf := make([]byte, 65536)
			for {
				if _, _, err := sink.ReadFrom(buf); err != nil {
					return
				}
			}
		}()
		free, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		in := fmt.Sprintf("udp://127.0.0.1:%d", free.LocalAddr().(*net.UDPAddr).Port)
		free.Close()
		body := fmt.Sprintf(`{"input": %q, "output": "udp://%s?pkt_size=1316", "idle_timeout": 30}`, in, sink.LocalAddr())
		req, _ := http.NewRequest("POST", url+"/v1/streams", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("start a session: %v %v", resp.StatusCode, err)
		}
		resp.Body.Close()
		pub := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-re", "-f", "lavfi", "-i", "testsrc2=size=64x36:rate=25", "-t", "20",
			"-c:v", "libx264", "-preset", "ultrafast", "-f", "mpegts", in+"?pkt_size=1316")
		if err := pub.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { pub.Process.Kill(); pub.Wait() }()
		// The page lists it, its frames out counting up, with its size.
		const row = "document.querySelector('#live-rows tr')"
		b.wait(row+" && Number("+row+".children[4].textContent.split(' / ')[1]) > 10 && "+row+".children[2].textContent === '128×72'",
			"document.getElementById('live').innerText", 60*time.Second)
		b.shot("13-live-session")
		b.do(chromedp.Click(chromedp.JSPath(row + ".querySelector('button[aria-label^=Stop]')")))
		b.wait(row+".children[1].textContent.startsWith('stopped')", "document.getElementById('live').innerText", 30*time.Second)
	})
}

// waitFile waits until path holds n bytes, and returns them.
func waitFile(t *testing.T, path string, n int) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) == n {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("download %s: %d bytes (%v), want %d", path, len(b), err, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
