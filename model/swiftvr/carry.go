package swiftvr

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
)

// Carry moves the ReAE's causal state between chunks that run on
// different ranks (chunk parallelism): before MemBlock k of the encoder
// (dec false) or the decoder (dec true), Prev returns the previous chunk's
// last input frame of that layer (nil: zeros, the video's start; the
// caller frees it), and Next hands this chunk's own to the next chunk (last
// stays the caller's).
type Carry interface {
	Prev(dec bool, k int) (backend.Tensor, error)
	Next(dec bool, k int, last backend.Tensor) error
}

// The carried schedule. Encode and Decode run the layers group-major:
// each group of frames goes through the whole network before the next, so
// a MemBlock's last input frame is known only at the end of the chunk,
// too late for a rank waiting on it. EncodeCarried and DecodeCarried run
// the same layers on the same groups of frames in layer-major order: every
// run of layers between MemBlocks (a piece) over the whole chunk, group by
// group, then each MemBlock over the whole chunk after exchanging its
// state. Every op sees the same frames in the same shapes as in Encode and
// Decode, so the results are bitwise the same; only the order across
// groups changes (the chunk's activations at each MemBlock are held whole).

// pieces splits layers (in execution order) into MemBlocks and the runs of
// other layers between them.
func pieces(ls []layer) [][]layer {
	var out [][]layer
	start := 0
	for i, l := range ls {
		if l.kind != lMem {
			continue
		}
		if i > start {
			out = append(out, ls[start:i])
		}
		out = append(out, ls[i:i+1])
		start = i + 1
	}
	if start < len(ls) {
		out = append(out, ls[start:])
	}
	return out
}

// rate returns g frames scaled by the frame-count changes of ls (TPool by
// 1/s, TGrow by s); 0 (the whole chunk) stays 0.
func rate(ls []layer, g int) (int, error) {
	for _, l := range ls {
		switch {
		case l.kind == lTPool && l.stride > 1:
			if g%l.stride != 0 {
				return 0, fmt.Errorf("reae: %d frames do not pool by %d", g, l.stride)
			}
			g /= l.stride
		case l.kind == lTGrow:
			g *= l.stride
		}
	}
	return g, nil
}

// stage runs one piece over all of x (which it frees) for EncodeCarried and
// DecodeCarried: a MemBlock after exchanging its state, in groups of
// FrameBatch frames; other layers in groups of g frames, g being the
// group-major schedule's group at x's rate. It returns the output and the
// group at its rate.
func (r *ReAE) stage(p []layer, x backend.Tensor, g int, states []backend.Tensor, carry Carry, dec bool) (backend.Tensor, int, error) {
	if p[0].kind == lMem {
		k := p[0].state
		last, err := r.b.Frames(x, x.Shape().N-1, 1)
		if err == nil {
			err = carry.Next(dec, k, last) // first, so the next rank can go on
			last.Free()
		}
		var prev backend.Tensor
		if err == nil {
			prev, err = carry.Prev(dec, k)
		}
		if err != nil {
			x.Free()
			return nil, 0, fmt.Errorf("reae %s: %w", p[0].key, err)
		}
		if states[k] != nil {
			states[k].Free()
		}
		states[k] = prev
		y, err := r.segment(p, x, states)
		return y, g, err
	}
	y, err := r.inGroups(x, g, func(q backend.Tensor) (backend.Tensor, error) {
		cp, err := r.b.Frames(q, 0, q.Shape().N) // run consumes its input
		if err != nil {
			return nil, err
		}
		return r.run(p, cp, states)
	})
	x.Free()
	if err != nil {
		return nil, 0, err
	}
	g, err = rate(p, g)
	if err != nil {
		y.Free()
		return nil, 0, err
	}
	return y, g, nil
}

// EncodeCarried is EncodeFrom with the causal state taken from and handed
// to the neighbouring chunks through carry, layer by layer (see above).
// st's encoder entries are replaced as Encode would leave them.
func (r *ReAE) EncodeCarried(x backend.Tensor, st *State, prep func(backend.Tensor) (backend.Tensor, error), carry Carry) (backend.Tensor, error) {
	if n := x.Shape().N; n%4 != 0 {
		return nil, fmt.Errorf("reae encode: %d frames, want a multiple of 4", n)
	}
	ps := pieces(r.order(r.enc))
	if len(ps) == 0 || ps[0][0].kind == lMem {
		return nil, fmt.Errorf("reae: the encoder starts with a MemBlock")
	}
	// The first piece takes the prepared input, 4*FrameBatch frames at a
	// time as EncodeFrom does.
	g := 4 * r.FrameBatch
	y, err := r.inGroups(x, g, func(p backend.Tensor) (backend.Tensor, error) {
		u, err := r.prepared(p, prep)
		if err != nil {
			return nil, err
		}
		return r.run(ps[0], u, st.Enc)
	})
	if err != nil {
		return nil, err
	}
	if g, err = rate(ps[0], g); err != nil {
		y.Free()
		return nil, err
	}
	for _, p := range ps[1:] {
		if y, g, err = r.stage(p, y, g, st.Enc, carry, false); err != nil {
			return nil, err
		}
	}
	return y, nil
}

// DecodeCarried is DecodeTo with the causal state taken from and handed
// to the neighbouring chunks through carry: the layers up to the last
// MemBlock run layer by layer over the whole chunk, the rest group by
// group, passing the output frames [from, from+n) to emit as they come.
func (r *ReAE) DecodeCarried(z backend.Tensor, st *State, from, n int, carry Carry, emit func(y backend.Tensor, at int) error) error {
	if err := r.checkLatents(z); err != nil {
		return err
	}
	ps := pieces(r.order(r.dec))
	lastMem := -1
	for i, p := range ps {
		if p[0].kind == lMem {
			lastMem = i
		}
	}
	if lastMem < 0 || lastMem == len(ps)-1 {
		return fmt.Errorf("reae: the decoder has no layers after its MemBlocks")
	}
	x, err := r.b.Frames(z, 0, z.Shape().N)
	if err != nil {
		return err
	}
	g := r.FrameBatch
	for _, p := range ps[:lastMem+1] {
		if x, g, err = r.stage(p, x, g, st.Dec, carry, true); err != nil {
			return err
		}
	}
	defer x.Free()
	var tail []layer
	for _, p := range ps[lastMem+1:] {
		tail = append(tail, p...)
	}
	return r.eachGroup(x, g, from, n, func(p backend.Tensor) (backend.Tensor, error) {
		cp, err := r.b.Frames(p, 0, p.Shape().N)
		if err != nil {
			return nil, err
		}
		y, err := r.run(tail, cp, st.Dec)
		if err != nil {
			return nil, err
		}
		out, err := r.b.PixelShuffle(y, 2, backend.ShuffleCRD)
		y.Free()
		return out, err
	}, func(y backend.Tensor, at, _ int) error { return emit(y, at) })
}
