package backend_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// growing is a backend in its first days: one op of its own, the rest
// from NotImplemented.
type growing struct {
	backend.NotImplemented
}

type growingTensor struct{ s backend.Shape }

func (t growingTensor) Shape() backend.Shape { return t.s }
func (t growingTensor) Free()                {}

func (growing) Empty(s backend.Shape) (backend.Tensor, error) { return growingTensor{s}, nil }

var _ backend.Backend = growing{}

// TestNotImplemented calls every method of Backend on a type embedding
// NotImplemented: each fails with ErrNotImplemented, naming the op and the
// device, except Name, Close and the op the type implements itself.
func TestNotImplemented(t *testing.T) {
	var b backend.Backend = growing{backend.NotImplemented{Device: "mydev:0"}}
	if b.Name() != "mydev:0" {
		t.Errorf("Name = %q", b.Name())
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if x, err := b.Empty(backend.Shape{N: 1, H: 2, W: 3, C: 4}); err != nil || x.Shape().Elems() != 24 {
		t.Errorf("Empty, overridden: %v, %v", x, err)
	}
	bt := reflect.TypeFor[backend.Backend]()
	v := reflect.ValueOf(b)
	errType := reflect.TypeFor[error]()
	for i := range bt.NumMethod() {
		m := bt.Method(i)
		switch m.Name {
		case "Name", "Close", "Empty":
			continue
		}
		ft := m.Type
		args := make([]reflect.Value, ft.NumIn())
		for j := range args {
			args[j] = reflect.Zero(ft.In(j))
		}
		var out []reflect.Value
		if ft.IsVariadic() {
			out = v.MethodByName(m.Name).CallSlice(args)
		} else {
			out = v.MethodByName(m.Name).Call(args)
		}
		last := out[len(out)-1]
		if last.Type() != errType {
			t.Errorf("%s returns no error last", m.Name)
			continue
		}
		err, _ := last.Interface().(error)
		if !errors.Is(err, backend.ErrNotImplemented) {
			t.Errorf("%s: error %v, want ErrNotImplemented", m.Name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, m.Name) || !strings.Contains(msg, "mydev:0") {
			t.Errorf("%s: error %q names neither the op nor the device", m.Name, msg)
		}
		for _, r := range out[:len(out)-1] {
			if !r.IsZero() {
				t.Errorf("%s: non-zero result %v beside the error", m.Name, r)
			}
		}
	}
}

// TestNotImplementedNoCapability checks that the base gives a backend no
// capability: callers must take the fallbacks until it has its own.
func TestNotImplementedNoCapability(t *testing.T) {
	var b backend.Backend = growing{backend.NotImplemented{Device: "mydev"}}
	caps := map[string]bool{}
	_, caps["Owner"] = b.(backend.Owner)
	_, caps["SliceConver"] = b.(backend.SliceConver)
	_, caps["ShuffleAdder"] = b.(backend.ShuffleAdder)
	_, caps["BilinearShuffleAdder"] = b.(backend.BilinearShuffleAdder)
	_, caps["Streaming"] = b.(backend.Streaming)
	_, caps["GPU"] = b.(backend.GPU)
	_, caps["Peer"] = b.(backend.Peer)
	_, caps["Wide"] = b.(backend.Wide)
	_, caps["Motion"] = b.(backend.Motion)
	_, caps["Transformer"] = b.(backend.Transformer)
	_, caps["FP8"] = b.(backend.FP8)
	_, caps["Recorder"] = b.(backend.Recorder)
	for name, ok := range caps {
		if ok {
			t.Errorf("NotImplemented gives %s", name)
		}
	}
}
