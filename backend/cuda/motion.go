package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

var _ backend.Motion = (*Backend)(nil)

// motionArgs unwraps x and the per-pixel map m of c channels, both in the
// storage type.
func (b *Backend) motionArgs(xt, mt backend.Tensor, c int, what string) (*Tensor, *Tensor, error) {
	x, m, err := b.two(xt, mt)
	if err != nil {
		return nil, nil, err
	}
	return x, m, check.Motion(x.shape, m.shape, c, what)
}

// warpArgs unwraps the image x and the motion field mv of a warp: x in
// the storage type, mv in it or in float32 (backend.Wide). It returns the
// suffix of the kernels for the pair: the type, and "m" for a float32 mv.
func (b *Backend) warpArgs(xt, mvt backend.Tensor, what string) (*Tensor, *Tensor, string, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, nil, "", err
	}
	mv, err := b.anyTensor(mvt)
	if err != nil {
		return nil, nil, "", err
	}
	suffix := "_" + b.dtype.String()
	if mv.wide {
		suffix += "m"
	}
	return x, mv, suffix, check.Motion(x.shape, mv.shape, 2, what)
}

// WarpNearest samples x at p + mv(p) (see backend.Motion).
func (b *Backend) WarpNearest(xt, mvt backend.Tensor) (backend.Tensor, error) {
	x, mv, suffix, err := b.warpArgs(xt, mvt, "warp: motion field")
	if err != nil {
		return nil, err
	}
	s := x.shape
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	if c8, ok := b.chunks(s.C, x, y); ok {
		return b.finish(y, b.launch("warp_nearest_v"+suffix, false, int64(s.N*s.H*s.W*c8), x.ptr(), mv.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(c8)))
	}
	return b.finish(y, b.launch("warp_nearest"+suffix, false, int64(s.Elems()), x.ptr(), mv.ptr(), y.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(s.C)))
}

// chunks returns the 16-byte chunks of c channels when the vectorised
// motion kernels can run on ts (c a whole number of chunks, every tensor
// 16-byte aligned).
func (b *Backend) chunks(c int, ts ...*Tensor) (int, bool) {
	ok := !b.scalarMoves && c%b.lanes() == 0
	for _, t := range ts {
		ok = ok && t.ptr()%16 == 0
	}
	return c / b.lanes(), ok
}

// DeformSample is the modulated deformable sampling (see backend.Motion).
func (b *Backend) DeformSample(xt, ot, mvt backend.Tensor, groups int, limit float32) (backend.Tensor, error) {
	x, mv, suffix, err := b.warpArgs(xt, mvt, "deform: motion field")
	if err != nil {
		return nil, err
	}
	s := x.shape
	if groups <= 0 || s.C%groups != 0 {
		return nil, fmt.Errorf("deform: %d channels in %d groups", s.C, groups)
	}
	_, o, err := b.motionArgs(xt, ot, 3*groups, "deform: offsets and masks")
	if err != nil {
		return nil, err
	}
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	if c8, ok := b.chunks(s.C/groups, x, y); ok {
		return b.finish(y, b.launch("deform_sample_v"+suffix, false, int64(s.N*s.H*s.W*c8*groups), x.ptr(), o.ptr(), mv.ptr(), y.ptr(),
			int32(s.N), int32(s.H), int32(s.W), int32(c8*groups), int32(groups), limit))
	}
	return b.finish(y, b.launch("deform_sample"+suffix, false, int64(s.Elems()), x.ptr(), o.ptr(), mv.ptr(), y.ptr(),
		int32(s.N), int32(s.H), int32(s.W), int32(s.C), int32(groups), limit))
}

// Gate scales x by (1 + w) or sigmoid(w) (see backend.Motion).
func (b *Backend) Gate(xt, wt backend.Tensor, sigmoid bool) (backend.Tensor, error) {
	x, w, err := b.motionArgs(xt, wt, 1, "gate: map")
	if err != nil {
		return nil, err
	}
	s := x.shape
	y, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	sig := int32(0)
	if sigmoid {
		sig = 1
	}
	if c8, ok := b.chunks(s.C, x, y); ok {
		return b.finish(y, b.launch("gate_v", true, int64(s.N*s.H*s.W*c8), x.ptr(), w.ptr(), y.ptr(), int64(s.N*s.H*s.W), int32(c8), sig))
	}
	return b.finish(y, b.launch("gate", true, int64(s.Elems()), x.ptr(), w.ptr(), y.ptr(), int64(s.N*s.H*s.W), int32(s.C), sig))
}

