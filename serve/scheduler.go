package serve

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// scheduler is the Service's record of its tasks, their queue and the
// workers that run them: every task is kept in the store (st) and, while
// the Service runs, in tasks; the pending ones wait in queue, the running
// ones are in running. mu guards the fields from tasks to outputs, and
// every Task in tasks (a running task's runner has its own copy); the
// fields above mu are set once, by the constructor.
//
// What differs between New, NewRemote and NewWorker is the placement
// each sets (placement.go), which the scheduler asks: local (New) runs
// the tasks here (work, next, runOne); with remoteAPI (NewRemote) the
// queue and the running list mirror the work queue as the store's
// records say (remote.go); a worker (NewWorker) takes its tasks from the
// work queue (worker.go) and runs them here.
type scheduler struct {
	st        TaskStore    // the Service's store, which it closes
	placement placement    // what the constructor's kind of Service does (placement.go)
	log       *slog.Logger // Config.Logger

	mu      sync.Mutex
	tasks   map[string]*Task
	queue   Queue   // pending task ids
	running []*Task // running tasks, oldest first
	seq     uint64
	closing bool

	outputs map[string][]string // the ids of the tasks (in tasks) of each output path

	wake     chan struct{} // a task is queued (or a worker may take the next)
	workers  sync.WaitGroup
	stop     context.CancelFunc
	stopOnce sync.Once
}

// queueView is the scheduler's tasks at one moment (snapshot).
type queueView struct {
	running []string // the running tasks' ids, oldest first
	pending []string // the pending tasks' ids in order (Queue.IDs)
	models  []string // the pending tasks' models, in that order
	total   int      // the number of tasks
	// With count: the number of tasks by status, and of runs started
	// again after an interrupted one (Attempts-1 over the tasks).
	byStatus map[Status]int
	reruns   int
}

// snapshot returns the queue and the running tasks as they are now, and
// with count the tasks by status (a pass over every task).
func (s *scheduler) snapshot(count bool) queueView {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := queueView{running: runningIDs(s.running), pending: s.queue.IDs(), total: len(s.tasks)}
	for _, id := range q.pending {
		q.models = append(q.models, s.tasks[id].ModelName)
	}
	if count {
		q.byStatus = map[Status]int{}
		for _, t := range s.tasks {
			q.byStatus[t.Status]++
			q.reruns += max(t.Attempts-1, 0)
		}
	}
	return q
}

// queuePos is the position of task id in the queue, from 1 (0: not
// queued).
func (s *scheduler) queuePos(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.queue.IDs() {
		if q == id {
			return i + 1
		}
	}
	return 0
}

// ErrQueueFull is returned by Submit when MaxQueue tasks are pending.
var ErrQueueFull = errors.New("task queue is full")

// isTemporary reports whether name is a hidden temporary of vsr's encoders
// (the private directories ".STEM.vsr-*", and the files of older
// versions) or of an upload (".upload-*").
func isTemporary(name string) bool {
	return strings.HasPrefix(name, ".") && (strings.Contains(name, ".vsr-") || strings.HasPrefix(name, ".upload-"))
}

// uploadName matches the names vsr gives uploads (upload-OWNER-UUID.EXT,
// OWNER the instance that stored it, see uploadPath; upload-UUID.EXT from
// versions before owners), so that a user's own files in a shared input
// root are never swept. Its first group is the owner.
var uploadName = regexp.MustCompile(`^upload-(?:([0-9a-f]{16})-)?[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}(\.[a-z0-9]{1,9})?$`)

// sweepUploads removes the uploads in the input root that this instance
// stored (see mayRemoveUpload) and that none of its pending or running
// tasks reads: left by a crash between storing an upload and storing its
// task, or by a task whose end was not recorded. An upload whose task
// another process is storing holds a lock (see owner.go), and the tasks
// are read again once the candidates are locked, so that a task stored
// meanwhile keeps its upload.
func (s *Service) sweepUploads() {
	used := func(ts iter.Seq[*Task]) map[string]bool {
		u := map[string]bool{}
		for t := range ts {
			if t.Upload && !t.Status.Final() {
				u[filepath.Base(t.Input)] = true
			}
		}
		return u
	}
	inUse := used(maps.Values(s.tasks))
	var held []*ownerLock
	defer func() {
		for _, l := range held {
			l.release(false)
		}
	}()
	ents, _ := os.ReadDir(s.cfg.InputRoot)
	for _, e := range ents {
		if e.Type().IsRegular() && s.mayRemoveUpload(e.Name()) && !inUse[e.Name()] {
			if l := tryLockExisting(filepath.Join(s.cfg.InputRoot, e.Name())); l != nil {
				held = append(held, l)
			}
		}
	}
	if len(held) == 0 {
		return
	}
	ts, err := s.st.Load()
	if err != nil {
		return
	}
	inUse = used(slices.Values(ts))
	for _, l := range held {
		if !inUse[filepath.Base(l.path)] && os.Remove(l.path) == nil {
			s.log.Info("removed an upload no task reads", "path", l.path)
		}
	}
}

