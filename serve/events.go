package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// GET /v1/events pushes the tasks to the page as Server-Sent Events: a
// "task" event with a task's status view (as GET /v1/tasks/{id}/status
// shows it, queue_position included) when it first appears and each time
// it changes, a "removed" event with {"task_id"} when it leaves the store,
// and a "ready" event once the tasks present at the start have been sent.
// A comment line every keepAlive keeps proxies from closing an idle
// stream.
//
// Each subscriber's handler compares the tasks every eventInterval with
// what it sent last: no goroutine of its own, nothing kept once the
// client goes away (the request's context ends the loop), and a slow
// client only slows its own stream. At most Config.MaxEventClients
// streams are open at once (503 beyond), and they all end when Serve
// shuts down.

const (
	eventInterval = 250 * time.Millisecond
	keepAlive     = 15 * time.Second
)

// eventHub bounds the open event streams and ends them at shutdown.
type eventHub struct {
	mu       sync.Mutex
	open     int
	closed   bool
	shutdown chan struct{} // closed by close
}

func newEventHub() *eventHub { return &eventHub{shutdown: make(chan struct{})} }

// join takes a place for one stream among max, or reports none is free.
func (h *eventHub) join(max int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open >= max || h.closed {
		return false
	}
	h.open++
	return true
}

func (h *eventHub) leave() {
	h.mu.Lock()
	h.open--
	h.mu.Unlock()
}

// subscribers is the number of open streams.
func (h *eventHub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// close ends every stream and refuses new ones.
func (h *eventHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.shutdown)
	}
}

func (a *api) handleEvents(w http.ResponseWriter, r *http.Request) {
	if !a.events.join(a.cfg.MaxEventClients) {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many event streams open (at most %d)", a.cfg.MaxEventClients))
		return
	}
	defer a.events.leave()
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{}) // the connection may serve other requests
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	sent := map[string]eventKey{} // what each task's last event showed
	tick := time.NewTicker(eventInterval)
	defer tick.Stop()
	lastWrite := time.Now()
	for first := true; ; first = false {
		var buf bytes.Buffer
		a.taskEvents(&buf, sent)
		if first {
			buf.WriteString("event: ready\ndata: {}\n\n")
		}
		if buf.Len() == 0 && time.Since(lastWrite) >= keepAlive {
			buf.WriteString(": keep-alive\n\n")
		}
		if buf.Len() > 0 {
			// A client that reads nothing for a keepAlive is dropped.
			rc.SetWriteDeadline(time.Now().Add(keepAlive))
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			lastWrite = time.Now()
		}
		select {
		case <-r.Context().Done():
			return
		case <-a.events.shutdown:
			return
		case <-tick.C:
		}
	}
}

// eventKey is what a task's event shows that may change: a task whose
// key is the same as when its last event was sent is not marshalled again.
type eventKey struct {
	status             Status
	done, total, pos   int
	attempts, resumed  int
	started, ended     time.Time
	errText, errType   string
	width, height      int
	devices, worker    string
	resumeNote, result string
}

func keyOf(t *Task, pos int) eventKey {
	k := eventKey{status: t.Status, done: t.FramesDone, total: t.FramesTotal, pos: pos, attempts: t.Attempts,
		resumed: t.ResumedFrom, errText: t.Error, errType: t.ErrorType, width: t.Width, height: t.Height,
		devices: t.Devices, worker: t.Worker, resumeNote: t.ResumeNote, result: t.Output}
	if t.Started != nil {
		k.started = *t.Started
	}
	if t.Ended != nil {
		k.ended = *t.Ended
	}
	return k
}

// taskEvents writes to buf the events of the tasks that changed since
// sent, and records what it wrote in sent.
func (a *api) taskEvents(buf *bytes.Buffer, sent map[string]eventKey) {
	pos := map[string]int{}
	for i, id := range a.svc.snapshot(false).pending {
		pos[id] = i + 1
	}
	seen := make(map[string]bool, len(sent))
	for _, t := range a.svc.list() {
		seen[t.ID] = true
		k := keyOf(t, pos[t.ID])
		if last, ok := sent[t.ID]; ok && last == k {
			continue
		}
		v := view(t, pos[t.ID])
		v.QueueSeconds, v.RunSeconds = 0, 0 // they change every instant: the page counts them from the times
		j, err := json.Marshal(v)
		if err != nil {
			continue
		}
		sent[t.ID] = k
		fmt.Fprintf(buf, "event: task\ndata: %s\n\n", j)
	}
	for id := range sent {
		if !seen[id] {
			delete(sent, id)
			j, _ := json.Marshal(map[string]string{"task_id": id})
			fmt.Fprintf(buf, "event: removed\ndata: %s\n\n", j)
		}
	}
}