// MeanAbs returns each tensor's mean absolute value (see backend.Motion):
// one CTA per tensor writes its mean into scratch, and one copy brings all
// of them back.
func (b *Backend) MeanAbs(ts ...backend.Tensor) ([]float64, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	out, err := b.pool.get(int64(8 * len(ts)))
	if err != nil {
		return nil, err
	}
	defer b.pool.put(out)
	for i, tt := range ts {
		t, err := b.anyTensor(tt)
		if err != nil {
			return nil, err
		}
		f, err := b.fn("mean_abs_"+t.dt().String(), false)
		if err != nil {
			return nil, err
		}
		if err := f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: 1}, Block: cu.Dim3{X: 1024}, Stream: b.compute},
			t.ptr(), int64(t.shape.Elems()), out.ptr.Add(8*i)); err != nil {
			return nil, err
		}
	}
	v := make([]float64, len(ts))
	if err := b.compute.CopyDtoH(cu.AsBytes(v), out.ptr); err != nil {
		return nil, err
	}
	return v, b.compute.Synchronize()
}

// mbStagedMax is the most dynamic shared memory match_blocks' staged
// search takes: the default limit, beside its 6 KiB of static memory.
const mbStagedMax = 40 << 10

// mbStagedBytes is the dynamic shared memory of match_blocks' staged
// search (kernels.cu) for blocks of bs on a w x h plane within rng: the
// largest window (the block widened by bs/2 on each side, within the
// plane) widened by rng on each side, its rows padded to an odd length,
// and MB_RUN (5) spare values.
func mbStagedBytes(w, h, bs, rng int) int {
	ww, wh := min(bs+2*(bs/2), w), min(bs+2*(bs/2), h)
	aw, ah := ww+2*rng, wh+2*rng
	return 4 * (ah*(aw|1) + 5)
}

// MatchBlocks is block matching with quarter-pel refinement (see
// backend.Motion): the planes go to float32 scratch, one CTA matches each
// block, and the vectors and residual come back in the planes' type (the
// storage type, or float32 beside it).
func (b *Backend) MatchBlocks(curt, prevt backend.Tensor, bs, rng int, scale float32) (backend.Tensor, backend.Tensor, error) {
	cur, prev, err := b.anyTwo(curt, prevt)
	if err == nil {
		err = sameType("match", cur, prev)
	}
	if err == nil {
		err = check.Motion(cur.shape, prev.shape, 1, "match: previous plane")
	}
	if err != nil {
		return nil, nil, err
	}
	dt := cur.dt()
	s := cur.shape
	if s.C != 1 || bs < 1 || bs > 16 || rng < 0 || rng > 64 {
		return nil, nil, fmt.Errorf("match: %d-channel planes, block %d, range %d (want 1 channel, block 1-16 on the GPU, range 0-64)", s.C, bs, rng)
	}
	px := int64(s.N * s.H * s.W)
	var scratch []*block
	defer func() {
		for _, k := range scratch {
			b.pool.put(k)
		}
	}()
	f32 := func(n int64) (*block, error) {
		k, err := b.pool.get(4 * n)
		if err == nil {
			scratch = append(scratch, k)
		}
		return k, err
	}
	cf, err := f32(px)
	if err != nil {
		return nil, nil, err
	}
	pf, err := f32(px)
	if err != nil {
		return nil, nil, err
	}
	mvf, err := f32(2 * px)
	if err != nil {
		return nil, nil, err
	}
	resf, err := f32(px)
	if err != nil {
		return nil, nil, err
	}
	if err := b.launchAs("plane_f32", dt, px, cur.ptr(), cf.ptr, px); err != nil {
		return nil, nil, err
	}
	if err := b.launchAs("plane_f32", dt, px, prev.ptr(), pf.ptr, px); err != nil {
		return nil, nil, err
	}
	f, err := b.fn("match_blocks", false)
	if err != nil {
		return nil, nil, err
	}
	blocks := s.N * ((s.W + bs - 1) / bs) * ((s.H + bs - 1) / bs)
	smem, staged := mbStagedBytes(s.W, s.H, bs, rng), int32(1)
	if smem > mbStagedMax || b.noStagedMatch {
		smem, staged = 0, 0
	}
	if err := f.Launch(cu.LaunchConfig{Grid: cu.Dim3{X: uint32(blocks)}, Block: cu.Dim3{X: 256}, SharedMem: uint32(smem), Stream: b.compute},
		cf.ptr, pf.ptr, mvf.ptr, resf.ptr, int32(s.H), int32(s.W), int32(bs), int32(rng), scale, staged); err != nil {
		return nil, nil, err
	}
	mv, err := b.allocAs(backend.Shape{N: s.N, H: s.H, W: s.W, C: 2}, dt)
	if err != nil {
		return nil, nil, err
	}
	res, err := b.allocAs(backend.Shape{N: s.N, H: s.H, W: s.W, C: 1}, dt)
	if err != nil {
		mv.Free()
		return nil, nil, err
	}
	if err := b.launchAs("match_out", dt, px, mvf.ptr, resf.ptr, mv.ptr(), res.ptr(), px); err != nil {
		mv.Free()
		res.Free()
		return nil, nil, err
	}
	return mv, res, nil
}
