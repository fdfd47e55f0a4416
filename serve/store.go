package serve

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucketTasks = []byte("tasks")

// store keeps tasks in a bbolt database, one JSON record per task.
type store struct {
	db *bolt.DB
}

func openStore(dir string) (*store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "tasks.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open task database %s: %w (is another vsr serve using --data %s?)", path, err, dir)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketTasks)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &store{db: db}, nil
}

func (s *store) put(t *Task) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTasks).Put([]byte(t.ID), b)
	})
}

func (s *store) load() ([]*Task, error) {
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

func (s *store) close() error { return s.db.Close() }
