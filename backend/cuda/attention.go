package cuda

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

//go:embed attention.cu
var attentionCode string

// attentionSource holds the tensor-core attention kernels of the DiT.
var attentionSource = &Source{Name: "attention.cu", Code: attentionCode}

// attnKernel is a build of attention.cu and its warps per block (AT_WARPS);
// attnDefault is the one the ops use (tests time others).
type attnKernel struct {
	src   *Source
	warps int
}

var attnDefault = attnKernel{attentionSource, 8}

// Geometry of attention.cu: keys per tile (AT_BK), windows per axis
// (AT_MAXWIN).
const (
	attnBK     = 64
	attnMaxWin = 64
)

// attnSeg is one window along an axis: it owns the query positions
// [q0, q0+nq) and its keys start at k0.
type attnSeg struct{ q0, nq, k0 int }

// attnGeom is the token geometry of an attention call: queries on an
// F x H x W grid, keys on an F x KH x KW grid, each problem attending to an
// F x kh x kw box of keys; problems are ys x xs.
type attnGeom struct {
	F, H, W, KH, KW, kh, kw int
	ys, xs                  []attnSeg
}

// WindowAttention returns softmax(q kᵀ / sqrt(headDim)) v for every head,
// each token of the grid g attending to the F x min(Size, H) x min(Size, W)
// tokens of its owner window (see backend.Windows) and nothing else. q, k
// and v are g.Tokens() x heads*headDim matrices; headDim is 64 or 128.
// Only the tokens a window owns are computed in it, so overlapping windows
// cost no extra work.
func (b *Backend) WindowAttention(qt, kt, vt backend.Tensor, headDim int, g backend.Grid, w backend.Windows) (backend.Tensor, error) {
	q, k, v, err := b.attnInputs(qt, kt, vt, headDim)
	if err != nil {
		return nil, err
	}
	if err := check.WindowAttention(q.shape, k.shape, v.shape, headDim, g, w); err != nil {
		return nil, err
	}
	return b.attention(q, k, v, headDim, attnGeom{
		F: g.F, H: g.H, W: g.W, KH: g.H, KW: g.W, kh: min(w.Size, g.H), kw: min(w.Size, g.W),
		ys: attnSegs(w.YStarts, w.YOwner), xs: attnSegs(w.XStarts, w.XOwner),
	})
}

// Attention returns softmax(q kᵀ / sqrt(headDim)) v for every head, every
// row of q attending to every row of k and v (cross-attention). q is
// Lq x heads*headDim, k and v are Lk x heads*headDim with Lk >= 1; headDim
// is 64 or 128.
func (b *Backend) Attention(qt, kt, vt backend.Tensor, headDim int) (backend.Tensor, error) {
	q, k, v, err := b.attnInputs(qt, kt, vt, headDim)
	if err != nil {
		return nil, err
	}
	if err := check.Attention(q.shape, k.shape, v.shape, headDim); err != nil {
		return nil, err
	}
	lq, lk := q.shape.W, k.shape.W
	return b.attention(q, k, v, headDim, attnGeom{
		F: 1, H: 1, W: lq, KH: 1, KW: lk, kh: 1, kw: lk,
		ys: []attnSeg{{0, 1, 0}}, xs: []attnSeg{{0, lq, 0}},
	})
}

// attnInputs checks that the kernel has headDim and unwraps the operands
// of an attention op (the ops check their shapes).
func (b *Backend) attnInputs(qt, kt, vt backend.Tensor, headDim int) (q, k, v *Tensor, err error) {
	if headDim != 64 && headDim != 128 {
		return nil, nil, nil, fmt.Errorf("attention: head dim %d (the cuda backend supports 64 and 128)", headDim)
	}
	if q, err = b.tensor(qt); err != nil {
		return
	}
	if k, err = b.tensor(kt); err != nil {
		return
	}
	v, err = b.tensor(vt)
	return
}

// attnSegs returns the windows of an axis that own positions, with their
// owned ranges (owners are non-decreasing, so each is one range).
func attnSegs(starts, owner []int) []attnSeg {
	var segs []attnSeg
	for p, o := range owner {
		if p == 0 || o != owner[p-1] {
			segs = append(segs, attnSeg{q0: p, k0: starts[o]})
		}
		segs[len(segs)-1].nq++
	}
	return segs
}

// attention launches attention_d{headDim}_{dtype} over the problems of a
// geometry on the compute stream.
func (b *Backend) attention(q, k, v *Tensor, headDim int, a attnGeom) (backend.Tensor, error) {
	if len(a.ys) > attnMaxWin || len(a.xs) > attnMaxWin {
		return nil, fmt.Errorf("attention: %d x %d windows (at most %d along an axis)", len(a.ys), len(a.xs), attnMaxWin)
	}
	cols := q.shape.C
	heads := cols / headDim
	if heads > 65535 {
		return nil, fmt.Errorf("attention: %d heads", heads)
	}
	kn := attnDefault
	f, err := b.kernel(kn.src, fmt.Sprintf("attention_d%d_%s", headDim, b.dtype))
	if err != nil {
		return nil, err
	}
	smem := (16*kn.warps+4*attnBK)*headDim*2 + 8*attnBK
	if err := f.SetAttribute(cu.FuncMaxDynamicSharedSizeBytes, smem); err != nil {
		return nil, err
	}
	y, err := b.alloc(q.shape)
	if err != nil {
		return nil, err
	}
	if q.shape.W == 0 {
		return y, nil
	}
	// The table (struct at_table): yq0, ynq, yk0, xq0, xnq, xk0, each
	// attnMaxWin int32s; and the most queries of one problem.
	var tab [6 * attnMaxWin]int32
	maxY, maxX := 0, 0
	for i, s := range a.ys {
		tab[i], tab[attnMaxWin+i], tab[2*attnMaxWin+i] = int32(s.q0), int32(s.nq), int32(s.k0)
		maxY = max(maxY, s.nq)
	}
	for i, s := range a.xs {
		tab[3*attnMaxWin+i], tab[4*attnMaxWin+i], tab[5*attnMaxWin+i] = int32(s.q0), int32(s.nq), int32(s.k0)
		maxX = max(maxX, s.nq)
	}
	raw := make(cu.Raw, 0, 4*len(tab))
	for _, x := range tab {
		raw = binary.LittleEndian.AppendUint32(raw, uint32(x))
	}
	bq := 16 * kn.warps
	tiles := (a.F*maxY*maxX + bq - 1) / bq
	sl := float32(math.Log2E / math.Sqrt(float64(headDim)))
	err = f.Launch(cu.LaunchConfig{
		Grid:      cu.Dim3{X: uint32(tiles), Y: uint32(len(a.ys) * len(a.xs)), Z: uint32(heads)},
		Block:     cu.Dim3{X: uint32(32 * kn.warps)},
		SharedMem: uint32(smem),
		Stream:    b.compute,
	}, q.ptr(), k.ptr(), v.ptr(), y.ptr(), int32(cols), int32(a.F), int32(a.H), int32(a.W), int32(a.KH), int32(a.KW),
		int32(a.kh), int32(a.kw), int32(len(a.xs)), sl, raw)
	return b.finish(y, err)
}
