package serve

import (
	"cmp"
	"context"
	"io"
	"maps"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// remoteAPI is the placement of NewRemote: the API of workers on other
// machines, which records each task, queues it on the work queue of its
// model and follows the records the workers write (see cluster.go). It
// runs no task: the rest is local's, unused.
type remoteAPI struct{ local }

func (s remoteAPI) open() error {
	if s.wq == nil {
		return errNoJetStream
	}
	if err := s.hashModels(); err != nil {
		return err
	}
	if err := s.openSigner(); err != nil {
		return err
	}
	// Its own recover, not local's: a task processing on a worker stays
	// that worker's.
	if err := s.recover(); err != nil {
		return err
	}
	s.sweep()
	return nil
}

func (s remoteAPI) start(ctx context.Context) {
	s.workers.Add(1)
	go s.watch(ctx)
	s.startRetain(ctx)
}

// recover loads the stored tasks as they are: the workers' work queue
// holds what is left to run.
func (s remoteAPI) recover() error {
	ts, err := s.loadTasks()
	if err != nil {
		return err
	}
	for _, t := range ts {
		s.apply(t)
	}
	s.requeue()
	return nil
}

// enqueue puts task t on the work queue of its model; a failure fails it.
func (s remoteAPI) enqueue(t *Task) error {
	if err := s.wq.Enqueue(t.ID, t.ModelName); err != nil {
		now := time.Now()
		t.Status, t.Ended, t.Error, t.ErrorType = Failed, &now, oneLine(err.Error()), "QueueError"
		s.persist(t)
		return err
	}
	return nil
}

// cancel cancels a pending task in the bucket, or asks the worker that
// runs it to stop (cancelRemote).
func (s remoteAPI) cancel(ctx context.Context, id string) (cancelResult, *Task) {
	s.mu.Lock()
	t, ok := s.tasks[id]
	if !ok {
		s.mu.Unlock()
		return cancelNotFound, nil
	}
	switch t.Status {
	case Pending:
		// A worker may take it meanwhile: the write names the revision
		// read, and fails if the worker's came first.
		c := t.clone()
		now := time.Now()
		c.Status, c.Ended, c.Error = Cancelled, &now, "task cancelled by user"
		if err := s.st.Put(c); err != nil {
			s.mu.Unlock()
			return s.cancelRemote(ctx, id)
		}
		*t = *c
		s.queue.Remove(id)
		s.removeUpload(t)
		s.mu.Unlock()
		s.dropJournal(s.cfg.OutputRoot, t.Output) // an interrupted run's, where this API sees the workers' output root
		return cancelDone, c.clone()
	case Processing:
		s.mu.Unlock()
		return s.cancelRemote(ctx, id)
	}
	return s.cancelEnded(t)
}

// checkResult checks the seal of a record: one loaded at a restart may
// have been rewritten by a worker since this API accepted it.
func (s remoteAPI) checkResult(t *Task) error { return s.verifySeal(t) }

// queueStatus names the models of pending tasks that no connected worker
// serves (when the list of workers can be read).
func (s remoteAPI) queueStatus(out map[string]any, q queueView) {
	ws, err := s.wq.Workers()
	if err == nil {
		out["waiting_for_workers"] = unserved(q.models, ws)
	}
}

// serviceStatus lists the connected workers (null when the list cannot
// be read); with any, the service's status is "workers".
func (s remoteAPI) serviceStatus(out map[string]any) {
	ws, err := s.wq.Workers()
	if err != nil {
		ws = nil
	}
	out["workers"] = ws
	if len(ws) > 0 {
		out["service_status"] = "workers"
	}
}

// streamRunner: live sessions run where the devices are, and the API of
// remote workers has none.
func (remoteAPI) streamRunner() (StreamRunner, bool) { return nil, false }

// apply takes in a task's record as the bucket holds it; s.mu is held.
func (s *scheduler) apply(t *Task) {
	if old := s.tasks[t.ID]; old != nil {
		t.cancelAsked = old.cancelAsked
	}
	s.track(t)
	s.seq = max(s.seq, t.Seq)
}

// requeue rebuilds the queue (pending tasks in submission order) and the
// running list from the tasks; s.mu is held.
func (s *scheduler) requeue() {
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
func (s remoteAPI) watch(ctx context.Context) {
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
func (s remoteAPI) seen(t *Task) {
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
func (s remoteAPI) removeUpload(t *Task) {
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
func (s remoteAPI) cancelRemote(ctx context.Context, id string) (cancelResult, *Task) {
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

// serveObject streams task t's result from the object store: the object
// storeResult names, whatever the record says.
func (a *api) serveObject(w http.ResponseWriter, r *http.Request, t *Task) {
	obj, size, err := a.wq.OpenResult(r.Context(), resultObject(t.ID))
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
