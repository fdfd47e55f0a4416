package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// TestAttentionWeightsMergeKeys checks the identity the DiT's merged prompt
// rests on: attention to keys that repeat (RMSNorm on the queries, scale
// 1/sqrt(headDim)) equals AttentionWeights over the distinct keys, each
// with the RMSNorm weight and scale folded in and a bias of log(count),
// followed by the weighted sum of the distinct values; a key with bias
// -Inf is left out.
func TestAttentionWeightsMergeKeys(t *testing.T) {
	const rows, hd, heads = 20, 32, 3
	const cols = hd * heads
	r := rand.New(rand.NewPCG(7, 8))
	rnd := func(n int, lo, hi float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(lo + (hi-lo)*r.Float64())
		}
		return v
	}
	q, g := rnd(rows*cols, -2, 2), rnd(cols, 0.5, 1.5)
	count := []int{1, 5, 2}
	k, v := rnd(len(count)*cols, -1, 1), rnd(len(count)*cols, -1, 1)
	b := New(0)
	up := func(rows, cols int, x []float32) backend.Tensor {
		tt, err := b.Upload(backend.Matrix(rows, cols), x)
		if err != nil {
			t.Fatal(err)
		}
		return tt
	}
	// Plain: every repeat as its own key and value.
	var kf, vf []float32
	for j, c := range count {
		for range c {
			kf = append(kf, k[j*cols:(j+1)*cols]...)
			vf = append(vf, v[j*cols:(j+1)*cols]...)
		}
	}
	qn := up(rows, cols, q)
	if err := b.RMSNormRoPE(qn, up(1, cols, g), 1e-6, nil); err != nil {
		t.Fatal(err)
	}
	plain, err := b.Attention(qn, up(len(kf)/cols, cols, kf), up(len(vf)/cols, cols, vf), hd)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := b.Download(plain)
	// Merged, with a fourth key left out.
	n := len(count) + 1
	keys, bias := make([]float32, n*cols), make([]float32, n)
	for j := range n {
		if j == len(count) {
			bias[j] = float32(math.Inf(-1))
			for c := range cols {
				keys[j*cols+c] = 100 // would dominate if it counted
			}
			continue
		}
		bias[j] = float32(math.Log(float64(count[j])))
		for c := range cols {
			keys[j*cols+c] = k[j*cols+c] * g[c] / float32(math.Sqrt(hd))
		}
	}
	kw, err := b.PrepareKeys(n, cols, keys, bias)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := b.AttentionWeights(up(rows, cols, q), kw, hd, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	if s := pt.Shape(); s != backend.Matrix(rows, heads*n) {
		t.Fatalf("weights %v, want %v", s, backend.Matrix(rows, heads*n))
	}
	p, _ := b.Download(pt)
	var worst float64
	for i := range rows {
		for h := range heads {
			if w := p[(i*heads+h)*n+len(count)]; w != 0 {
				t.Fatalf("row %d head %d: left-out key has weight %g", i, h, w)
			}
			for c := range hd {
				var s float64
				for j := range count {
					s += float64(p[(i*heads+h)*n+j]) * float64(v[j*cols+h*hd+c])
				}
				worst = max(worst, math.Abs(s-float64(want[i*cols+h*hd+c])))
			}
		}
	}
	if worst > 1e-5 {
		t.Errorf("merged keys differ from repeated keys by up to %.3g", worst)
	}
	if _, err := b.PrepareKeys(backend.MaxKeys+1, 1, make([]float32, backend.MaxKeys+1), make([]float32, backend.MaxKeys+1)); err == nil {
		t.Error("too many keys accepted")
	}
	if _, err := b.AttentionWeights(up(rows, cols, q), kw, 7, 1e-6); err == nil {
		t.Error("a head dim that does not divide the columns was accepted")
	}
}
