package serve

import (
	"context"
	"os"
)

// placement is what differs between the Services that New, NewRemote and
// NewWorker make: what a Service does at start, where a submitted task
// goes, who runs it and how a cancel reaches it. Each constructor sets
// one (local, remoteAPI, worker: the last two embed local and override
// what differs); the scheduler and the API ask it, never which
// constructor made the Service.
type placement interface {
	// open readies the Service once its store is open (the tasks stored,
	// the work queue); start starts its goroutines, which end with ctx
	// (Service.workers counts them).
	open() error
	start(ctx context.Context)
	// enqueue hands task t, submitted and stored, to whoever runs it; an
	// error refuses the submit. s.mu is held.
	enqueue(t *Task) error
	// cancel cancels task id (scheduler.cancel).
	cancel(ctx context.Context, id string) (cancelResult, *Task)
	// await takes the next task to run here, marked processing, with a
	// context of its own; nil when none came for a while (ctx ended, or
	// the worker was woken).
	await(ctx context.Context) (*Task, context.Context)
	// ran takes in the end of task t's run here, its status set, before
	// its record is written; s.mu is held.
	ran(t *Task)
	// release settles task t once its run here is over (s.mu not held).
	release(t *Task)
	// takenOver reports whether a write of task t, running here, that
	// found its record changed (errChanged) means that another process
	// has taken it over; it then stops the run. s.mu is held.
	takenOver(t *Task) bool

	// For the HTTP API (api): checkResult refuses to serve the result of
	// completed task t (409) when its record cannot be trusted;
	// queueStatus and serviceStatus add what the placement reports to
	// the bodies of the queue's and the service's status (q: the queue
	// now); streamRunner is the runner of live sessions, when they run
	// here (also in the metrics).
	checkResult(t *Task) error
	queueStatus(out map[string]any, q queueView)
	serviceStatus(out map[string]any)
	streamRunner() (StreamRunner, bool)
}

// local is the placement of New: a Service that queues its tasks and runs
// them (Config.Workers at once).
type local struct{ *Service }

func (s local) open() error {
	if err := s.recover(); err != nil {
		return err
	}
	s.sweep()
	return nil
}

// sweep removes from the roots what interrupted work left, once the
// stored tasks are loaded: the temporaries whose owners are gone, but the
// journals of the tasks that will run again, and the uploads no task
// reads.
func (s *Service) sweep() {
	removeTemporaries(s.cfg.OutputRoot, s.log, s.liveJournals())
	removeTemporaries(s.cfg.InputRoot, s.log, nil)
	s.sweepUploads()
}

func (s local) start(ctx context.Context) {
	s.startRetain(ctx)
	s.startWork(ctx)
}

func (local) enqueue(*Task) error { return nil }

func (s local) ran(t *Task) {
	switch {
	case t.Status == Completed && t.Upload: // kept for the page's previews
		s.keepPreviewInput(t)
	case t.Status.Final() && t.Upload: // an uploaded input is of no use once the task is over
		os.Remove(t.Input)
	}
}

func (local) release(*Task)        {}
func (local) takenOver(*Task) bool { return false }

func (local) checkResult(*Task) error               { return nil }
func (local) queueStatus(map[string]any, queueView) {}
func (local) serviceStatus(map[string]any)          {}

func (s local) streamRunner() (StreamRunner, bool) {
	sr, ok := s.runner.(StreamRunner)
	return sr, ok
}

// startRetain starts retain, when finished tasks are deleted
// (Config.KeepFinished, KeepFinishedCount).
func (s *Service) startRetain(ctx context.Context) {
	if s.cfg.KeepFinished > 0 || s.cfg.KeepFinishedCount > 0 {
		s.workers.Add(1)
		go s.retain(ctx)
	}
}

// startWork starts the Config.Workers goroutines that run tasks (work).
func (s *Service) startWork(ctx context.Context) {
	for range s.cfg.Workers {
		s.workers.Add(1)
		go s.work(ctx)
	}
}
