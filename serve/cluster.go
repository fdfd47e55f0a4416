package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
)

// Tasks on other machines. With the tasks on NATS JetStream (Config.NATS)
// a Service can be the API alone (NewRemote, vsr serve --workers 0):
// it records each task in the task bucket and puts its id on the work
// queue of its model, and follows the bucket (a watch), where the workers
// write the tasks' states. A worker (NewWorker, vsr worker) is a Service
// without HTTP that takes task ids from the work queue instead of its own
// queue, runs them with its runner and its own roots (a task carries its
// paths relative to the roots), and writes their states to the bucket:
//   - while a task runs, the worker marks its message in progress every
//     AckWait/3, so a worker that dies is noticed within AckWait and the
//     task goes to another worker; a task delivered more than MaxAttempts
//     times fails with that reason; a redelivered task first removes the
//     temporaries its previous attempt left beside its output;
//   - cancelling a running task is a message on its cancel subject, which
//     the worker that runs it listens to;
//   - every write to the bucket names the revision it replaces, so a
//     worker and the API never overwrite each other's change (a task the
//     API cancelled while a worker took it is skipped).

// apply takes in a task's record as the bucket holds it; s.mu is held.
func (s *Service) apply(t *Task) {
	if old := s.tasks[t.ID]; old != nil {
		t.cancelAsked = old.cancelAsked
	}
	s.track(t)
	s.seq = max(s.seq, t.Seq)
}

// requeue rebuilds the queue (pending tasks in submission order) and the
// running list from the tasks; s.mu is held.
func (s *Service) requeue() {
	ts := slices.Collect(maps.Values(s.tasks))
	slices.SortFunc(ts, func(a, b *Task) int { return int(a.Seq) - int(b.Seq) })
	q, running := &fifo{}, []*Task(nil)
	for _, t := range ts {
		switch t.Status {
		case Pending:
			q.Push(t.ID)
		case Processing:
			running = append(running, t)
		}
	}
	s.queue, s.running = q, running
}

