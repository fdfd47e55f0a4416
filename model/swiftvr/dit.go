package swiftvr

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// DiT is the Wan2.2-TI2V-5B transformer as SwiftVR runs it (one step at
// timestep 1000, the fixed prompt, mask-free shifted-window
// self-attention), as a float32 reference on the host. It is the
// reference the GPU implementation will be checked against; it is not
// fast. Dimensions come from the checkpoint.
//
// Not yet checked against an independent implementation: see
// scripts/golden_dit.py.
type DiT struct {
	dim, heads, headDim, ffn, layers int
	in, out                          int
	eps                              float32
	w                                map[string][]float32
	// Per block, the cross-attention keys and values of the fixed prompt.
	crossK, crossV [][]float32
	prompt         int       // prompt tokens
	temb           []float32 // time embedding at t = 1000 (dim)
	mod            []float32 // block modulation (6 x dim)
}

// NewDiT loads the transformer from src with the dimensions in d, and
// precomputes what depends only on the checkpoint: the time embedding at
// timestep 1000 and every block's cross-attention keys and values for the
// prompt embedding (prompt tokens x text dim).
func NewDiT(src Source, d Dims, eps float32, prompt []float32) (*DiT, error) {
	m := &DiT{dim: d.Dim, heads: d.Heads, headDim: d.HeadDim, ffn: d.FFNDim, layers: d.Layers, in: d.InChannels, out: d.OutChannels, eps: eps, w: map[string][]float32{}}
	if m.heads*m.headDim != m.dim || m.headDim%2 != 0 || d.PatchSize != [3]int{1, 2, 2} {
		return nil, fmt.Errorf("dit: %d heads x %d != dim %d, or patch %v is not 1x2x2", m.heads, m.headDim, m.dim, d.PatchSize)
	}
	get := func(name string, want ...int) ([]float32, error) {
		shape, v, err := src.Tensor(name)
		if err != nil {
			return nil, err
		}
		n := 1
		for _, s := range want {
			n *= s
		}
		if len(v) != n {
			return nil, fmt.Errorf("dit: %s has shape %v, want %v", name, shape, want)
		}
		m.w[name] = v
		return v, nil
	}
	D := m.dim
	specs := map[string][]int{
		"patch_embedding.weight": {D, m.in, 1, 2, 2}, "patch_embedding.bias": {D},
		"condition_embedder.time_embedder.linear_1.weight": {D, d.FreqDim}, "condition_embedder.time_embedder.linear_1.bias": {D},
		"condition_embedder.time_embedder.linear_2.weight": {D, D}, "condition_embedder.time_embedder.linear_2.bias": {D},
		"condition_embedder.time_proj.weight": {6 * D, D}, "condition_embedder.time_proj.bias": {6 * D},
		"condition_embedder.text_embedder.linear_1.weight": {D, d.TextDim}, "condition_embedder.text_embedder.linear_1.bias": {D},
		"condition_embedder.text_embedder.linear_2.weight": {D, D}, "condition_embedder.text_embedder.linear_2.bias": {D},
		"scale_shift_table": {1, 2, D}, "proj_out.weight": {m.out * 4, D}, "proj_out.bias": {m.out * 4},
	}
	for i := 0; i < m.layers; i++ {
		p := fmt.Sprintf("blocks.%d.", i)
		for _, a := range []string{"attn1.", "attn2."} {
			for _, l := range []string{"to_q", "to_k", "to_v", "to_out.0"} {
				specs[p+a+l+".weight"], specs[p+a+l+".bias"] = []int{D, D}, []int{D}
			}
			specs[p+a+"norm_q.weight"], specs[p+a+"norm_k.weight"] = []int{D}, []int{D}
		}
		specs[p+"norm2.weight"], specs[p+"norm2.bias"] = []int{D}, []int{D}
		specs[p+"ffn.net.0.proj.weight"], specs[p+"ffn.net.0.proj.bias"] = []int{m.ffn, D}, []int{m.ffn}
		specs[p+"ffn.net.2.weight"], specs[p+"ffn.net.2.bias"] = []int{D, m.ffn}, []int{D}
		specs[p+"scale_shift_table"] = []int{1, 6, D}
	}
	for name, shape := range specs {
		if _, err := get(name, shape...); err != nil {
			return nil, err
		}
	}
	if len(prompt)%d.TextDim != 0 {
		return nil, fmt.Errorf("dit: prompt embedding of %d values is not a multiple of text dim %d", len(prompt), d.TextDim)
	}
	m.prompt = len(prompt) / d.TextDim
	m.precompute(prompt, d.TextDim, d.FreqDim)
	return m, nil
}

