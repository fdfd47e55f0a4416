package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

var bucketTasks = []byte("tasks")

// TaskStore keeps tasks durably: the seam between the service and where its
// tasks live. Its methods may be called from several goroutines at once (a
// running task's progress is saved outside the Service's lock); the
// Service never writes one task from two goroutines at once. boltStore (one process, a file in
// --data) is the default; memStore keeps tasks in memory (tests, and
// deployments that need no durability). A store for a distributed engine
// goes beside them.
type TaskStore interface {
	// Put records t (new, or a change of its state) before it returns.
	Put(t *Task) error
	// Load returns every task recorded, in any order.
	Load() ([]*Task, error)
	// Delete forgets the task id (retention of finished tasks); deleting
	// one that is not there is no error.
	Delete(id string) error
	// Close releases the store; no call follows.
	Close() error
}

// WorkQueue is the optional capability of a TaskStore that spreads tasks
// over processes on other machines: the API of remote workers (NewRemote)
// and the workers (NewWorker) need it, and refuse a store without it
// (errNoJetStream). A Service that runs its tasks itself (New) on a store
// that has it uses only its list of workers (the metrics) and, with
// NATS.Files, its uploads. The JetStream store (NATS) is the
// implementation. Its methods may be called from several goroutines at
// once.
//
// Records: Put replaces only the record this store last wrote or read of
// a task (Load, Get, or a record Watch delivered); a record another writer
// replaced meanwhile is not overwritten, and the error wraps errChanged.
type WorkQueue interface {
	TaskStore

	// Enqueue hands task id, of model, to the workers that serve model.
	Enqueue(id, model string) error
	// Consume returns the source of model's tasks for a worker: a task
	// taken and neither settled nor renewed within ackWait goes to
	// another worker. arrived is called when a task of model is queued,
	// to wake an idle worker (it may also be called for nothing), from
	// any goroutine, until the store's Close returns: a source has no
	// Close of its own, so arrived must stay safe to call until then.
	Consume(model string, ackWait time.Duration, arrived func()) (WorkSource, error)
	// Watch calls seen with each task record as it is written, by any
	// process (the records there first, then every change), until ctx
	// ends or the watch breaks; it returns an error when it cannot start.
	Watch(ctx context.Context, seen func(*Task)) error
	// Get returns task id as recorded now (nil: there is none).
	Get(id string) (*Task, error)
	// Cancel asks the worker that runs task id to stop it; OnCancel calls
	// f each time that is asked, until stop is called.
	Cancel(id string) error
	OnCancel(id string, f func()) (stop func(), err error)

	// Announce records worker w in the list of workers connected now (an
	// entry expires unless announced again within workerTTL), Leave takes
	// it out, and Workers lists them.
	Announce(w WorkerInfo) error
	Leave(name string)
	Workers() ([]WorkerInfo, error)

	// Protect makes the records workers may write safe from erasure in
	// bulk (JetStream: no roll-ups, no purges); the API calls it at start.
	Protect() error
	// Trust records pub (hex) among the keys that sign task records (see
	// seal.go); Trusted reports whether it is one.
	Trust(pub string) error
	Trusted(pub string) (bool, error)

	// Files: the uploads and results of tasks, for workers that share no
	// filesystem with the API (NATS.Files). PutUpload stores the file at
	// path as upload object; GetUpload writes it to a new file name in
	// root (refusing to replace one; a partial file is removed) until ctx
	// ends; RemoveUpload removes it if it can. PutResult stores a result;
	// OpenResult opens one, with its size, its error a sentence for the
	// client.
	PutUpload(object, path string) error
	GetUpload(ctx context.Context, root *os.Root, object, name string) error
	RemoveUpload(object string)
	PutResult(object, path string) error
	OpenResult(ctx context.Context, object string) (io.ReadCloser, uint64, error)
}

// WorkSource is a worker's source of one model's tasks (WorkQueue.Consume).
type WorkSource interface {
	// Next takes the next task waiting, without waiting: nil when there is
	// none. A work and an error may come together.
	Next() (Work, error)
}

// Work is one delivery of a task to a worker: it is the worker's until it
// is settled (Ack, Nak, Term) or its lease runs out (AckWait unrenewed).
type Work interface {
	// ID is the task id the delivery carries (unchecked), Model the model
	// of the queue it came from.
	ID() string
	Model() string
	// Delivered is how many times the task was delivered, this time
	// included.
	Delivered() (int, error)
	// Ack settles the task as done, Nak hands it to another worker now,
	// NakAfter after delay, Term drops it for good.
	Ack() error
	Nak() error
	NakAfter(delay time.Duration) error
	Term() error
	// InProgress renews the lease without waiting; Renew renews it and
	// waits up to timeout for the server's answer.
	InProgress() error
	Renew(timeout time.Duration) error
}

// OpenBoltStore opens the task database DIR/tasks.db (bbolt), creating it
// when it does not exist; see openStore for what is refused.
func OpenBoltStore(dir string) (TaskStore, error) { return openStore(dir) }

