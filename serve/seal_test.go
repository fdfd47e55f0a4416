package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// workerJS connects to api's embedded NATS server as a worker does (the
// worker role), for tests that play a compromised worker.
func workerJS(t *testing.T, api *Service) jetstream.JetStream {
	t.Helper()
	nc, err := Connect(*workerNATS(t, api))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestNATSRollupRefused: a worker-role client publishing a message with
// the header Nats-Rollup: all to the task bucket, the worker bucket or
// the uploads' metadata is refused, and every record and upload survives
// (one such message purged every task record).
func TestNATSRollupRefused(t *testing.T) {
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1", Files: true}}, newFake(false))
	e.input("a.mp4")
	id := e.submit(map[string]any{"video_path": "a.mp4"})
	code, m := e.upload(map[string]string{"save_result_path": "up.mp4"}, "clip.mp4", []byte("uploaded bytes"))
	if code != 200 {
		t.Fatalf("upload: %d %v", code, m)
	}
	up, _ := e.svc.get(m["task_id"].(string))
	if err := jsOf(e.svc).Announce(WorkerInfo{Name: "w1"}); err != nil {
		t.Fatal(err)
	}
	js := workerJS(t, e.svc)
	for _, subj := range []string{"$KV." + taskBucket + ".x", "$KV." + workerBucket + ".x", "$O." + uploadBucket + ".M.x"} {
		msg := nats.NewMsg(subj)
		msg.Header.Set("Nats-Rollup", "all")
		msg.Data = []byte("{}")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := js.PublishMsg(ctx, msg)
		cancel()
		if err == nil {
			t.Errorf("a roll-up on %s was accepted", subj)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	for _, k := range []string{id, up.ID} {
		if tk, err := jsOf(e.svc).Get(k); err != nil || tk == nil {
			t.Errorf("task %s: %v, %v", k, tk, err)
		}
	}
	if _, err := jsOf(e.svc).workers.Get(ctx, "w1"); err != nil {
		t.Errorf("the worker's entry: %v", err)
	}
	if _, err := jsOf(e.svc).uploads.GetInfo(ctx, uploadObject(up)); err != nil {
		t.Errorf("the upload: %v", err)
	}
}

// TestNATSRollupOffOnOldBuckets: buckets made by an older vsr, which
// allow roll-ups and purges, refuse both once the API has started.
func TestNATSRollupOffOnOldBuckets(t *testing.T) {
	data := t.TempDir()
	a, err := openJetStream(data, NATS{Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	for _, b := range []string{taskBucket, workerBucket} {
		// Made again as the older vsr made them (DenyPurge cannot be
		// undone).
		if err := a.js.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
		if _, err := a.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1}); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	e := newRemoteEnv(t, Config{Data: data, NATS: &NATS{Listen: "127.0.0.1:-1"}}, newFake(false))
	a = jsOf(e.svc)
	for _, b := range []string{taskBucket, workerBucket} {
		st, err := a.js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := st.CachedInfo().Config; cfg.AllowRollup || !cfg.DenyPurge {
			t.Errorf("%s: allow roll-ups %v, deny purges %v", b, cfg.AllowRollup, cfg.DenyPurge)
		}
	}
}

// TestRemoteRecordTampered: a worker-role client rewrites queued records,
// one to replace an existing file (overwrite, another output), one to
// run on another task's upload, and marks a third completed as if it
// were that upload's task. The worker refuses the first two
// (InvalidRecord) and the API removes no upload for the third; the
// victim file and the upload are intact, and the legitimate tasks run.
func TestRemoteRecordTampered(t *testing.T) {
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1"}}, newFake(false))
	e.input("a.mp4")
	victim := filepath.Join(e.svc.OutputRoot(), "victim.mp4")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, m := e.upload(map[string]string{"save_result_path": "up.mp4"}, "clip.mp4", []byte("uploaded bytes"))
	if code != 200 {
		t.Fatalf("upload: %d %v", code, m)
	}
	v, _ := e.svc.get(m["task_id"].(string))
	replace := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "r.mp4"})
	steal := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "s.mp4"})
	finish := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "f.mp4"})
	legit := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "l.mp4", "sr_ratio": 2.5})

	kv, err := workerJS(t, e.svc).KeyValue(context.Background(), taskBucket)
	if err != nil {
		t.Fatal(err)
	}
	rewrite := func(id string, change func(*Task)) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
		defer cancel()
		en, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var tk Task
		if err := json.Unmarshal(en.Value(), &tk); err != nil {
			t.Fatal(err)
		}
		change(&tk)
		b, _ := json.Marshal(&tk)
		if _, err := kv.Update(ctx, id, b, en.Revision()); err != nil {
			t.Fatal(err)
		}
	}
	onUpload := func(tk *Task) {
		tk.Input, tk.InputRel, tk.Request.VideoPath, tk.Upload = v.Input, v.InputRel, v.Input, true
	}
	rewrite(replace, func(tk *Task) {
		tk.Output, tk.OutputRel, tk.Request.SaveResultPath, tk.Request.Overwrite = victim, "victim.mp4", victim, true
	})
	rewrite(steal, onUpload)
	rewrite(finish, func(tk *Task) {
		onUpload(tk)
		now := time.Now()
		tk.Status, tk.Ended = Completed, &now
	})
	e.wait(finish, Completed)
	time.Sleep(200 * time.Millisecond) // the API's watch has applied it
	if _, err := os.Stat(v.Input); err != nil {
		t.Fatalf("the upload of %s after a forged completion: %v", v.ID, err)
	}

	f := newFake(false)
	w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
		InputRoot: e.svc.InputRoot(), OutputRoot: e.svc.OutputRoot()}, f)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, id := range []string{replace, steal} {
		m := e.wait(id, Failed)
		if m["error_type"] != "InvalidRecord" || !strings.Contains(m["error"].(string), "changed after submit") {
			t.Errorf("%s: %v", id, m)
		}
	}
	e.wait(legit, Completed)
	e.wait(v.ID, Completed)
	if b, err := os.ReadFile(filepath.Join(e.svc.OutputRoot(), "up.mp4")); string(b) != "video of "+v.ID+" from uploaded bytes" {
		t.Errorf("the upload's result: %q, %v", b, err)
	}
	if b, err := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the victim file: %q, %v", b, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.ran, replace) || slices.Contains(f.ran, steal) {
		t.Errorf("the worker ran a rewritten task: %v", f.ran)
	}
}