// loadTasks returns the stored tasks in submission order.
func (s *scheduler) loadTasks() ([]*Task, error) {
	ts, err := s.st.Load()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ts, func(a, b *Task) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return ts, nil
}

// recover loads the stored tasks of a Service that runs them: finished
// ones are listed, pending ones queued again in order, and those that
// were processing run again.
func (s local) recover() error {
	ts, err := s.loadTasks()
	if err != nil {
		return err
	}
	for _, t := range ts {
		s.track(t)
		s.seq = max(s.seq, t.Seq)
		switch t.Status {
		case Processing:
			if t.Attempts >= s.cfg.MaxAttempts {
				now := time.Now()
				t.Status, t.Ended = Failed, &now
				t.Error = fmt.Sprintf("interrupted %d times (the server stopped while it ran)", t.Attempts)
				t.ErrorType = "Interrupted"
				if err := s.st.Put(t); err != nil {
					return err
				}
				s.dropJournal(s.cfg.OutputRoot, t.Output)
				continue
			}
			t.Status, t.FramesDone, t.Rerun = Pending, 0, true
			if err := s.st.Put(t); err != nil {
				return err
			}
			s.log.Info("task interrupted by a restart runs again", "task", t.ID)
			s.queue.Push(t.ID)
		case Pending:
			s.queue.Push(t.ID)
		}
	}
	if s.queue.Len() > 0 {
		s.signal()
	}
	return nil
}

func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// submit queues t; it checks the queue's room, the id and the output (the
// HTTP layer has validated the request and resolved the paths). t.ID,
// t.Input and t.Output must be set. upload, if set, is the hidden name of
// an uploaded input: it takes its name t.Input only as the task is stored,
// so that a crash leaves no visible upload without a task.
func (s *Service) submit(t *Task, upload string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errors.New("the service is shutting down")
	}
	if s.queue.Len() >= s.cfg.MaxQueue {
		return ErrQueueFull
	}
	if _, ok := s.tasks[t.ID]; ok {
		return errDuplicate
	}
	for _, id := range s.outputs[t.Output] {
		if o := s.tasks[id]; !o.Status.Final() {
			return &conflictError{fmt.Sprintf("save_result_path %s is the output of task %s (%s): wait for it to finish, or choose another path", t.Output, o.ID, o.Status)}
		}
	}
	if _, err := os.Lstat(t.Output); err == nil && !t.Request.Overwrite {
		return &conflictError{fmt.Sprintf("save_result_path %s exists: choose another path, or set \"overwrite\": true to replace it", t.Output)}
	}
	if upload != "" {
		if err := os.Rename(upload, t.Input); err != nil {
			return fmt.Errorf("store upload: %w", err)
		}
	}
	s.seq++
	t.Seq = s.seq
	t.Status = Pending
	t.Created = time.Now()
	if mn, ok := s.runner.(ModelNamer); ok {
		var err error
		if t.ModelName, err = mn.ModelOf(&t.Request); err != nil {
			return err
		}
	}
	t.ModelHash = s.hashes[t.ModelName]
	t.InputRel, _ = filepath.Rel(s.cfg.InputRoot, t.Input)
	t.OutputRel, _ = filepath.Rel(s.cfg.OutputRoot, t.Output)
	s.seal(t)
	if err := s.st.Put(t); err != nil {
		if upload != "" {
			os.Remove(t.Input)
		}
		return fmt.Errorf("store task: %w", err)
	}
	if err := s.placement.enqueue(t); err != nil {
		return err
	}
	s.track(t)
	s.queue.Push(t.ID)
	s.m.submitted.Inc()
	s.signal()
	return nil
}

var errDuplicate = errors.New("a task with this task_id exists")

