package cpu

import (
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/internal/check"
)

var (
	_ backend.Transformer = (*Backend)(nil)
	_ backend.Motion      = (*Backend)(nil)
)

// linearWeights is a linear layer as a packed in x out matrix (Wᵀ).
type linearWeights struct {
	out, in int
	pb      *packedB
	bias    []float32
}

func (w *linearWeights) Out() int { return w.out }
func (w *linearWeights) In() int  { return w.in }
func (w *linearWeights) Free()    {}

// matrix unwraps a [1 1 rows cols] tensor.
func (b *Backend) matrix(t backend.Tensor, cols int) (*Tensor, int, error) {
	m, err := b.tensor(t)
	if err != nil {
		return nil, 0, err
	}
	if err := check.Matrix(m.shape, cols); err != nil {
		return nil, 0, err
	}
	return m, m.shape.W, nil
}

// PrepareLinear packs Wᵀ for the GEMM.
func (b *Backend) PrepareLinear(out, in int, w, bias []float32) (backend.Weights, error) {
	if err := check.Linear(out, in, w, bias); err != nil {
		return nil, err
	}
	wt := make([]float32, in*out)
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			wt[i*out+o] = w[o*in+i]
		}
	}
	return &linearWeights{out: out, in: in, pb: packB(in, out, wt), bias: bias}, nil
}

// linearRows is how many rows one worker multiplies at a time.
const linearRows = 4 * gemmMR

// Linear multiplies blocks of rows by the packed weights on all cores.
func (b *Backend) Linear(xt backend.Tensor, wt backend.Weights, act backend.ActKind, acct backend.Tensor) (backend.Tensor, error) {
	w, ok := wt.(*linearWeights)
	if !ok {
		return nil, fmt.Errorf("cpu linear given %T weights", wt)
	}
	x, rows, err := b.matrix(xt, w.in)
	if err != nil {
		return nil, err
	}
	if act != backend.ActNone && act != backend.ActGELUTanh || act != backend.ActNone && acct != nil {
		return nil, fmt.Errorf("linear: activation %d with accumulation %v is not supported", act, acct != nil)
	}
	var y *Tensor
	if acct != nil {
		if y, _, err = b.matrix(acct, w.out); err != nil {
			return nil, err
		}
		if y.shape.W != rows {
			return nil, fmt.Errorf("linear: accumulator %v for %d rows", y.shape, rows)
		}
	} else {
		y = b.alloc(backend.Matrix(rows, w.out))
	}
	b.parallel((rows+linearRows-1)/linearRows, func(i int) {
		r0 := i * linearRows
		m := min(linearRows, rows-r0)
		dst := y.Data[r0*w.out : (r0+m)*w.out]
		if acct != nil {
			dst = make([]float32, m*w.out)
		}
		gemm(m, x.Data[r0*w.in:], w.in, w.pb, w.bias, dst, w.out)
		switch {
		case acct != nil:
			acc := y.Data[r0*w.out:]
			for j, v := range dst {
				acc[j] += v
			}
		case act == backend.ActGELUTanh:
			for j, v := range dst {
				dst[j] = geluTanh(v)
			}
		}
	})
	return y, nil
}

// geluTanh is GELU with the tanh approximation.
func geluTanh(v float32) float32 {
	x := float64(v)
	return float32(0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))))
}

// LayerNorm normalises every row in float64.
func (b *Backend) LayerNorm(xt backend.Tensor, eps float32) (backend.Tensor, error) {
	x, rows, err := b.matrix(xt, 0)
	if err != nil {
		return nil, err
	}
	d := x.shape.C
	y := b.alloc(x.shape)
	b.parallel(rows, func(r int) {
		row, out := x.Data[r*d:(r+1)*d], y.Data[r*d:(r+1)*d]
		var mean, sq float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(d)
		for _, v := range row {
			sq += (float64(v) - mean) * (float64(v) - mean)
		}
		inv := 1 / math.Sqrt(sq/float64(d)+float64(eps))
		for i, v := range row {
			out[i] = float32((float64(v) - mean) * inv)
		}
	})
	return y, nil
}

