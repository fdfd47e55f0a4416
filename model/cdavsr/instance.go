package cdavsr

import (
	"errors"
	"fmt"

	"github.com/vsr-dev/vsr/backend"
)

// Instance is the online network for one input size: the runtime contract
// of pixtreme's CDA-VSR instance. The first Step and every reset run the I
// path, the others the P path; the two state buffers are allocated by
// Open and swap roles after each step without copying; Reset clears the
// history without reallocating. An Instance is used by one goroutine.
type Instance struct {
	net     *Net
	w, h    int
	state   [2]backend.Tensor // state[cur] is the last step's; the other is written next
	cur     int
	started bool
}

// Open prepares an instance of n for inputs of w x h.
func (n *Net) Open(w, h int) (*Instance, error) {
	if w <= 0 || h <= 0 || w > 1<<14 || h > 1<<14 {
		return nil, fmt.Errorf("cdavsr: input size %dx%d is out of range", w, h)
	}
	in := &Instance{net: n, w: w, h: h}
	for i := range in.state {
		t, err := n.b.Empty(backend.Shape{N: 1, H: h, W: w, C: 2 * features})
		if err != nil {
			in.Close()
			return nil, err
		}
		in.state[i] = t
	}
	return in, nil
}

// Size returns the input size the instance was opened for.
func (in *Instance) Size() (int, int) { return in.w, in.h }

// Reset makes the next step an I step (the history is dropped).
func (in *Instance) Reset() { in.started = false }

// Step restores one frame: frame (1 H W 3) in [0,1], and for a P step the
// motion field mv (1 H W 2, in input pixels, x then y) and the residual
// res (1 H W 1, in luma ranges). The first step, and a step with reset,
// take the I path and ignore mv and res. It returns the output frame
// (1 sH sW 3), which the caller frees and later steps never change. Every
// input is checked before any state changes; a failed step leaves the
// history as it was.
func (in *Instance) Step(frame, mv, res backend.Tensor, reset bool) (backend.Tensor, error) {
	if in.state[0] == nil {
		return nil, errors.New("cdavsr: step on a closed instance")
	}
	iPath := reset || !in.started
	want := func(t backend.Tensor, c int, what string) error {
		if t == nil {
			return fmt.Errorf("cdavsr: no %s", what)
		}
		if s := t.Shape(); s != (backend.Shape{N: 1, H: in.h, W: in.w, C: c}) {
			return fmt.Errorf("cdavsr: %s of shape %v; the instance takes [1 %d %d %d]", what, s, in.h, in.w, c)
		}
		return nil
	}
	if err := want(frame, 3, "frame"); err != nil {
		return nil, err
	}
	if !iPath {
		if err := want(mv, 2, "motion field"); err != nil {
			return nil, err
		}
		if err := want(res, 1, "residual"); err != nil {
			return nil, err
		}
	}
	next := 1 - in.cur
	out, err := in.net.step(frame, in.state[in.cur], mv, res, in.state[next], iPath)
	if err != nil {
		if iPath {
			in.started = false // the next state is half written: start over
		}
		return nil, err
	}
	in.cur, in.started = next, true
	return out, nil
}

// Close frees the state buffers. It is safe to call more than once.
func (in *Instance) Close() {
	for i, t := range in.state {
		if t != nil {
			t.Free()
			in.state[i] = nil
		}
	}
}