// track adds t to the tasks (or replaces its record) and to the index of
// outputs, which submit reads instead of every task; s.mu is held.
func (s *scheduler) track(t *Task) {
	if _, ok := s.tasks[t.ID]; !ok {
		s.outputs[t.Output] = append(s.outputs[t.Output], t.ID)
	}
	s.tasks[t.ID] = t
}

// forget takes task id out of the tasks and the index; s.mu is held.
func (s *scheduler) forget(id string) {
	t, ok := s.tasks[id]
	if !ok {
		return
	}
	delete(s.tasks, id)
	ids := slices.DeleteFunc(s.outputs[t.Output], func(o string) bool { return o == id })
	if len(ids) == 0 {
		delete(s.outputs, t.Output)
	} else {
		s.outputs[t.Output] = ids
	}
}

// retain deletes the finished tasks past their retention (Config.
// KeepFinished, KeepFinishedCount) until ctx ends.
func (s *Service) retain(ctx context.Context) {
	defer s.workers.Done()
	every := time.Minute
	if s.cfg.KeepFinished > 0 {
		every = min(every, max(s.cfg.KeepFinished/2, 10*time.Millisecond))
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s.prune(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// prune deletes from the store and the list the finished tasks that ended
// more than KeepFinished before now, and the oldest beyond
// KeepFinishedCount. It holds s.mu for a batch of deletions at a time, so
// that a first pass over a long history does not hold up requests.
func (s *Service) prune(now time.Time) {
	s.mu.Lock()
	var done []*Task
	for _, t := range s.tasks {
		if t.Status.Final() {
			done = append(done, t)
		}
	}
	s.mu.Unlock()
	ended := func(t *Task) time.Time {
		if t.Ended != nil {
			return *t.Ended
		}
		return t.Created
	}
	slices.SortFunc(done, func(a, b *Task) int { return ended(b).Compare(ended(a)) }) // latest first
	var drop []string
	for i, t := range done {
		if s.cfg.KeepFinished > 0 && now.Sub(ended(t)) > s.cfg.KeepFinished ||
			s.cfg.KeepFinishedCount > 0 && i >= s.cfg.KeepFinishedCount {
			drop = append(drop, t.ID)
		}
	}
	for batch := range slices.Chunk(drop, 64) {
		s.mu.Lock()
		for _, id := range batch {
			if err := s.st.Delete(id); err != nil {
				s.mu.Unlock()
				s.log.Warn("delete a finished task", "task", id, "err", err)
				return
			}
			s.forget(id)
		}
		s.mu.Unlock()
	}
}

// errNotFinished refuses to delete the record of a task still pending or
// running.
var errNotFinished = errors.New("the task has not finished: cancel it first")

// deleteRecord deletes finished task id from the store and the list (its
// output file, if any, stays): ok is false when there is no such task.
func (s *Service) deleteRecord(id string) (ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return false, nil
	}
	if !t.Status.Final() {
		return true, errNotFinished
	}
	if err := s.st.Delete(id); err != nil {
		return true, err
	}
	s.forget(id)
	return true, nil
}

// conflictError refuses a task whose output another task targets or a file
// holds (409).
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

// get returns a copy of the task with id.
func (s *scheduler) get(id string) (*Task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return nil, false
	}
	return t.clone(), true
}

// list returns copies of all tasks in submission order.
func (s *scheduler) list() []*Task {
	s.mu.Lock()
	out := make([]*Task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t.clone())
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *Task) int { return int(a.Seq) - int(b.Seq) })
	return out
}

type cancelResult int

const (
	cancelNotFound cancelResult = iota
	cancelDone                  // the task was cancelled (now or before)
	cancelNothing               // the task had finished already
	cancelStopping              // asked to stop, still running when the wait ended
)

// cancel cancels a pending task at once, or a running one and waits (up to
// ctx) for it to stop (placement.cancel). It returns the outcome and the
// task's state.
func (s *scheduler) cancel(ctx context.Context, id string) (cancelResult, *Task) {
	return s.placement.cancel(ctx, id)
}

// cancel cancels a task that runs here (local).
func (s local) cancel(ctx context.Context, id string) (cancelResult, *Task) {
	s.mu.Lock()
	t, ok := s.tasks[id]
	if !ok {
		s.mu.Unlock()
		return cancelNotFound, nil
	}
	switch t.Status {
	case Pending:
		s.queue.Remove(id)
		now := time.Now()
		t.Status, t.Ended, t.Error = Cancelled, &now, "task cancelled by user"
		s.persist(t)
		if t.Upload {
			os.Remove(t.Input)
		}
		c := t.clone()
		s.mu.Unlock()
		s.dropJournal(s.cfg.OutputRoot, t.Output) // an interrupted run's
		return cancelDone, c
	case Processing:
		t.cancelAsked = true
		t.cancel()
		done := t.done
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		c, _ := s.get(id)
		switch c.Status {
		case Cancelled:
			return cancelDone, c
		case Processing:
			return cancelStopping, c
		}
		return cancelNothing, c
	}
	return s.cancelEnded(t)
}

