//go:build unix

package flock

import (
	"errors"
	"os"
	"testing"
)

func TestTryLock(t *testing.T) {
	dir := t.TempDir()
	a, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := TryLock(a); err != nil {
		t.Fatal(err)
	}
	if err := TryLock(b); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second lock: %v, want ErrBusy", err)
	}
	a.Close() // the lock goes with it
	if err := TryLock(b); err != nil {
		t.Fatalf("after the holder closed: %v", err)
	}
}
