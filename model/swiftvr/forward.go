package swiftvr

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
)

// Encode maps N frames (N H W 3) of RGB in [0,1] to N/4 latents
// (N/4 H/16 W/16 LatentC), updating st. N must be a multiple of 4 and H,
// W multiples of 16. x is not freed.
func (r *ReAE) Encode(x backend.Tensor, st *State) (backend.Tensor, error) {
	return r.EncodeFrom(x, st, nil)
}

// EncodeFrom is Encode of prep(x), computed a group of frames at a time:
// prep (nil: none) maps frames to the encoder's input frame by frame, as
// the resize to the output size does, so that the prepared frames of a
// whole chunk are never held at once.
func (r *ReAE) EncodeFrom(x backend.Tensor, st *State, prep func(backend.Tensor) (backend.Tensor, error)) (backend.Tensor, error) {
	if n := x.Shape().N; n%4 != 0 {
		return nil, fmt.Errorf("reae encode: %d frames, want a multiple of 4", n)
	}
	// Four frames make one latent: with a frame batch, the whole encoder
	// runs on 4*FrameBatch frames at a time, so no full-resolution
	// activation of the whole chunk is ever held.
	return r.inGroups(x, 4*r.FrameBatch, func(p backend.Tensor) (backend.Tensor, error) {
		u, err := r.prepared(p, prep)
		if err != nil {
			return nil, err
		}
		return r.run(r.enc, u, st.Enc)
	})
}

// prepared returns frames p through prep (nil: none) and pixel unshuffle:
// the encoder's input. p is not freed; prep's result is, before the
// encoder runs (it is the largest input of its group).
func (r *ReAE) prepared(p backend.Tensor, prep func(backend.Tensor) (backend.Tensor, error)) (backend.Tensor, error) {
	if prep == nil {
		return r.unshuffle(p)
	}
	q, err := prep(p)
	if err != nil {
		return nil, err
	}
	defer q.Free()
	return r.unshuffle(q)
}

// unshuffle checks the encoder's input frames and moves each 2x2 block of
// pixels into channels.
func (r *ReAE) unshuffle(x backend.Tensor) (backend.Tensor, error) {
	if s := x.Shape(); s.H%16 != 0 || s.W%16 != 0 || s.C != 3 {
		return nil, fmt.Errorf("reae encode: frames %v must be RGB of a size that is a multiple of 16", s)
	}
	return r.b.PixelUnshuffle(x, 2)
}

// inGroups applies f to consecutive groups of n frames of x (all of x when
// n is 0) and returns the results along time; f does not free its
// argument. The causal state passes from group to group exactly as from
// frame to frame, and groups of whole latents align with the temporal
// pooling and growing layers, so the result is the one of a single pass.
// Each group's result goes into the output as soon as it is computed, so
// only one group's intermediates are alive at a time.
func (r *ReAE) inGroups(x backend.Tensor, n int, f func(backend.Tensor) (backend.Tensor, error)) (backend.Tensor, error) {
	return r.inGroupsKeep(x, n, 0, -1, f)
}

// inGroupsKeep is inGroups keeping only the output frames [from,
// from+keep) (keep < 0: all from from on).
func (r *ReAE) inGroupsKeep(x backend.Tensor, n, from, keep int, f func(backend.Tensor) (backend.Tensor, error)) (backend.Tensor, error) {
	var out backend.Tensor
	err := r.eachGroup(x, n, from, keep, f, func(y backend.Tensor, at, total int) error {
		var err error
		if out == nil {
			if at == 0 && y.Shape().N == total { // one group, all of it
				out, err = r.b.Frames(y, 0, total)
				return err
			}
			s := y.Shape()
			s.N = total
			if out, err = r.b.Empty(s); err != nil {
				return err
			}
		}
		return r.b.CopyFrames(out, at, y)
	})
	if err != nil && out != nil {
		out.Free()
		out = nil
	}
	return out, err
}

// eachGroup applies f to consecutive groups of n frames of x (all of x
// when n is 0) and passes the output frames [from, from+keep) (keep < 0:
// all from from on) to emit as they come, in order: y holds the kept
// frames of one group, the first being frame at of total kept frames.
// emit does not free y.
func (r *ReAE) eachGroup(x backend.Tensor, n, from, keep int, f func(backend.Tensor) (backend.Tensor, error), emit func(y backend.Tensor, at, total int) error) error {
	total := x.Shape().N
	if n <= 0 || n >= total {
		n = total
	}
	at, all := 0, 0
	for i := 0; i < total; i += n {
		y, err := r.group(x, i, min(n, total-i), f)
		if err != nil {
			return err
		}
		if i == 0 {
			// Every layer maps frames at a fixed ratio, so the first
			// group's output sizes the whole.
			all = y.Shape().N * total / n
			if keep < 0 {
				keep = all - from
			}
			switch {
			case y.Shape().N*total%n != 0:
				err = fmt.Errorf("reae: %d frames in groups of %d give %d, not a whole ratio", total, n, y.Shape().N)
			case from < 0 || keep < 1 || from+keep > all:
				err = fmt.Errorf("reae: output frames [%d, %d) of %d", from, from+keep, all)
			}
		}
		if err == nil {
			err = r.emitKept(y, at-from, keep, emit)
			at += y.Shape().N
		}
		y.Free()
		if err != nil {
			return err
		}
	}
	if at != all {
		return fmt.Errorf("reae: groups gave %d frames, want %d", at, all)
	}
	return nil
}