// TestRemoteUploadIDReused: with the files in the object store, an upload
// whose task_id is that of a pending task is refused (409) and does not
// replace that task's upload (it was stored before the id was checked).
func TestRemoteUploadIDReused(t *testing.T) {
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1", Files: true}}, newFake(false))
	code, m := e.upload(map[string]string{"task_id": "dup", "save_result_path": "a.mp4"}, "a.mp4", []byte("first"))
	if code != 200 {
		t.Fatalf("upload: %d %v", code, m)
	}
	if code, m = e.upload(map[string]string{"task_id": "dup", "save_result_path": "b.mp4"}, "b.mp4", []byte("second")); code != 409 {
		t.Fatalf("the second upload with its id: %d %v", code, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	if objs, err := jsOf(e.svc).uploads.List(ctx); err != nil || len(objs) != 1 {
		t.Errorf("uploads kept: %d, %v", len(objs), err)
	}
	w, err := NewWorker(Config{Data: t.TempDir(), NATS: workerNATS(t, e.svc), AckWait: time.Second,
		InputRoot: t.TempDir(), OutputRoot: t.TempDir()}, newFake(false))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e.wait("dup", Completed)
	resp, err := http.Get(e.srv.URL + "/v1/tasks/dup/result")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "video of dup from first" {
		t.Errorf("result: %d %q", resp.StatusCode, body)
	}
}

// TestNATSWorkerInbox: a worker-role client may not subscribe to every
// inbox ("_INBOX.>", where the API's replies go), only to its own.
func TestNATSWorkerInbox(t *testing.T) {
	e := newRemoteEnv(t, Config{NATS: &NATS{Listen: "127.0.0.1:-1"}}, newFake(false))
	refused := make(chan string, 4)
	nc, err := connect(e.svc.NATSURL(), *workerNATS(t, e.svc), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		refused <- err.Error()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-refused:
		if !strings.Contains(msg, "Permissions Violation") {
			t.Errorf("refused with %q", msg)
		}
	case <-time.After(5 * time.Second):
		t.Error("a worker subscribed to every inbox")
	}
	if _, err := nc.Request("$JS.API.INFO", nil, natsTimeout); err != nil {
		t.Errorf("a request, with the worker's own inbox: %v", err)
	}
	select {
	case msg := <-refused:
		t.Errorf("own inbox refused: %s", msg)
	default:
	}
}

// TestRemoteRecordTamperedRestart: a worker-role client marks a queued
// task completed with another file as its output; after a restart, which
// reads the record as the bucket holds it, the API refuses to serve that
// file as the task's result.
func TestRemoteRecordTamperedRestart(t *testing.T) {
	data := t.TempDir()
	cfg := Config{Data: data, NATS: &NATS{Listen: "127.0.0.1:-1"}}
	e := newRemoteEnv(t, cfg, newFake(false))
	e.input("a.mp4")
	victim := filepath.Join(e.svc.OutputRoot(), "victim.mp4")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := e.submit(map[string]any{"video_path": "a.mp4", "save_result_path": "a-out.mp4"})
	kv, err := workerJS(t, e.svc).KeyValue(context.Background(), taskBucket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	en, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var tk Task
	json.Unmarshal(en.Value(), &tk)
	now := time.Now()
	tk.Status, tk.Ended, tk.Output, tk.OutputRel = Completed, &now, victim, "victim.mp4"
	b, _ := json.Marshal(&tk)
	if _, err := kv.Update(ctx, id, b, en.Revision()); err != nil {
		t.Fatal(err)
	}
	e.wait(id, Completed)
	e.srv.Close()
	e.svc.Close()

	e = newRemoteEnv(t, cfg, newFake(false))
	code, m, _ := e.do("GET", "/v1/tasks/"+id+"/result", nil)
	if code != http.StatusConflict || !strings.Contains(m["error"].(string), "changed after submit") {
		t.Errorf("result of the rewritten record: %d %v", code, m)
	}
}
