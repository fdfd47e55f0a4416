package serve

import (
	"cmp"
	"context"
	"encoding/json"
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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Tasks on other machines. With the tasks on NATS JetStream (Config.NATS)
// a Service can be the API alone (Config.Remote, vsr serve --workers 0):
// it records each task in the task bucket and puts its id on the work
// queue of its model, and follows the bucket (a watch), where the workers
// write the tasks' states. A worker (Config.Pull, vsr worker) is a Service
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

// js returns the JetStream store (nil when the tasks are elsewhere; a
// store that wraps it, as tests' do, gives it by jetStream).
func (s *Service) js() *jsStore {
	if j, ok := s.st.(interface{ jetStream() *jsStore }); ok {
		return j.jetStream()
	}
	return nil
}

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
		w, err := s.js().kv.WatchAll(ctx)
		if err != nil {
			s.log.Warn("following the tasks on NATS", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // the end of the initial values, or a deletion
			}
			var t Task
			if json.Unmarshal(e.Value(), &t) != nil || t.ID != e.Key() {
				continue
			}
			s.js().seen(t.ID, e.Revision())
			s.mu.Lock()
			s.apply(&t)
			s.requeue()
			s.mu.Unlock()
		}
		w.Stop()
	}
}

// cancelRemote asks the worker running task id to stop and waits (up to
// ctx) for its record to say it stopped.
func (s *Service) cancelRemote(ctx context.Context, id string) (cancelResult, *Task) {
	j := s.js()
	if err := j.nc.Publish(cancelSubject+id, nil); err != nil {
		s.log.Warn("cancel", "task", id, "err", err)
	}
	for {
		t, err := j.get(id)
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
		c, err := s.js().consumer(m, s.cfg.AckWait)
		if err != nil {
			return err
		}
		s.pullFrom = append(s.pullFrom, c)
		// The work queue's subject also reaches plain subscribers: a
		// task's arrival wakes an idle worker at once.
		if _, err := s.js().nc.Subscribe(workSubject(m), func(*nats.Msg) { s.signal() }); err != nil {
			return err
		}
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
		if err := s.js().announce(info); err != nil {
			s.log.Warn("announcing this worker on NATS", "err", err)
		}
		select {
		case <-ctx.Done():
			s.js().leave(info.Name)
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
		batch, err := c.FetchNoWait(1)
		if err != nil {
			s.log.Warn("taking a task from NATS", "err", err)
			continue
		}
		for m := range batch.Messages() {
			if t, ctx := s.take(parent, m); t != nil {
				return t, ctx
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
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
// is gone, finished or cancelled, or fails a task delivered too often.
func (s *Service) take(parent context.Context, m jetstream.Msg) (*Task, context.Context) {
	id := string(m.Data())
	md, err := m.Metadata()
	if err != nil {
		m.Nak()
		return nil, nil
	}
	j := s.js()
	t, err := j.get(id)
	if err != nil {
		s.log.Warn("reading a task from NATS", "task", id, "err", err)
		m.Nak()
		return nil, nil
	}
	if t == nil || t.Status.Final() {
		m.Ack()
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if int(md.NumDelivered) > s.cfg.MaxAttempts {
		t.Status, t.Ended = Failed, &now
		t.Error = fmt.Sprintf("delivered %d times: the workers that took it stopped or lost their connection before it finished (--max-attempts %d)", md.NumDelivered-1, s.cfg.MaxAttempts)
		t.ErrorType = "Interrupted"
		if err := j.Put(t); err == nil {
			m.Term()
		}
		return nil, nil
	}
	// This worker's roots: the task's paths relative to the API's.
	t.Input, t.Output = filepath.Join(s.cfg.InputRoot, t.InputRel), filepath.Join(s.cfg.OutputRoot, t.OutputRel)
	if t.Files && t.Upload {
		if err := os.MkdirAll(filepath.Dir(t.Input), 0o755); err == nil {
			err = j.getFile("in/"+id, t.Input)
		}
		if err != nil {
			s.log.Warn("taking an upload from NATS", "task", id, "err", err)
			m.Nak()
			return nil, nil
		}
	}
	if t.Files {
		os.MkdirAll(filepath.Dir(t.Output), 0o755)
	}
	if md.NumDelivered > 1 {
		removeTemporariesOf(t.Output, s.log)
		t.Rerun = true
	}
	t.Status, t.Started, t.Ended, t.Error = Processing, &now, nil, ""
	t.FramesDone, t.Attempts, t.Worker = 0, int(md.NumDelivered), s.cfg.Name
	if err := j.Put(t); err != nil {
		// Changed meanwhile (cancelled by the API): look again later.
		s.log.Info("task changed as it was taken", "task", id, "err", err)
		m.Nak()
		return nil, nil
	}
	t.msg = m
	t.done = make(chan struct{})
	var ctx context.Context
	ctx, t.cancel = context.WithCancel(parent)
	sub, err := j.nc.Subscribe(cancelSubject+id, func(*nats.Msg) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if t.cancel != nil {
			t.cancelAsked = true
			t.cancel()
		}
	})
	if err == nil {
		t.unsub = sub
	}
	go s.heartbeat(ctx, t, m)
	s.tasks[id] = t
	s.running = append(s.running, t)
	return t, ctx
}

// heartbeat marks task t's message m in progress every AckWait/3 until
// ctx ends. A failure or two (a NATS node failing over) is waited out;
// but once no mark has gone through for 2/3 of AckWait, the task may go
// to another worker at AckWait: this one stops it first, so that no task
// runs twice at once.
func (s *Service) heartbeat(ctx context.Context, t *Task, m jetstream.Msg) {
	tick := time.NewTicker(s.cfg.AckWait / 3)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			err := m.InProgress()
			if err == nil {
				last = time.Now()
			}
			if err != nil && time.Since(last) >= 2*s.cfg.AckWait/3 {
				s.log.Warn("lost the lease on a running task: stopping it", "task", t.ID, "err", err)
				s.mu.Lock()
				t.lost = true
				if t.cancel != nil {
					t.cancel()
				}
				s.mu.Unlock()
				return
			}
		}
	}
}

// release settles the message of a task a worker ran: acknowledged when
// the task is over and its record says so, handed back at once when the
// worker stopped before, or when the final record could not be written
// (the task then runs again rather than stay "processing" for ever).
func (s *Service) release(t *Task) {
	if t.unsub != nil {
		t.unsub.Unsubscribe()
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

// removeTemporariesOf removes the hidden temporaries an interrupted run
// left beside output (its encoders' private directory and files).
func removeTemporariesOf(output string, log interface{ Info(string, ...any) }) {
	dir, stem := filepath.Dir(output), strings.TrimSuffix(filepath.Base(output), filepath.Ext(output))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if isTemporary(n) && ownedBy(n, []string{stem + ".", filepath.Base(output) + "."}) {
			if os.RemoveAll(filepath.Join(dir, n)) == nil {
				log.Info("removed temporaries of an interrupted attempt", "path", filepath.Join(dir, n))
			}
		}
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
	name := "out/" + t.ID
	if err := s.js().putFile(name, t.Output); err != nil {
		return "", err
	}
	os.Remove(t.Output)
	return name, nil
}

// serveObject streams task t's result from the object store.
func (s *Service) serveObject(w http.ResponseWriter, r *http.Request, t *Task) {
	obj, err := s.js().files.Get(r.Context(), t.Result)
	if err != nil {
		writeError(w, http.StatusNotFound, "task result is not in the NATS object store: "+err.Error())
		return
	}
	defer obj.Close()
	info, err := obj.Info()
	if err != nil {
		writeError(w, http.StatusNotFound, "task result: "+err.Error())
		return
	}
	name := filepath.Base(t.Output)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	w.Header().Set("Content-Type", cmp.Or(mime.TypeByExtension(filepath.Ext(name)), "application/octet-stream"))
	w.Header().Set("Content-Length", strconv.FormatUint(info.Size, 10))
	io.Copy(w, obj)
}