// emitKept passes the frames of y that fall inside [0, total) to emit,
// y's first frame being frame at (which may be outside).
func (r *ReAE) emitKept(y backend.Tensor, at, total int, emit func(y backend.Tensor, at, total int) error) error {
	k := y.Shape().N
	lo, hi := max(at, 0), min(at+k, total)
	switch {
	case lo >= hi:
		return nil
	case lo == at && hi == at+k:
		return emit(y, at, total)
	}
	part, err := r.b.Frames(y, lo-at, hi-lo)
	if err != nil {
		return err
	}
	defer part.Free()
	return emit(part, lo, total)
}

// group returns f of frames [i, i+n) of x.
func (r *ReAE) group(x backend.Tensor, i, n int, f func(backend.Tensor) (backend.Tensor, error)) (backend.Tensor, error) {
	p, err := r.b.Frames(x, i, n)
	if err != nil {
		return nil, err
	}
	defer p.Free()
	return f(p)
}

// Decode maps N latents to 4N frames (4N 16H 16W 3) of RGB, not yet
// clamped to [0,1], updating st. z is not freed.
func (r *ReAE) Decode(z backend.Tensor, st *State) (backend.Tensor, error) {
	return r.DecodeFrames(z, st, 0, 4*z.Shape().N)
}

// DecodeFrames is Decode returning only the output frames [from, from+n):
// the frames around them are computed (they carry the causal state) but
// never held together with them.
func (r *ReAE) DecodeFrames(z backend.Tensor, st *State, from, n int) (backend.Tensor, error) {
	if err := r.checkLatents(z); err != nil {
		return nil, err
	}
	return r.inGroupsKeep(z, r.FrameBatch, from, n, r.decodeGroup(st))
}

// DecodeTo is DecodeFrames passing the output frames to emit as each
// group of latents is decoded (y: frames [at, at+y.N) of the n; emit does
// not free y), so that the whole output is never held.
func (r *ReAE) DecodeTo(z backend.Tensor, st *State, from, n int, emit func(y backend.Tensor, at int) error) error {
	if err := r.checkLatents(z); err != nil {
		return err
	}
	return r.eachGroup(z, r.FrameBatch, from, n, r.decodeGroup(st), func(y backend.Tensor, at, _ int) error { return emit(y, at) })
}

func (r *ReAE) checkLatents(z backend.Tensor) error {
	if s := z.Shape(); s.C != r.LatentC {
		return fmt.Errorf("reae decode: latents have %d channels, want %d", s.C, r.LatentC)
	}
	return nil
}

// decodeGroup decodes one group of latents to RGB frames.
func (r *ReAE) decodeGroup(st *State) func(backend.Tensor) (backend.Tensor, error) {
	return func(p backend.Tensor) (backend.Tensor, error) {
		cp, err := r.b.Frames(p, 0, p.Shape().N) // run consumes its input
		if err != nil {
			return nil, err
		}
		y, err := r.run(r.dec, cp, st.Dec)
		if err != nil {
			return nil, err
		}
		out, err := r.b.PixelShuffle(y, 2, backend.ShuffleCRD)
		y.Free()
		return out, err
	}
}

// order returns the layers in execution order: with TGrowBefore, each
// TGrow moves ahead of the nearest upsample before it.
func (r *ReAE) order(ls []layer) []layer {
	out := append([]layer(nil), ls...)
	if r.TGrowBefore {
		for i := 0; i+1 < len(out); i++ {
			if out[i].kind == lUp && out[i+1].kind == lTGrow {
				out[i], out[i+1] = out[i+1], out[i]
				i++
			}
		}
	}
	return out
}