// cancelEnded answers the cancel of task t, which has ended; s.mu is
// held, and released.
func (s *scheduler) cancelEnded(t *Task) (cancelResult, *Task) {
	c := t.clone()
	s.mu.Unlock()
	if c.Status == Cancelled { // as LightX2V: cancelling again succeeds
		return cancelDone, c
	}
	return cancelNothing, c
}

// persist writes t; s.mu is held. A store failure is logged: the task goes
// on in memory.
func (s *scheduler) persist(t *Task) {
	if t.lost { // a worker's task that is another's now: its record too
		return
	}
	s.saved(t, s.st.Put(t))
}

// saved takes in err, the outcome of writing task t; s.mu is held.
func (s *scheduler) saved(t *Task, err error) {
	t.unsaved = err != nil && !errors.Is(err, errChanged)
	if err == nil {
		return
	}
	if errors.Is(err, errChanged) && t.cancel != nil && !t.lost && s.placement.takenOver(t) {
		return
	}
	s.log.Error("store task", "task", t.ID, "err", err)
}

// work runs queued tasks one at a time until ctx is cancelled (Workers
// of these run at once).
func (s *Service) work(ctx context.Context) {
	defer s.workers.Done()
	for {
		t, tctx := s.placement.await(ctx)
		if t == nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		// Another idle worker may take the next pending task.
		select {
		case s.wake <- struct{}{}:
		default:
		}
		s.runOne(ctx, tctx, t)
		s.placement.release(t)
		if ctx.Err() != nil {
			return
		}
	}
}

// await takes the next task of the local queue, or waits for one to be
// queued (nil, when it waited).
func (s local) await(ctx context.Context) (*Task, context.Context) {
	if t, tctx := s.next(ctx); t != nil {
		return t, tctx
	}
	select {
	case <-ctx.Done():
	case <-s.wake:
	}
	return nil, nil
}

// next pops the first pending task, marks it processing and gives it a
// context of its own.
func (s *scheduler) next(parent context.Context) (*Task, context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, nil
	}
	id, ok := s.queue.Pop()
	if !ok {
		return nil, nil
	}
	t := s.tasks[id]
	now := time.Now()
	t.Status, t.Started, t.Ended, t.Error = Processing, &now, nil, ""
	t.FramesDone, t.ResumedFrom, t.ResumeNote = 0, 0, ""
	t.Attempts++
	t.done = make(chan struct{})
	var ctx context.Context
	ctx, t.cancel = context.WithCancel(parent)
	s.running = append(s.running, t)
	s.persist(t)
	return t, ctx
}