// linear computes y[n][o] = b[o] + sum_i x[n][i] w[o][i] (PyTorch Linear).
func linear(x []float32, n, in int, w, b []float32, out int) []float32 {
	y := make([]float32, n*out)
	parallelRows(n, func(r int) {
		xr := x[r*in : (r+1)*in]
		yr := y[r*out : (r+1)*out]
		for o := 0; o < out; o++ {
			wr := w[o*in : (o+1)*in]
			var s float32
			for i, v := range xr {
				s += v * wr[i]
			}
			if b != nil {
				s += b[o]
			}
			yr[o] = s
		}
	})
	return y
}

func parallelRows(n int, f func(r int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := k; r < n; r += workers {
				f(r)
			}
		}()
	}
	wg.Wait()
}

func silu(v float32) float32 { return v / (1 + float32(math.Exp(float64(-v)))) }

// geluTanh is GELU with the tanh approximation.
func geluTanh(v float32) float32 {
	x := float64(v)
	return float32(0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))))
}

// layerNorm normalises each row of n x d in place (no affine when w nil).
func layerNorm(x []float32, n, d int, w, b []float32, eps float32) {
	for r := 0; r < n; r++ {
		row := x[r*d : (r+1)*d]
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
			y := float32((float64(v) - mean) * inv)
			if w != nil {
				y = y*w[i] + b[i]
			}
			row[i] = y
		}
	}
}

// rmsNorm normalises each row of n x d in place and scales by w.
func rmsNorm(x []float32, n, d int, w []float32, eps float32) {
	for r := 0; r < n; r++ {
		row := x[r*d : (r+1)*d]
		var sq float64
		for _, v := range row {
			sq += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(sq/float64(d)+float64(eps)))
		for i, v := range row {
			row[i] = v * inv * w[i]
		}
	}
}

// precompute the time embedding at t = 1000, the block modulation input,
// and the prompt's cross-attention keys and values per block.
func (m *DiT) precompute(prompt []float32, textDim, freqDim int) {
	D := m.dim
	half := freqDim / 2
	sin := make([]float32, freqDim) // Timesteps(flip_sin_to_cos=True): [cos, sin]
	for j := 0; j < half; j++ {
		f := math.Exp(-math.Log(10000) * float64(j) / float64(half))
		sin[j] = float32(math.Cos(1000 * f))
		sin[half+j] = float32(math.Sin(1000 * f))
	}
	w := m.w
	h := linear(sin, 1, freqDim, w["condition_embedder.time_embedder.linear_1.weight"], w["condition_embedder.time_embedder.linear_1.bias"], D)
	for i := range h {
		h[i] = silu(h[i])
	}
	m.temb = linear(h, 1, D, w["condition_embedder.time_embedder.linear_2.weight"], w["condition_embedder.time_embedder.linear_2.bias"], D)
	st := make([]float32, D)
	for i, v := range m.temb {
		st[i] = silu(v)
	}
	m.mod = linear(st, 1, D, w["condition_embedder.time_proj.weight"], w["condition_embedder.time_proj.bias"], 6*D)
	t := linear(prompt, m.prompt, textDim, w["condition_embedder.text_embedder.linear_1.weight"], w["condition_embedder.text_embedder.linear_1.bias"], D)
	for i := range t {
		t[i] = geluTanh(t[i])
	}
	text := linear(t, m.prompt, D, w["condition_embedder.text_embedder.linear_2.weight"], w["condition_embedder.text_embedder.linear_2.bias"], D)
	for i := 0; i < m.layers; i++ {
		p := fmt.Sprintf("blocks.%d.attn2.", i)
		k := linear(text, m.prompt, D, w[p+"to_k.weight"], w[p+"to_k.bias"], D)
		v := linear(text, m.prompt, D, w[p+"to_v.weight"], w[p+"to_v.bias"], D)
		rmsNorm(k, m.prompt, D, w[p+"norm_k.weight"], m.eps)
		m.crossK, m.crossV = append(m.crossK, k), append(m.crossV, v)
	}
}

// ropeTables returns cos and sin of the rotary angles for every token of
// an f x h x w grid and every pair of a head: the pairs are split t/h/w as
// headDim - 2*(2*(headDim/6)) / 2*(headDim/6) / 2*(headDim/6) dimensions
// (44/42/42 for 128), with theta 10000 and the temporal position offset +
// frame.
func (m *DiT) ropeTables(f, h, w, offset int) (cos, sin []float32) {
	pairs := m.headDim / 2
	hw := 2 * (m.headDim / 6)
	dims := [3]int{m.headDim - 2*hw, hw, hw}
	type axis struct{ dim, first int }
	axes := [3]axis{{dims[0], 0}, {dims[1], dims[0] / 2}, {dims[2], (dims[0] + dims[1]) / 2}}
	n := f * h * w
	cos, sin = make([]float32, n*pairs), make([]float32, n*pairs)
	for t := 0; t < n; t++ {
		pos := [3]int{offset + t/(h*w), (t / w) % h, t % w}
		for a, ax := range axes {
			for j := 0; j < ax.dim/2; j++ {
				theta := math.Pow(10000, -float64(2*j)/float64(ax.dim))
				ang := float64(pos[a]) * theta
				cos[t*pairs+ax.first+j] = float32(math.Cos(ang))
				sin[t*pairs+ax.first+j] = float32(math.Sin(ang))
			}
		}
	}
	return cos, sin
}