// run applies layers to x (which it frees), splitting them into
// segments at the layers that change the frame count (TPool, TGrow by 2);
// the layers of a segment work frame by frame (MemBlocks with their carried
// state), so they run FrameBatch frames at a time.
func (r *ReAE) run(ls []layer, x backend.Tensor, states []backend.Tensor) (backend.Tensor, error) {
	ls = r.order(ls)
	for len(ls) > 0 {
		n := 0
		for n < len(ls) && !changesFrames(ls[n]) {
			n++
		}
		var err error
		if n < len(ls) && ls[n].kind == lTPool && r.FrameBatch > 0 && x.Shape().N > ls[n].stride*r.FrameBatch {
			// The pooling folds runs of stride consecutive frames, so the
			// per-frame layers and the pooling run together on
			// stride*FrameBatch frames at a time: the full-rate
			// activations of the whole group are never held.
			seg, pool := ls[:n], ls[n:n+1]
			y, err := r.inGroups(x, ls[n].stride*r.FrameBatch, func(p backend.Tensor) (backend.Tensor, error) {
				cp, err := r.b.Frames(p, 0, p.Shape().N) // segment and apply consume their input
				if err == nil && len(seg) > 0 {
					cp, err = r.segment(seg, cp, states)
				}
				if err != nil {
					return nil, err
				}
				return r.apply(pool, cp, states)
			})
			x.Free()
			if err != nil {
				return nil, err
			}
			x, ls = y, ls[n+1:]
			continue
		}
		if n > 0 {
			if x, err = r.segment(ls[:n], x, states); err != nil {
				return nil, err
			}
		}
		if n < len(ls) {
			if x, err = r.apply(ls[n:n+1], x, states); err != nil {
				return nil, err
			}
			n++
		}
		ls = ls[n:]
	}
	return x, nil
}

func changesFrames(l layer) bool {
	return (l.kind == lTPool && l.stride != 1) || (l.kind == lTGrow && l.stride != 1)
}

// segment runs per-frame layers over x (which it frees) in pieces of
// FrameBatch frames.
func (r *ReAE) segment(ls []layer, x backend.Tensor, states []backend.Tensor) (backend.Tensor, error) {
	defer x.Free()
	return r.inGroups(x, r.FrameBatch, func(p backend.Tensor) (backend.Tensor, error) {
		cp, err := r.b.Frames(p, 0, p.Shape().N) // apply consumes its input
		if err != nil {
			return nil, err
		}
		return r.apply(ls, cp, states)
	})
}

// apply runs layers on x, freeing x and every intermediate.
func (r *ReAE) apply(ls []layer, x backend.Tensor, states []backend.Tensor) (backend.Tensor, error) {
	b := r.b
	step := func(y backend.Tensor, err error) error {
		if err != nil {
			return err
		}
		x.Free()
		x = y
		return nil
	}
	for i := 0; i < len(ls); i++ {
		l := ls[i]
		var err error
		switch l.kind {
		case lConv:
			act := backend.Activation{}
			if i+1 < len(ls) && ls[i+1].kind == lReLU {
				act.Kind = backend.ActReLU
				i++
			}
			err = step(r.conv2d(x, l.conv, act, nil))
		case lReLU:
			err = step(b.Activate(x, backend.Activation{Kind: backend.ActReLU}))
		case lClamp:
			err = step(b.Activate(x, backend.Activation{Kind: backend.ActSoftClamp, Alpha: 3}))
		case lUp:
			s := x.Shape()
			err = step(b.Resize(x, backend.Nearest, 2*s.H, 2*s.W, backend.Tile{}, backend.Tile{}))
		case lTPool:
			if l.stride > 1 {
				if err = step(b.FoldFrames(x, l.stride)); err != nil {
					return nil, err
				}
			}
			err = step(b.Conv2D(x, l.conv.w, l.conv.p, backend.Activation{}))
		case lTGrow:
			if err = step(b.Conv2D(x, l.conv.w, l.conv.p, backend.Activation{})); err != nil {
				return nil, err
			}
			if l.stride > 1 {
				err = step(b.UnfoldFrames(x, l.stride))
			}
		case lMem:
			var y backend.Tensor
			y, err = r.memBlock(l, x, states)
			if err == nil {
				err = step(y, nil)
			}
		}
		if err != nil {
			x.Free()
			return nil, fmt.Errorf("reae %s: %w", l.key, err)
		}
	}
	return x, nil
}

// memBlock computes relu(conv4(relu(conv2(relu(conv0([x_t, x_{t-1}])))) + x_t)
// (the residual inside the last convolution's pass, Conv2DAdd) and
// replaces the layer's state by the last frame of x.
func (r *ReAE) memBlock(l layer, x backend.Tensor, states []backend.Tensor) (backend.Tensor, error) {
	b := r.b
	cat, err := b.ConcatPrev(x, states[l.state])
	if err != nil {
		return nil, err
	}
	relu := backend.Activation{Kind: backend.ActReLU}
	a, err := r.conv2d(cat, l.mem[0], relu, nil)
	cat.Free()
	if err != nil {
		return nil, err
	}
	c, err := r.conv2d(a, l.mem[1], relu, nil)
	a.Free()
	if err != nil {
		return nil, err
	}
	y, err := r.conv2d(c, l.mem[2], relu, x)
	c.Free()
	if err != nil {
		return nil, err
	}
	last, err := b.Frames(x, x.Shape().N-1, 1)
	if err != nil {
		y.Free()
		return nil, err
	}
	if states[l.state] != nil {
		states[l.state].Free()
	}
	states[l.state] = last
	return y, nil
}
