package backend_test

import (
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

// TestOpenConfig opens devices from configuration strings: settings a
// backend knows are applied, others refused with a message naming them.
func TestOpenConfig(t *testing.T) {
	b, err := backend.Open("cpu?threads=3")
	if err != nil {
		t.Fatal(err)
	}
	if w := b.(*cpu.Backend).Workers; w != 3 {
		t.Errorf("cpu?threads=3 has %d workers", w)
	}
	if _, ok := b.(backend.GPU); ok {
		t.Errorf("the CPU backend claims to be a GPU")
	}
	b.Close()
	for config, want := range map[string]string{
		"cpu?colour=blue":  "colour",
		"cpu?threads=none": "threads",
		"tpu:0":            "unknown device",
		"cpu?%zz":          "settings",
	} {
		if _, err := backend.Open(config); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): %v, want an error naming %q", config, err, want)
		}
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("a second Register of \"cpu\" did not panic")
		}
	}()
	backend.Register("cpu", func(string, backend.Options) (backend.Backend, error) { return nil, nil })
}