// watch follows the task bucket until ctx ends, so that the API of remote
// workers reports what they write within milliseconds.
func (s *Service) watch(ctx context.Context) {
	defer s.workers.Done()
	for ctx.Err() == nil {
		if err := s.wq.Watch(ctx, s.seen); err != nil {
			s.log.Warn("following the tasks on NATS", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// seen takes in a task's record that watch saw written.
func (s *Service) seen(t *Task) {
	bad := s.verifySeal(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.tasks[t.ID]
	if bad != nil {
		// Another writer changed what never changes after
		// submit: keep the state it reports, not those fields.
		if old == nil {
			s.log.Warn("ignoring a task record", "task", t.ID, "err", bad)
			return
		}
		unseal(t, old)
	}
	if old != nil && !old.Status.Final() && t.Status.Final() {
		s.removeUpload(old)
	}
	s.apply(t)
	s.requeue()
}

// removeUpload removes the upload of task t, this API's record of a task
// that has ended: the API stored the file (or with NATS.Files the object),
// and removes it (a worker never does: it does not trust the record's
// paths to name an upload). With remote workers, only an upload that this
// API's signature covers. The object is removed in the background: s.mu
// may be held.
func (s *Service) removeUpload(t *Task) {
	if !t.Upload || filepath.Dir(t.Input) != s.cfg.InputRoot || !uploadName.MatchString(filepath.Base(t.Input)) || !s.signedHere(t) {
		return
	}
	if !t.Files {
		os.Remove(t.Input)
		return
	}
	go s.wq.RemoveUpload(uploadObject(t)) // after Close, it fails at once
}

// cancelRemote asks the worker running task id to stop and waits (up to
// ctx) for its record to say it stopped.
func (s *Service) cancelRemote(ctx context.Context, id string) (cancelResult, *Task) {
	if err := s.wq.Cancel(id); err != nil {
		s.log.Warn("cancel", "task", id, "err", err)
	}
	for {
		t, err := s.wq.Get(id)
		if err == nil && t != nil && t.Status.Final() {
			if t.Status == Cancelled {
				return cancelDone, t
			}
			return cancelNothing, t
		}
		select {
		case <-ctx.Done():
			s.mu.Lock()
			c := s.tasks[id].clone()
			s.mu.Unlock()
			return cancelStopping, c
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// served names the models of the runner ("" for a runner that does not
// name them: every task is its).
func (s *Service) served() []string {
	if mn, ok := s.runner.(ModelNamer); ok {
		return mn.ModelNames()
	}
	return []string{""}
}

// subscribe makes a worker's consumers, one per model its runner serves.
func (s *Service) subscribe() error {
	for _, m := range s.served() {
		// A task's arrival wakes an idle worker at once.
		c, err := s.wq.Consume(m, s.cfg.AckWait, s.signal)
		if err != nil {
			return err
		}
		s.pullFrom = append(s.pullFrom, c)
	}
	if s.cfg.Name == "" {
		host, _ := os.Hostname()
		s.cfg.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return nil
}

// announce says in the worker bucket that this worker is there, what it
// serves and runs, until ctx ends; then it takes the entry out.
func (s *Service) announce(ctx context.Context) {
	defer close(s.announced)
	info := WorkerInfo{Name: s.cfg.Name, Models: s.served(), Devices: s.cfg.Devices, Started: time.Now()}
	tick := time.NewTicker(min(s.cfg.AckWait/3, workerTTL/3))
	defer tick.Stop()
	for {
		s.mu.Lock()
		info.Running = runningIDs(s.running)
		s.mu.Unlock()
		if err := s.wq.Announce(info); err != nil {
			s.log.Warn("announcing this worker on NATS", "err", err)
		}
		select {
		case <-ctx.Done():
			s.wq.Leave(info.Name)
			return
		case <-tick.C:
		}
	}
}

// pull takes a task from the work queues of the worker's models and marks
// it processing, as next does with the local queue; it waits a little
// when there is none.
func (s *Service) pull(parent context.Context) (*Task, context.Context) {
	if s.isClosing() {
		return nil, nil
	}
	for _, c := range s.pullFrom {
		m, err := c.Next()
		if m != nil {
			if t, ctx := s.take(parent, m); t != nil {
				return t, ctx
			}
		}
		if err != nil {
			s.log.Warn("taking a task from NATS", "err", err)
		}
	}
	select {
	case <-parent.Done():
	case <-s.wake:
	case <-time.After(pullIdle):
	}
	return nil, nil
}

// pullIdle is how long an idle worker waits before looking again when no
// task's arrival woke it (a redelivered task is not published again).
const pullIdle = 250 * time.Millisecond

func (s *Service) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// take starts the task of message m, or acknowledges a message whose task
// is gone, finished or cancelled, or fails a task delivered too often or
// whose record this worker cannot trust (checkRecord).
func (s *Service) take(parent context.Context, m Work) (*Task, context.Context) {
	id := m.ID()
	delivered, err := m.Delivered()
	if err != nil {
		m.Nak()
		return nil, nil
	}
	if !validID(id) {
		s.log.Warn("refusing a work queue message that names no valid task id", "id", fmt.Sprintf("%.80q", id))
		m.Term()
		return nil, nil
	}
	j := s.wq
	t, err := j.Get(id)
	if err != nil {
		s.log.Warn("reading a task from NATS", "task", id, "err", err)
		m.Nak()
		return nil, nil
	}
	if t == nil || t.Status.Final() {
		m.Ack()
		return nil, nil
	}
	now := time.Now()
	// Graceful stops (SIGTERM) hand the task back without costing a run.
	runs := max(delivered-t.HandedBack, 1)
	fail := func(errType, msg string) {
		t.Status, t.Ended, t.Error, t.ErrorType = Failed, &now, msg, errType
		if err := j.Put(t); err == nil {
			m.Term()
		} else {
			m.Nak()
		}
	}
	if err := s.checkRecord(t, id, m.Model()); err != nil {
		s.log.Warn("refusing a task record", "task", id, "err", err)
		fail("InvalidRecord", fmt.Sprintf("worker %s refused the task's record: %v", s.cfg.Name, err))
		return nil, nil
	}
	if runs > s.cfg.MaxAttempts {
		fail("Interrupted", fmt.Sprintf("delivered %d times: the workers that took it stopped or lost their connection before it finished (--max-attempts %d)", runs-1, s.cfg.MaxAttempts))
		return nil, nil
	}
	// The lease is renewed from now on (an upload may take a while to
	// arrive), without s.mu: t is not shared until it is in s.tasks.
	ctx, cancel := context.WithCancel(parent)
	t.cancel = cancel
	go s.heartbeat(ctx, t, m)
	giveBack := func() {
		cancel()
		s.mu.Lock()
		lost := t.lost
		s.mu.Unlock()
		if lost { // it is another worker's now
			return
		}
		if parent.Err() != nil {
			// A graceful stop, as in runOne: not a failed delivery.
			t.HandedBack++
			j.Put(t)
		}
		m.Nak()
	}
	if t.in, t.out, err = s.localPaths(ctx, t); err != nil {
		s.log.Warn("taking an upload from NATS", "task", id, "err", err)
		giveBack()
		return nil, nil
	}
	if delivered > 1 {
		t.Rerun = true // its run removes what the last one left (runOne)
	}
	t.Status, t.Started, t.Ended, t.Error = Processing, &now, nil, ""
	t.FramesDone, t.Attempts, t.Worker = 0, runs, s.cfg.Name
	if err := j.Put(t); err != nil {
		// Changed meanwhile (cancelled by the API): look again later.
		s.log.Info("task changed as it was taken", "task", id, "err", err)
		s.dropUpload(t)
		giveBack()
		return nil, nil
	}
	t.msg = m
	t.done = make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	unsub, err := j.OnCancel(id, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if t.cancel != nil {
			t.cancelAsked = true
			t.cancel()
		}
	})
	if err == nil {
		t.unsub = unsub
	}
	s.tasks[id] = t
	s.running = append(s.running, t)
	return t, ctx
}

// checkRecord checks task t's record, read for the work queue message
// with task id from the queue of model, as the HTTP layer checks a request: whoever
// can write to the bucket must not lead a worker out of its roots or run
// a model other than the one asked for. The fields set at submit carry
// the signature of a trusted API (verifySeal); the paths are relative,
// clean and local; the model is one this worker serves, the one of the
// queue the message came from, with the weights the API checked the
// request against (the content hash it recorded).
func (s *Service) checkRecord(t *Task, id, model string) error {
	if t.ID != id {
		return fmt.Errorf("the record of %s names task %q", id, t.ID)
	}
	if err := s.verifySeal(t); err != nil {
		return err
	}
	if err := checkRel("input_rel", t.InputRel); err != nil {
		return err
	}
	if err := checkRel("output_rel", t.OutputRel); err != nil {
		return err
	}
	name := filepath.Base(t.OutputRel)
	if strings.HasPrefix(name, ".") || len(name) > maxName || len(t.OutputRel) > maxPath || outputExt(t.OutputRel) == "" {
		return fmt.Errorf("output_rel %q: want a visible file name of at most %d bytes with an extension", t.OutputRel, maxName)
	}
	if !slices.Contains(s.served(), t.ModelName) || model != t.ModelName {
		return fmt.Errorf("model %q: not the model of the queue the task came from, or not served here", t.ModelName)
	}
	if want := s.hashes[t.ModelName]; t.ModelHash != want {
		return fmt.Errorf("model %s: this worker's weights (content hash %.16s) are not those the task was accepted for (%.16s): give the workers and the API the same model files", t.ModelName, want, t.ModelHash)
	}
	return nil
}

// checkRel refuses a path of a task record that is not clean, relative
// and local (no "..", not absolute, no control characters).
func checkRel(field, p string) error {
	if p == "" || !filepath.IsLocal(p) || filepath.Clean(p) != p || strings.ContainsFunc(p, unicode.IsControl) {
		return fmt.Errorf("%s %q is not a clean relative path inside the root", field, p)
	}
	return nil
}

// outputExt returns the extension of path when it is a plain one (a dot
// and 1 to 9 letters or digits), else "": the extension of a stored
// upload's name, and of a worker's own files.
func outputExt(path string) string {
	ext := filepath.Ext(path)
	if len(ext) < 2 || len(ext) > 10 || strings.ContainsFunc(ext[1:], func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		return ""
	}
	return ext
}

// localPaths returns where a worker reads and writes task t (checked by
// checkRecord) under its own roots. With the files in the object store
// (t.Files) they are this worker's own, named by the task id: its upload,
// which it takes from the store now into its private directory (see
// privateDir), and its result, stored and removed when the task is done.
// Otherwise they are the record's relative paths, which the run opens
// inside the roots (openTask).
func (s *Service) localPaths(ctx context.Context, t *Task) (in, out string, err error) {
	in, out = filepath.Join(s.cfg.InputRoot, t.InputRel), filepath.Join(s.cfg.OutputRoot, t.OutputRel)
	if !t.Files {
		return in, out, nil
	}
	out = filepath.Join(s.cfg.OutputRoot, "result-"+t.ID+outputExt(t.OutputRel))
	if !t.Upload {
		return in, out, nil
	}
	name := "upload-" + t.ID + outputExt(t.InputRel)
	root, err := os.OpenRoot(s.copies.path)
	if err != nil {
		return "", "", err
	}
	defer root.Close()
	root.Remove(name) // this worker's copy from an earlier attempt
	if err := getUpload(s.wq, ctx, root, uploadObject(t), name); err != nil {
		return "", "", err
	}
	return filepath.Join(s.copies.path, name), out, nil
}

// getUpload takes a worker's upload from the object store (a seam for
// tests).
var getUpload = WorkQueue.GetUpload

// uploadObject names the object of task t's upload (NATS.Files): unique
// to this submission, as the file name of its upload is, so that a
// refused submission never replaces another task's upload.
func uploadObject(t *Task) string { return "in/" + filepath.Base(t.Input) }

// dropUpload removes the copy of its upload a worker took for task t
// into its private directory (localPaths), once its run is over.
func (s *Service) dropUpload(t *Task) {
	if t.Files && t.Upload && t.in != "" {
		os.Remove(t.in)
	}
}

// hashModels records the content hash of each served model (ModelHasher;
// "" for a runner that has none) when tasks run on workers: the API
// records it in each task, and a worker runs only the tasks whose hash is
// its own.
func (s *Service) hashModels() error {
	s.hashes = map[string]string{}
	mh, ok := s.runner.(ModelHasher)
	if !ok || s.mode == modeLocal {
		return nil
	}
	for _, m := range s.served() {
		h, err := mh.ModelHash(m)
		if err != nil {
			return fmt.Errorf("model %s: its content hash: %w", m, err)
		}
		s.hashes[m] = h
	}
	return nil
}

// ModelHasher is implemented by runners that can tell their models'
// weights apart: ModelHash returns a hash of the content of the named
// model's files. Without it, tasks carry no hash and workers check the
// model's name only.
type ModelHasher interface {
	ModelHash(name string) (string, error)
}

// leaseOptions are the NATS connection options of a worker: pings every
// AckWait/3, so that a connection that stopped answering is noticed (and
// redialled) within the ack wait rather than the default minutes.
func leaseOptions(c Config, m mode) []nats.Option {
	if m != modeWorker {
		return nil
	}
	return []nats.Option{nats.PingInterval(c.AckWait / 3), nats.MaxPingsOutstanding(2)}
}

// heartbeat renews the lease of task t's message m (marks it in progress,
// waiting for the server's answer) every AckWait/3 until ctx ends. A
// failure or two (a NATS node failing over) is waited out; but once no
// renewal has been answered for 2/3 of AckWait, the task may go to
// another worker at AckWait: this one cancels it then, so that no task
// runs twice at once.
func (s *Service) heartbeat(ctx context.Context, t *Task, m Work) {
	aw := s.cfg.AckWait
	last := time.Now() // the last renewal the server answered was sent then
	for {
		deadline := last.Add(2 * aw / 3)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(aw/3, time.Until(deadline))):
		}
		if time.Now().Before(deadline) {
			sent := time.Now()
			if err := m.Renew(min(aw/6, time.Until(deadline))); err == nil {
				last = sent
			} else {
				s.log.Warn("renewing the lease on a running task", "task", t.ID, "err", err)
			}
			continue
		}
		s.log.Warn("lost the lease on a running task: stopping it", "task", t.ID)
		s.mu.Lock()
		t.lost = true
		if t.cancel != nil {
			t.cancel()
		}
		s.mu.Unlock()
		return
	}
}

// release settles the message of a task a worker ran: acknowledged when
// the task is over and its record says so, handed back at once when the
// worker stopped before, or when the final record could not be written
// (the task then runs again rather than stay "processing" for ever).
func (s *Service) release(t *Task) {
	if t.unsub != nil {
		t.unsub()
	}
	if t.msg == nil {
		return
	}
	if t.Status.Final() {
		s.saveFinal(t)
	}
	s.mu.Lock()
	lost, saved := t.lost, t.Status.Final() && !t.unsaved
	delete(s.tasks, t.ID) // a worker keeps no history
	s.mu.Unlock()
	switch {
	case lost:
		// Its message is another worker's now (or will be at the ack
		// wait): a nak here would hand the task to a third worker.
		t.msg = nil
	case saved:
		t.msg.Ack()
	default:
		t.msg.Nak()
	}
}

// finalSaveFor is how long a worker keeps writing a finished task's record
// when the writes fail (a NATS cluster electing a leader, say).
const finalSaveFor = time.Minute

// saveFinal writes again, every second for up to finalSaveFor, the record
// of a finished task whose last write failed, keeping its message in
// progress meanwhile.
func (s *Service) saveFinal(t *Task) {
	for end := time.Now().Add(finalSaveFor); ; {
		s.mu.Lock()
		done := !t.unsaved || t.lost || time.Now().After(end)
		s.mu.Unlock()
		if done {
			return
		}
		t.msg.InProgress()
		time.Sleep(time.Second)
		s.mu.Lock()
		s.persist(t)
		s.mu.Unlock()
	}
}

// errNoJetStream refuses remote workers without the JetStream store.
var errNoJetStream = errors.New("serve: workers on other machines need the tasks on NATS JetStream (--nats-listen or --nats)")

// unserved returns the models among models that no worker of ws serves,
// once each, in order.
func unserved(models []string, ws []WorkerInfo) []string {
	served := map[string]bool{}
	for _, w := range ws {
		for _, m := range w.Models {
			served[m] = true
		}
	}
	out := []string{}
	for _, m := range models {
		if !served[m] && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// storeResult puts a worker's result of task t into the object store and
// removes its file (NATS.Files): the API serves it from there.
func (s *Service) storeResult(t *Task) (string, error) {
	name := resultObject(t.ID)
	if err := s.wq.PutResult(name, t.Output); err != nil {
		return "", err
	}
	os.Remove(t.Output) // this worker's own (see localPaths)
	return name, nil
}

// resultObject names the object of task id's result.
func resultObject(id string) string { return "out/" + id }

// serveObject streams task t's result from the object store: the object
// storeResult names, whatever the record says.
func (s *Service) serveObject(w http.ResponseWriter, r *http.Request, t *Task) {
	obj, size, err := s.wq.OpenResult(r.Context(), resultObject(t.ID))
	if err != nil {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	defer obj.Close()
	name := filepath.Base(t.Output)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	w.Header().Set("Content-Type", cmp.Or(mime.TypeByExtension(filepath.Ext(name)), "application/octet-stream"))
	w.Header().Set("Content-Length", strconv.FormatUint(size, 10))
	io.Copy(w, obj)
}