func (s *Service) runOne(parent, ctx context.Context, t *Task) {
	s.mu.Lock()
	cancel := t.cancel
	orig := t.clone()
	s.mu.Unlock()
	if t.in != "" { // a worker's: its own roots
		orig.Input, orig.Output = t.in, t.out
	}
	work, files, openErr := s.openTask(orig)
	if files != nil {
		defer files.close()
	}
	var output string // the output as the runner's copy names it
	var lock *ownerLock
	if openErr == nil {
		// Held while the task's temporaries live: no sweep removes them.
		lock, openErr = lockOutput(ctx, work.Output, orig.Output, lockWait(t))
		output, work.Output = work.Output, resultTemp(work.Output)
	}
	if openErr == nil && orig.Rerun {
		removeStaleResults(files.out, filepath.Base(output), s.log)
	}
	// The journal an interrupted run left (see journal.go), and whether
	// this run's progress has looked for its own.
	journaled, looked := openErr == nil && hasJournal(files.out, output), false

	// Progress is saved every second, in the background and outside s.mu
	// (a slow store must hold up neither the run nor the lease), one save
	// at a time, until the run ends: its last save lands before the result
	// is placed (an older copy of t must not overwrite the record of
	// Wrote).
	lastSave := time.Now()
	var saving sync.WaitGroup
	inFlight, ran := false, false // a save is under way, the run is over (s.mu)
	progress := func(done, total int) {
		s.mu.Lock()
		if !looked {
			looked = true
			if orig.Rerun && !journaled && hasJournal(files.out, output) {
				t.ResumeNote = restartNote
				s.log.Warn(restartNote, "task", t.ID)
			}
		}
		if done > t.FramesDone {
			s.m.frames.Add(float64(done - t.FramesDone))
		}
		t.FramesDone, t.FramesTotal = done, total
		var c *Task
		if time.Since(lastSave) >= time.Second && !t.lost && !inFlight && !ran {
			lastSave, c, inFlight = time.Now(), t.clone(), true
			saving.Add(1)
		}
		s.mu.Unlock()
		if c != nil {
			go func() {
				defer saving.Done()
				err := s.st.Put(c)
				s.mu.Lock()
				s.saved(t, err)
				inFlight = false
				s.mu.Unlock()
			}()
		}
	}
	start := time.Now()
	errType, err := "PathError", openErr
	if err == nil {
		work.Replace = true // its hidden result; placeResult decides
		work.Resume = true
		work.Resumed = func(frame int) {
			s.mu.Lock()
			t.ResumedFrom, t.FramesDone = frame, frame // progress counts the frames after it
			s.mu.Unlock()
		}
		work.Notice = func(line string) {
			line = files.names.Replace(line)
			s.log.Info("task's journal: "+line, "task", t.ID)
			s.mu.Lock()
			t.ResumeNote = line
			s.mu.Unlock()
		}
		if errType, err = s.checkRun(ctx, work); err == nil {
			errType, err = s.safeRun(ctx, work, progress)
		}
		s.mu.Lock()
		ran = true
		s.mu.Unlock()
		saving.Wait()
		if err == nil {
			errType, err = s.place(ctx, t, work.Output, output, orig)
		}
		if err != nil {
			msg := strings.ReplaceAll(err.Error(), work.Output, output)
			err = errors.New(files.names.Replace(msg))
		}
	}
	var result string
	if err == nil && orig.Files { // a worker's result goes to the object store
		if result, err = s.storeResult(orig); err != nil {
			errType = "StoreError"
		}
	}
	sec := time.Since(start).Seconds()
	cancel()
	s.mu.Lock()
	rerun := again(t, err, parent)
	handBack := !rerun && s.handBack(t, openErr)
	s.mu.Unlock()
	if openErr == nil && !rerun { // over: its journal is of no use (see journal.go)
		removeJournal(files.out, orig.Output, s.log) // named as the client knows it in the log
	}
	lock.release(true)

	s.mu.Lock()
	now := time.Now()
	t.Ended = &now
	switch {
	case err == nil:
		t.Status, t.Error, t.Result = Completed, "", result
		t.Width, t.Height, t.FPS, t.Devices = work.Width, work.Height, work.FPS, work.Devices
		t.Carried, t.Dropped = work.Carried, work.Dropped
		t.ResumedFrom = work.ResumedFrom
		s.m.resumed.Add(float64(work.ResumedFrom))
		if t.FramesTotal > 0 {
			t.FramesDone = t.FramesTotal
		}
		if sec > 0 && t.FramesDone > 0 {
			s.m.fps.Set(float64(t.FramesDone) / sec)
		}
	case t.cancelAsked:
		t.Status, t.Error = Cancelled, "task cancelled by user"
	case rerun || handBack:
		// Shutting down, a worker that lost its lease, or one that found
		// the output locked: the task runs again at the next start, or on
		// another worker, from its journal.
		t.Status, t.Ended, t.FramesDone, t.Rerun = Pending, nil, 0, true
		t.Attempts--
	default:
		t.Status, t.Error, t.ErrorType = Failed, oneLine(err.Error()), errType
		s.log.Warn("task failed", "task", t.ID, "err", t.Error)
	}
	if work != nil && work.Devices != "" {
		t.Devices = work.Devices
	}
	if t.Status.Final() {
		s.m.duration.WithLabelValues(string(t.Status)).Observe(sec)
		if t.Devices != "" {
			s.m.byDevices.WithLabelValues(t.Devices, string(t.Status)).Inc()
		}
	}
	s.placement.ran(t)
	s.persist(t)
	s.running = slices.DeleteFunc(s.running, func(r *Task) bool { return r == t })
	t.cancel = nil
	close(t.done)
	s.mu.Unlock()
	s.log.Info("task finished", "task", t.ID, "status", t.Status, "seconds", sec)
	// A task's frames and buffers are garbage now: give the memory back to
	// the system instead of keeping the heap at its peak between tasks.
	debug.FreeOSMemory()
}

