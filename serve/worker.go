package serve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"
)

// worker is the placement of NewWorker: a Service without HTTP that takes
// its tasks from the work queues of the models its runner serves and runs
// them (see cluster.go). It submits nothing; a cancel reaches its tasks
// through the work queue (take), and the rest is local's.
type worker struct{ local }

func (s worker) open() error {
	if s.wq == nil {
		return errNoJetStream
	}
	if err := s.hashModels(); err != nil {
		return err
	}
	// A worker shares its roots with other workers: it removes only the
	// temporaries of the tasks it takes (see runOne).
	var err error
	if s.copies, err = openPrivateDir(s.cfg.Data, s.log); err != nil {
		return err
	}
	if err := s.subscribe(); err != nil {
		s.copies.close()
		return err
	}
	return nil
}

func (s worker) start(ctx context.Context) {
	s.announced = make(chan struct{})
	go s.announce(ctx)
	s.startWork(ctx)
}

// await takes a task from the work queue (pull).
func (s worker) await(ctx context.Context) (*Task, context.Context) { return s.pull(ctx) }

// ran counts a graceful stop, not a failed delivery, and removes the
// task's copy of its upload: the API removes the upload.
func (s worker) ran(t *Task) {
	if t.Status == Pending && !t.lost && t.retryIn == 0 { // interrupted by a stop, not by a lost lease or a lock (handBack)
		t.HandedBack++
	}
	s.dropUpload(t)
}

// takenOver stops task t: another worker took it over (its message was
// delivered again), and the record is its now.
func (s worker) takenOver(t *Task) bool {
	s.log.Warn("another worker took over a running task: stopping it", "task", t.ID)
	t.lost = true
	t.cancel()
	return true
}

// subscribe makes a worker's consumers, one per model its runner serves.
func (s worker) subscribe() error {
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
func (s worker) announce(ctx context.Context) {
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
func (s worker) pull(parent context.Context) (*Task, context.Context) {
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

// take starts the task of message m, or acknowledges a message whose task
// is gone, finished or cancelled, or fails a task delivered too often or
// whose record this worker cannot trust (checkRecord).
func (s worker) take(parent context.Context, m Work) (*Task, context.Context) {
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
		s.dropJournal(s.cfg.OutputRoot, s.outputPath(t))
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
	t.ResumedFrom, t.ResumeNote = 0, ""
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
func (s worker) checkRecord(t *Task, id, model string) error {
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

// localPaths returns where a worker reads and writes task t (checked by
// checkRecord) under its own roots. With the files in the object store
// (t.Files) they are this worker's own, named by the task id: its upload,
// which it takes from the store now into its private directory (see
// privateDir), and its result, stored and removed when the task is done.
// Otherwise they are the record's relative paths, which the run opens
// inside the roots (openTask).
func (s worker) localPaths(ctx context.Context, t *Task) (in, out string, err error) {
	in, out = filepath.Join(s.cfg.InputRoot, t.InputRel), s.outputPath(t)
	if !t.Files || !t.Upload {
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

// outputPath is where a worker writes task t (see localPaths).
func (s worker) outputPath(t *Task) string {
	if t.Files {
		return filepath.Join(s.cfg.OutputRoot, "result-"+t.ID+outputExt(t.OutputRel))
	}
	return filepath.Join(s.cfg.OutputRoot, t.OutputRel)
}

// getUpload takes a worker's upload from the object store (a seam for
// tests).
var getUpload = WorkQueue.GetUpload

// dropUpload removes the copy of its upload a worker took for task t
// into its private directory (localPaths), once its run is over.
func (s worker) dropUpload(t *Task) {
	if t.Files && t.Upload && t.in != "" {
		os.Remove(t.in)
	}
}

// heartbeat renews the lease of task t's message m (marks it in progress,
// waiting for the server's answer) every AckWait/3 until ctx ends. A
// failure or two (a NATS node failing over) is waited out; but once no
// renewal has been answered for 2/3 of AckWait, the task may go to
// another worker at AckWait: this one cancels it then, so that no task
// runs twice at once.
func (s worker) heartbeat(ctx context.Context, t *Task, m Work) {
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
// the task is over and its record says so, handed back after a delay when
// its output was locked (handBack), at once when the worker stopped
// before, or when the final record could not be written (the task then
// runs again rather than stay "processing" for ever).
func (s worker) release(t *Task) {
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
	case t.retryIn > 0:
		t.msg.NakAfter(t.retryIn)
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
func (s worker) saveFinal(t *Task) {
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