// RMSNormRoPE normalises and rotates every row in place.
func (b *Backend) RMSNormRoPE(xt, wt backend.Tensor, eps float32, rope *backend.RoPE) error {
	x, rows, err := b.matrix(xt, 0)
	if err != nil {
		return err
	}
	d := x.shape.C
	w, _, err := b.matrix(wt, d)
	if err != nil {
		return err
	}
	var cos, sin []float32
	pairs := 0
	if rope != nil {
		if err := check.RoPE(*rope, rows, d); err != nil {
			return err
		}
		cos, sin = ropeTables(*rope, rows)
		pairs = rope.HeadDim / 2
	}
	b.parallel(rows, func(r int) {
		row := x.Data[r*d : (r+1)*d]
		var sq float64
		for _, v := range row {
			sq += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(sq/float64(d)+float64(eps)))
		for i, v := range row {
			row[i] = v * inv * w.Data[i]
		}
		if rope == nil {
			return
		}
		c, s := cos[r*pairs:(r+1)*pairs], sin[r*pairs:(r+1)*pairs]
		for h := 0; h < d; h += rope.HeadDim {
			v := row[h : h+rope.HeadDim]
			for j := range pairs {
				a, bb := v[2*j], v[2*j+1]
				v[2*j], v[2*j+1] = a*c[j]-bb*s[j], a*s[j]+bb*c[j]
			}
		}
	})
	return nil
}

// ropeTables returns cos and sin of the rotary angle of each of rows
// tokens from r.First on and each pair (rows x headDim/2), in float64.
func ropeTables(r backend.RoPE, rows int) (cos, sin []float32) {
	g := r.Grid
	pairs := r.HeadDim / 2
	parts := check.RoPEParts(r.HeadDim)
	cos, sin = make([]float32, rows*pairs), make([]float32, rows*pairs)
	for i := 0; i < rows; i++ {
		t := r.First + i
		pos := [3]int{r.Offset + min(t/(g.H*g.W), g.F-1), (t / g.W) % g.H, t % g.W}
		j0 := 0
		for a, np := range parts {
			for j := 0; j < np; j++ {
				ang := float64(pos[a]) * math.Pow(10000, -float64(2*j)/float64(2*np))
				cos[i*pairs+j0+j] = float32(math.Cos(ang))
				sin[i*pairs+j0+j] = float32(math.Sin(ang))
			}
			j0 += np
		}
	}
	return cos, sin
}

// attend computes, for every head, softmax(q kᵀ/sqrt(headDim)) v for the
// query rows qi against the key rows ki, writing row qo[i] of out (skipped
// where qo[i] < 0). Softmax and the weighted sum are in float64.
func (b *Backend) attend(q, k, v, out []float32, d, headDim int, qi, ki, qo []int) {
	heads := d / headDim
	scale := 1 / math.Sqrt(float64(headDim))
	b.parallel(len(qi)*heads, func(r int) {
		i, h := r/heads, r%heads
		if qo[i] < 0 {
			return
		}
		qr := q[qi[i]*d+h*headDim:][:headDim]
		logits := make([]float64, len(ki))
		mx := math.Inf(-1)
		for j, kr := range ki {
			kv := k[kr*d+h*headDim:][:headDim]
			var s float32
			for c, x := range qr {
				s += x * kv[c]
			}
			logits[j] = float64(s) * scale
			mx = math.Max(mx, logits[j])
		}
		var sum float64
		for j := range logits {
			logits[j] = math.Exp(logits[j] - mx)
			sum += logits[j]
		}
		acc := make([]float64, headDim)
		for j, kr := range ki {
			p := logits[j] / sum
			vv := v[kr*d+h*headDim:][:headDim]
			for c := range acc {
				acc[c] += p * float64(vv[c])
			}
		}
		o := out[qo[i]*d+h*headDim:][:headDim]
		for c := range o {
			o[c] = float32(acc[c])
		}
	})
}

// qkv unwraps the operands of an attention op.
func (b *Backend) qkv(qt, kt, vt backend.Tensor) (q, k, v *Tensor, err error) {
	if q, err = b.tensor(qt); err != nil {
		return
	}
	if k, err = b.tensor(kt); err != nil {
		return
	}
	v, err = b.tensor(vt)
	return
}

// Attention lets every query row attend to every key row.
func (b *Backend) Attention(qt, kt, vt backend.Tensor, headDim int) (backend.Tensor, error) {
	q, k, v, err := b.qkv(qt, kt, vt)
	if err != nil {
		return nil, err
	}
	if err := check.Attention(q.shape, k.shape, v.shape, headDim); err != nil {
		return nil, err
	}
	qi, ki := iota(q.shape.W), iota(k.shape.W)
	out := b.alloc(q.shape)
	b.attend(q.Data, k.Data, v.Data, out.Data, q.shape.C, headDim, qi, ki, qi)
	return out, nil
}