// boltStore keeps tasks in a bbolt database, one JSON record per task.
type boltStore struct {
	db *bolt.DB
}

var _ TaskStore = (*boltStore)(nil)

// errDamaged says what to do about a task database that cannot be read.
func errDamaged(path string, why any) error {
	return fmt.Errorf("task database %s is damaged (%v): move it aside (mv %s %s.damaged) and start again with an empty one, or restore it from a backup; the results in the output root are kept", path, why, path, path)
}

// openStore opens DIR/tasks.db, creating it when it does not exist. An
// existing file is checked before it is used: a zero-length file, one
// shorter than its own header says, pages that fail bbolt's consistency
// check or records that are not tasks are refused with one error naming
// the file, never reinitialised or half-read.
func openStore(dir string) (*boltStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "tasks.db")
	st, err := os.Stat(path)
	exists := err == nil
	if exists && st.Size() == 0 {
		return nil, errDamaged(path, "the file is empty")
	}
	db, err := openBolt(path)
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("task database %s is locked: another vsr serve is using --data %s; stop it or choose another --data", path, dir)
	case err != nil && exists:
		return nil, errDamaged(path, err)
	case err != nil:
		return nil, fmt.Errorf("create task database %s: %w", path, err)
	}
	s := &boltStore{db: db}
	if exists {
		if err := s.verify(path); err != nil {
			db.Close()
			return nil, err
		}
		if err := s.compact(path); err != nil {
			return nil, err
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketTasks)
		return err
	})
	if err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// openBolt opens the database, turning a panic or a fault on damaged pages
// (bbolt reads the freelist as it opens) into an error.
func openBolt(path string) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
}

// verify checks an existing database: its size against the file's, then
// every page (bbolt's Check) and every record. A fault or panic while
// reading damaged pages becomes the error.
func (s *boltStore) verify(path string) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = errDamaged(path, r)
		}
	}()
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return s.db.View(func(tx *bolt.Tx) error {
		if tx.Size() > st.Size() {
			return errDamaged(path, fmt.Sprintf("%d bytes, but its header needs %d: the file was truncated", st.Size(), tx.Size()))
		}
		for err := range tx.Check() {
			return errDamaged(path, err)
		}
		b := tx.Bucket(bucketTasks)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if err := json.Unmarshal(v, new(Task)); err != nil {
				return errDamaged(path, fmt.Sprintf("task %q: %v", k, err))
			}
			return nil
		})
	})
}

// compactMin is the smallest database file that compact rewrites.
var compactMin int64 = 4 << 20

// compact rewrites the verified database at path into a new file when
// most of a file of at least compactMin bytes is free pages (tasks deleted
// by retention, whose pages bbolt reuses but never gives back), and
// reopens it: the file shrinks at a start. The copy is written beside it,
// synced and renamed over it; on any error the old file stays and s.db is
// closed.
func (s *boltStore) compact(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		s.db.Close()
		return err
	}
	var used int64
	s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketTasks); b != nil {
			used = int64(b.Stats().LeafInuse)
		}
		return nil
	})
	if st.Size() < compactMin || used > st.Size()/4 {
		return nil
	}
	tmp := path + ".compact"
	os.Remove(tmp) // an earlier start's, interrupted
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err == nil {
		err = bolt.Compact(dst, s.db, 64<<20)
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}
	s.db.Close()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("compact task database %s: %w (it is unchanged; start again)", path, err)
	}
	if s.db, err = openBolt(path); err != nil {
		return fmt.Errorf("task database %s after compacting: %w", path, err)
	}
	return nil
}

// Put stores t as one JSON record.
func (s *boltStore) Put(t *Task) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTasks).Put([]byte(t.ID), b)
	})
}

// Delete removes id's record; its pages are reused by later records.
func (s *boltStore) Delete(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTasks).Delete([]byte(id))
	})
}

// Load reads every record.
func (s *boltStore) Load() ([]*Task, error) {
	var ts []*Task
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTasks).ForEach(func(k, v []byte) error {
			t := new(Task)
			if err := json.Unmarshal(v, t); err != nil {
				return fmt.Errorf("task %s: %w", k, err)
			}
			ts = append(ts, t)
			return nil
		})
	})
	return ts, err
}

// Close closes the database.
func (s *boltStore) Close() error { return s.db.Close() }

// memStore keeps copies of the tasks in memory.
type memStore struct {
	mu sync.Mutex
	m  map[string]Task
}

// NewMemStore returns a TaskStore that keeps tasks in memory only: they are
// lost when the process ends.
func NewMemStore() TaskStore { return &memStore{m: map[string]Task{}} }

func (s *memStore) Put(t *Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[t.ID] = *t.clone()
	return nil
}

func (s *memStore) Load() ([]*Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ts []*Task
	for _, t := range s.m {
		ts = append(ts, t.clone())
	}
	return ts, nil
}

func (s *memStore) Delete(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}

func (s *memStore) Close() error { return nil }