// rope rotates consecutive pairs of every head of x (n x dim) in place.
func (m *DiT) rope(x []float32, n int, cos, sin []float32) {
	pairs := m.headDim / 2
	for t := 0; t < n; t++ {
		for hd := 0; hd < m.heads; hd++ {
			v := x[t*m.dim+hd*m.headDim:][:m.headDim]
			for j := 0; j < pairs; j++ {
				c, s := cos[t*pairs+j], sin[t*pairs+j]
				a, b := v[2*j], v[2*j+1]
				v[2*j], v[2*j+1] = a*c-b*s, a*s+b*c
			}
		}
	}
}

// attend computes softmax(q k^T / sqrt(headDim)) v for query rows qi of q
// against key rows ki of k and v, all heads, writing rows out[qo].
func (m *DiT) attend(q, k, v []float32, qi, ki []int, out []float32, qo []int) {
	scale := float32(1 / math.Sqrt(float64(m.headDim)))
	parallelRows(len(qi)*m.heads, func(r int) {
		i, hd := r/m.heads, r%m.heads
		if qo[i] < 0 {
			return
		}
		qr := q[qi[i]*m.dim+hd*m.headDim:][:m.headDim]
		logits := make([]float64, len(ki))
		mx := math.Inf(-1)
		for j, kr := range ki {
			kv := k[kr*m.dim+hd*m.headDim:][:m.headDim]
			var s float32
			for d, x := range qr {
				s += x * kv[d]
			}
			logits[j] = float64(s * scale)
			mx = math.Max(mx, logits[j])
		}
		var sum float64
		for j := range logits {
			logits[j] = math.Exp(logits[j] - mx)
			sum += logits[j]
		}
		o := out[qo[i]*m.dim+hd*m.headDim:][:m.headDim]
		acc := make([]float64, m.headDim)
		for j, kr := range ki {
			p := logits[j] / sum
			vv := v[kr*m.dim+hd*m.headDim:][:m.headDim]
			for d := range acc {
				acc[d] += p * float64(vv[d])
			}
		}
		for d := range o {
			o[d] = float32(acc[d])
		}
	})
}