func iota(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// WindowAttention attends inside each window and keeps the owners' rows.
func (b *Backend) WindowAttention(qt, kt, vt backend.Tensor, headDim int, g backend.Grid, w backend.Windows) (backend.Tensor, error) {
	q, k, v, err := b.qkv(qt, kt, vt)
	if err != nil {
		return nil, err
	}
	if err := check.WindowAttention(q.shape, k.shape, v.shape, headDim, g, w); err != nil {
		return nil, err
	}
	wh, ww := min(w.Size, g.H), min(w.Size, g.W)
	out := b.alloc(q.shape)
	for i, ys := range w.YStarts {
		for j, xs := range w.XStarts {
			var idx, dst []int
			for f := 0; f < g.F; f++ {
				for y := ys; y < ys+wh; y++ {
					for x := xs; x < xs+ww; x++ {
						t := (f*g.H+y)*g.W + x
						idx = append(idx, t)
						if w.YOwner[y] == i && w.XOwner[x] == j {
							dst = append(dst, t)
						} else {
							dst = append(dst, -1)
						}
					}
				}
			}
			b.attend(q.Data, k.Data, v.Data, out.Data, q.shape.C, headDim, idx, idx, dst)
		}
	}
	return out, nil
}

// Rows returns rows [start, start+n) of the matrix x as a view of its
// storage; the view is valid while x is, and freeing it releases nothing.
func (b *Backend) Rows(xt backend.Tensor, start, n int) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	if err := check.Rows(x.shape, start, n); err != nil {
		return nil, err
	}
	c := x.shape.C
	return &Tensor{shape: backend.Matrix(n, c), Data: x.Data[start*c : (start+n)*c : (start+n)*c]}, nil
}

// Reshape copies x into a tensor of shape s.
func (b *Backend) Reshape(xt backend.Tensor, s backend.Shape) (backend.Tensor, error) {
	x, err := b.tensor(xt)
	if err != nil {
		return nil, err
	}
	if err := check.Reshape(x.shape, s); err != nil {
		return nil, err
	}
	y := b.alloc(s)
	copy(y.Data, x.Data)
	return y, nil
}

// keys are PrepareKeys' fixed attention keys.
type keys struct {
	n, cols int
	k, bias []float32
}

func (k *keys) Out() int { return k.n }
func (k *keys) In() int  { return k.cols }
func (k *keys) Free()    {}

// PrepareKeys keeps copies of the keys and biases.
func (b *Backend) PrepareKeys(n, cols int, k, bias []float32) (backend.Weights, error) {
	if err := check.Keys(n, cols, k, bias); err != nil {
		return nil, err
	}
	return &keys{n: n, cols: cols, k: append([]float32(nil), k...), bias: append([]float32(nil), bias...)}, nil
}

// AttentionWeights computes every row's scores and softmax in float64.
func (b *Backend) AttentionWeights(qt backend.Tensor, kw backend.Weights, headDim int, eps float32) (backend.Tensor, error) {
	k, ok := kw.(*keys)
	if !ok {
		return nil, fmt.Errorf("cpu attention weights given %T keys", kw)
	}
	q, rows, err := b.matrix(qt, k.cols)
	if err != nil {
		return nil, err
	}
	if err := check.AttentionWeights(q.shape, k.cols, headDim); err != nil {
		return nil, err
	}
	d, heads := k.cols, k.cols/headDim
	out := b.alloc(backend.Matrix(rows, heads*k.n))
	b.parallel(rows, func(r int) {
		row := q.Data[r*d : (r+1)*d]
		var sq float64
		for _, v := range row {
			sq += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(sq/float64(d)+float64(eps))
		s := make([]float64, k.n)
		for h := range heads {
			mx := math.Inf(-1)
			for j := range s {
				var dot float64
				kr := k.k[j*d+h*headDim:][:headDim]
				for c, v := range row[h*headDim : (h+1)*headDim] {
					dot += float64(v) * float64(kr[c])
				}
				s[j] = dot*inv + float64(k.bias[j])
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			o := out.Data[(r*heads+h)*k.n:][:k.n]
			for j := range o {
				o[j] = float32(s[j] / sum)
			}
		}
	})
	return out, nil
}
