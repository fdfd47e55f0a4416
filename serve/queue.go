package serve

import "slices"

// Queue orders the pending tasks by id: the seam between the service and
// how its work is queued. The Service calls it with its own lock held.
// fifo, in this process, is the implementation; the tasks' durability is
// the TaskStore's (at start the queue is rebuilt from the stored pending
// tasks, in submission order).
type Queue interface {
	// Push appends id.
	Push(id string)
	// Pop removes and returns the first id; ok is false when empty.
	Pop() (id string, ok bool)
	// Remove takes id out wherever it is, reporting whether it was there.
	Remove(id string) bool
	// Len is the number of ids queued.
	Len() int
	// IDs returns the queued ids in order (a copy).
	IDs() []string
}

// fifo is the in-process Queue.
type fifo struct{ ids []string }

func (q *fifo) Push(id string) { q.ids = append(q.ids, id) }

func (q *fifo) Pop() (string, bool) {
	if len(q.ids) == 0 {
		return "", false
	}
	id := q.ids[0]
	q.ids = q.ids[1:]
	return id, true
}

func (q *fifo) Remove(id string) bool {
	n := len(q.ids)
	q.ids = slices.DeleteFunc(q.ids, func(q string) bool { return q == id })
	return len(q.ids) != n
}

func (q *fifo) Len() int      { return len(q.ids) }
func (q *fifo) IDs() []string { return slices.Clone(q.ids) }