// Forward predicts v for one chunk of latents x (f x h x w x in, NHWC
// float32, h and w even) whose first latent has global temporal index
// offset. The restored latent is x - v.
func (m *DiT) Forward(x []float32, f, h, w, offset int) ([]float32, error) {
	if h%2 != 0 || w%2 != 0 || len(x) != f*h*w*m.in {
		return nil, fmt.Errorf("dit: %d latent values for %dx%dx%d x %d (h and w must be even)", len(x), f, h, w, m.in)
	}
	D, W := m.dim, m.w
	hp, wp := h/2, w/2
	n := f * hp * wp
	// Patch embedding: Conv3d (1,2,2) stride (1,2,2) as a linear over each
	// patch in (c, a, b) order.
	patch := make([]float32, n*m.in*4)
	for t := 0; t < n; t++ {
		fi, y, xx := t/(hp*wp), (t/wp)%hp, t%wp
		for c := 0; c < m.in; c++ {
			for a := 0; a < 2; a++ {
				for b := 0; b < 2; b++ {
					patch[t*m.in*4+c*4+a*2+b] = x[((fi*h+2*y+a)*w+2*xx+b)*m.in+c]
				}
			}
		}
	}
	hid := linear(patch, n, m.in*4, W["patch_embedding.weight"], W["patch_embedding.bias"], D)
	cos, sin := m.ropeTables(f, hp, wp, offset)
	norm := make([]float32, n*D)
	for b := 0; b < m.layers; b++ {
		p := fmt.Sprintf("blocks.%d.", b)
		table := W[p+"scale_shift_table"]
		mod := func(i int) []float32 { // (table + temb projection)[i]
			out := make([]float32, D)
			for d := range out {
				out[d] = table[i*D+d] + m.mod[i*D+d]
			}
			return out
		}
		shift, scale, gate := mod(0), mod(1), mod(2)
		cShift, cScale, cGate := mod(3), mod(4), mod(5)
		// 1. Self-attention in shifted windows.
		copy(norm, hid)
		layerNorm(norm, n, D, nil, nil, m.eps)
		modulate(norm, n, D, scale, shift)
		a := p + "attn1."
		q := linear(norm, n, D, W[a+"to_q.weight"], W[a+"to_q.bias"], D)
		k := linear(norm, n, D, W[a+"to_k.weight"], W[a+"to_k.bias"], D)
		v := linear(norm, n, D, W[a+"to_v.weight"], W[a+"to_v.bias"], D)
		rmsNorm(q, n, D, W[a+"norm_q.weight"], m.eps)
		rmsNorm(k, n, D, W[a+"norm_k.weight"], m.eps)
		m.rope(q, n, cos, sin)
		m.rope(k, n, cos, sin)
		att := make([]float32, n*D)
		m.windowAttention(q, k, v, att, f, hp, wp, b%2 == 1)
		o := linear(att, n, D, W[a+"to_out.0.weight"], W[a+"to_out.0.bias"], D)
		gated(hid, o, n, D, gate)
		// 2. Cross-attention to the prompt.
		copy(norm, hid)
		layerNorm(norm, n, D, W[p+"norm2.weight"], W[p+"norm2.bias"], m.eps)
		a = p + "attn2."
		q = linear(norm, n, D, W[a+"to_q.weight"], W[a+"to_q.bias"], D)
		rmsNorm(q, n, D, W[a+"norm_q.weight"], m.eps)
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		keys := make([]int, m.prompt)
		for i := range keys {
			keys[i] = i
		}
		m.attend(q, m.crossK[b], m.crossV[b], all, keys, att, all)
		o = linear(att, n, D, W[a+"to_out.0.weight"], W[a+"to_out.0.bias"], D)
		for i := range hid {
			hid[i] += o[i]
		}
		// 3. Feed-forward.
		copy(norm, hid)
		layerNorm(norm, n, D, nil, nil, m.eps)
		modulate(norm, n, D, cScale, cShift)
		ff := linear(norm, n, D, W[p+"ffn.net.0.proj.weight"], W[p+"ffn.net.0.proj.bias"], m.ffn)
		for i := range ff {
			ff[i] = geluTanh(ff[i])
		}
		o = linear(ff, n, m.ffn, W[p+"ffn.net.2.weight"], W[p+"ffn.net.2.bias"], D)
		gated(hid, o, n, D, cGate)
	}
	// Head: LayerNorm modulated by (table + temb), linear, unpatchify.
	table := W["scale_shift_table"]
	shift, scale := make([]float32, D), make([]float32, D)
	for d := 0; d < D; d++ {
		shift[d], scale[d] = table[d]+m.temb[d], table[D+d]+m.temb[d]
	}
	copy(norm, hid)
	layerNorm(norm, n, D, nil, nil, m.eps)
	modulate(norm, n, D, scale, shift)
	y := linear(norm, n, D, W["proj_out.weight"], W["proj_out.bias"], m.out*4)
	out := make([]float32, f*h*w*m.out)
	for t := 0; t < n; t++ {
		fi, py, px := t/(hp*wp), (t/wp)%hp, t%wp
		for a := 0; a < 2; a++ {
			for b := 0; b < 2; b++ {
				for c := 0; c < m.out; c++ {
					out[((fi*h+2*py+a)*w+2*px+b)*m.out+c] = y[t*m.out*4+(a*2+b)*m.out+c]
				}
			}
		}
	}
	return out, nil
}

// windowAttention runs self-attention inside 16x16-token windows spanning
// all frames; each token keeps the output of its owner window.
func (m *DiT) windowAttention(q, k, v, out []float32, f, h, w int, shifted bool) {
	shift := 0
	if shifted {
		shift = Window / 2
	}
	sh, sw := WindowStarts(h, shift), WindowStarts(w, shift)
	oh, ow := WindowOwners(h, sh, shifted), WindowOwners(w, sw, shifted)
	wh, ww := min(Window, h), min(Window, w)
	for i, ys := range sh {
		for j, xs := range sw {
			var idx, dst []int
			for fi := 0; fi < f; fi++ {
				for y := ys; y < ys+wh; y++ {
					for x := xs; x < xs+ww; x++ {
						t := (fi*h+y)*w + x
						idx = append(idx, t)
						if oh[y] == i && ow[x] == j {
							dst = append(dst, t)
						} else {
							dst = append(dst, -1)
						}
					}
				}
			}
			m.attend(q, k, v, idx, idx, out, dst)
		}
	}
}

// modulate applies x*(1+scale)+shift to each row.
func modulate(x []float32, n, d int, scale, shift []float32) {
	for r := 0; r < n; r++ {
		row := x[r*d : (r+1)*d]
		for i := range row {
			row[i] = row[i]*(1+scale[i]) + shift[i]
		}
	}
}

// gated adds o*gate to hid row by row.
func gated(hid, o []float32, n, d int, gate []float32) {
	for r := 0; r < n; r++ {
		for i := 0; i < d; i++ {
			hid[r*d+i] += o[r*d+i] * gate[i]
		}
	}
}
