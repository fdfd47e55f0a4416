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
	offIn   backend.Tensor // the offset branch's input (see offsetInPadded)

	// The CUDA-graph variant: each path (I, P) from each state buffer is
	// recorded once it has run op by op (so that every plan and table it
	// needs exists) and replayed after, reading fixed input buffers and
	// writing a fixed output buffer.
	graphs bool
	rec    [2][2]backend.Recording // [P path][cur]
	warm   [2]bool                 // [P path]: ran op by op once
	fixed  [3]backend.Tensor       // frame, mv, res
	out    backend.Tensor
}

// Open prepares an instance of n for inputs of w x h.
func (n *Net) Open(w, h int) (*Instance, error) { return n.OpenWith(w, h, false) }

// OpenWith is Open with the CUDA-graph variant when graphs is set and the
// backend records (backend.Recorder); elsewhere it is Open.
func (n *Net) OpenWith(w, h int, graphs bool) (*Instance, error) {
	if w <= 0 || h <= 0 || w > 1<<14 || h > 1<<14 {
		return nil, fmt.Errorf("cdavsr: input size %dx%d is out of range", w, h)
	}
	in := &Instance{net: n, w: w, h: h}
	for i := range in.state {
		t, err := n.empty(backend.Shape{N: 1, H: h, W: w, C: 2 * features})
		if err != nil {
			in.Close()
			return nil, err
		}
		in.state[i] = t
	}
	var err error
	if in.offIn, err = zeros(n.b, w, h, offsetInPadded); err != nil {
		in.Close()
		return nil, err
	}
	if _, ok := n.b.(backend.Recorder); ok && graphs {
		in.graphs = true
		for i, c := range []int{3, 2, 1} {
			t, err := n.empty(backend.Shape{N: 1, H: h, W: w, C: c})
			if err != nil {
				in.Close()
				return nil, err
			}
			in.fixed[i] = t
		}
		t, err := n.empty(backend.Shape{N: 1, H: h * n.Scale, W: w * n.Scale, C: 3})
		if err != nil {
			in.Close()
			return nil, err
		}
		in.out = t
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
// (1 sH sW 3), which the caller frees and later steps never change. The
// inputs, the output and the recurrent state are float32 whatever the
// precision of the layers (Net.Upload makes inputs). Every input's shape,
// type and device are checked before any state changes; a failed step
// leaves the history as it was.
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
		if o, ok := in.net.b.(backend.Owner); ok && !o.Owns(t) {
			return fmt.Errorf("cdavsr: %s is not a tensor of %s, where the instance runs", what, in.net.b.Name())
		}
		if !in.net.isF32(t) {
			return fmt.Errorf("cdavsr: %s holds half-precision values; the instance takes float32 (Net.Upload)", what)
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
	var out backend.Tensor
	var err error
	if p := b2i(!iPath); in.graphs && in.warm[p] {
		out, err = in.replay(frame, mv, res, iPath)
	} else {
		out, err = in.net.step(frame, in.state[in.cur], mv, res, in.offIn, in.state[next], iPath)
		in.warm[p] = in.warm[p] || err == nil
	}
	if err != nil {
		if iPath {
			in.started = false // the next state is half written: start over
		}
		return nil, err
	}
	in.cur, in.started = next, true
	return out, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// replay copies the inputs into the fixed buffers and replays the path's
// graph from the current state buffer, recording it first if needed; the
// output is copied out of the fixed buffer. A path that cannot be
// recorded runs op by op from then on.
func (in *Instance) replay(frame, mv, res backend.Tensor, iPath bool) (backend.Tensor, error) {
	b, p, cur := in.net.b, b2i(!iPath), in.cur
	if err := b.CopyFrames(in.fixed[0], 0, frame); err != nil {
		return nil, err
	}
	if !iPath {
		if err := b.CopyFrames(in.fixed[1], 0, mv); err != nil {
			return nil, err
		}
		if err := b.CopyFrames(in.fixed[2], 0, res); err != nil {
			return nil, err
		}
	}
	if in.rec[p][cur] == nil {
		r, err := b.(backend.Recorder).Record(func() error {
			y, err := in.net.step(in.fixed[0], in.state[cur], in.fixed[1], in.fixed[2], in.offIn, in.state[1-cur], iPath)
			if err != nil {
				return err
			}
			defer y.Free()
			return b.CopyFrames(in.out, 0, y)
		})
		if err != nil {
			in.graphs = false
			return in.net.step(frame, in.state[cur], mv, res, in.offIn, in.state[1-cur], iPath)
		}
		in.rec[p][cur] = r
	}
	if err := in.rec[p][cur].Replay(0); err != nil {
		return nil, err
	}
	y, err := in.net.empty(in.out.Shape())
	if err != nil {
		return nil, err
	}
	if err := b.CopyFrames(y, 0, in.out); err != nil {
		y.Free()
		return nil, err
	}
	return y, nil
}

// Graphs reports whether steps replay CUDA graphs.
func (in *Instance) Graphs() bool { return in.graphs }

// Close frees the state buffers and the graphs. It is safe to call more
// than once.
func (in *Instance) Close() {
	for _, r := range in.rec {
		for _, g := range r {
			if g != nil {
				g.Free()
			}
		}
	}
	in.rec = [2][2]backend.Recording{}
	for _, ts := range [][]backend.Tensor{in.state[:], in.fixed[:], {in.out, in.offIn}} {
		for i, t := range ts {
			if t != nil {
				t.Free()
				ts[i] = nil
			}
		}
	}
	in.out, in.offIn = nil, nil
}

// zeros returns a (1 h w c) tensor of zeros on b: one zero pixel padded.
func zeros(b backend.Backend, w, h, c int) (backend.Tensor, error) {
	z, err := b.Upload(backend.Shape{N: 1, H: 1, W: 1, C: c}, make([]float32, c))
	if err != nil {
		return nil, err
	}
	defer z.Free()
	return b.CropPad(z, h, w)
}