// lockWait is how long task t waits for its output's lock: a worker's
// (delivered by the work queue) leasedLockWait, else outputLockWait.
func lockWait(t *Task) time.Duration {
	if t.msg != nil {
		return leasedLockWait
	}
	return outputLockWait
}

// handBack reports whether a worker's task t, whose run could not start
// because another process held its output's lock (openErr) for all of
// leasedLockWait, goes back to the work queue, to come again after
// AckWait (t.retryIn), rather than fail: while it has attempts left, since
// the holder may be a worker frozen past its lease, which stops once it
// runs again. These hand-backs count as attempts, so that an output
// locked for good fails its task in the end. s.mu is held.
func (s *Service) handBack(t *Task, openErr error) bool {
	var busy *errOutputBusy
	if t.msg == nil || t.cancelAsked || !errors.As(openErr, &busy) || t.Attempts >= s.cfg.MaxAttempts {
		return false
	}
	t.retryIn = s.cfg.AckWait
	s.log.Warn("the task's output is locked by another process: handing the task back", "task", t.ID, "retry_in", t.retryIn)
	return true
}

// again reports whether task t, whose run ended with err, is to run
// again: stopped by a shutdown (parent ended) or by the loss of its lease,
// not by a cancel. s.mu is held.
func again(t *Task, err error, parent context.Context) bool {
	return err != nil && !t.cancelAsked && (parent.Err() != nil || t.lost)
}

// place puts the result tmp of running task t at output (see
// placeResult), having recorded its identity; orig is t as the run began.
// A run cancelled meanwhile (ctx), or a worker's that lost its lease to
// another, puts nothing in place: the checks and the rename are made
// under s.mu, which the lease's loss takes.
func (s *Service) place(ctx context.Context, t *Task, tmp, output string, orig *Task) (string, error) {
	id, err := resultID(tmp)
	if err != nil {
		return "RuntimeError", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Wrote = append(t.Wrote, id)
	s.persist(t)
	if err = ctx.Err(); err == nil && t.lost {
		err = errors.New("the lease on the task was lost: it runs on another worker")
	}
	if err == nil {
		err = placeResult(tmp, output, orig.Output, orig.Request.Overwrite, orig.Wrote)
	}
	if err != nil {
		os.Remove(tmp)
		return errorType(err), err
	}
	return "", nil
}

// safeRun runs the runner, turning a panic into an error so that one bad
// task cannot take the service down. It also classifies a failure for the
// status's error_type.
func (s *Service) safeRun(ctx context.Context, t *Task, progress func(int, int)) (errType string, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("runner panic", "task", t.ID, "panic", r, "stack", string(debug.Stack()))
			errType, err = "InternalError", fmt.Errorf("internal error: %v", r)
		}
	}()
	err = s.runner.Run(ctx, t, progress)
	return errorType(err), err
}

// errorType names the kind of a runner's error.
func errorType(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{video.ErrNotVideo, "NotVideo"}, {video.ErrNoFrames, "NoFrames"},
		{video.ErrTruncated, "TruncatedVideo"}, {video.ErrCorrupt, "CorruptVideo"},
		{video.ErrExists, "OutputExists"}, {video.ErrNoFFmpeg, "NoFFmpeg"},
		{video.ErrFormat, "InputFormat"}, {video.ErrLimit, "InputLimit"},
		{video.ErrDiskFull, "DiskFull"}, {video.ErrIncomplete, "IncompleteOutput"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "RuntimeError"
}

// stopWorker stops taking tasks and interrupts the running ones, which
// stay queued for the next start (their temporaries are removed by the
// runner), and waits for the workers to end. Submits are refused from then
// on.
func (s *Service) stopWorker() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.stop()
		s.live.stop()
		s.workers.Wait()
		if s.announced != nil { // a worker: gone from the list of workers
			<-s.announced
		}
	})
}

// runningIDs are the ids of the running tasks, oldest first.
func runningIDs(ts []*Task) []string {
	ids := []string{}
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}

// launch runs f in a goroutine that stopWorker waits for, after added
// (called under the scheduler's lock), unless the Service is stopping:
// then it calls neither and returns false.
func (s *scheduler) launch(added, f func()) bool {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return false
	}
	added()
	s.workers.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.workers.Done()
		f()
	}()
	return true
}

// isClosing reports whether the Service is stopping (stopWorker).
func (s *scheduler) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}
