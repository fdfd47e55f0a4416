package swiftvr

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/vsr-dev/vsr/backend"
)

// DiT is the Wan2.2-TI2V-5B transformer as SwiftVR runs it: one step at
// timestep 1000 with the fixed prompt, mask-free shifted-window
// self-attention, bound to a backend that implements backend.Transformer.
// Dimensions come from the checkpoint.
//
// Everything that depends only on the weights is computed once at load:
// the time embedding and modulation, the prompt's cross-attention keys and
// values per block, and the folding of the modulation into the weights:
// LayerNorm(x)*(1+scale)+shift followed by a linear layer is the
// LayerNorm followed by a linear layer with scaled columns and a shifted
// bias; the gate of a gated residual scales the rows of the layer before
// it; norm2's affine folds into the cross-attention query. A block is then
// LayerNorm, GEMMs, RMSNorm+RoPE and attention, with residuals added by
// the GEMMs.
//
// A prompt of few distinct rows (the empty prompt SwiftVR uses: one token
// and zero padding) is merged (see promptKeys): the cross-attention
// becomes one row kernel for its weights and a small GEMM with the values
// folded into the output projection.
type DiT struct {
	// FFNRows caps the tokens the feed-forward layers take at a time (0:
	// all): the FFN's intermediate (tokens x FFNDim) is the DiT's largest
	// activation, and rows are independent, so pieces give the same
	// result in less memory.
	FFNRows int
	// Graphs records the forward pass of each latent shape after its first
	// run and replays the recording from then on, where the backend can
	// record (backend.Recorder, CUDA graphs): one launch a chunk instead of
	// hundreds of ops, with the same result. NewDiT turns it on.
	Graphs bool

	graphs  map[graphKey]*ditGraph // nil values: recording or replay failed
	order   []graphKey             // graphs' keys, oldest first
	passes  int                    // forward passes run (for tests)
	replays int                    // of which replayed

	b       backend.Backend
	t       backend.Transformer
	t8      backend.FP8 // the blocks' GEMMs in fp8; nil in bf16
	d       Dims
	eps     float32
	patch   backend.Weights
	blocks  []ditBlock
	head    backend.Weights
	weights []backend.Weights
	tensors []backend.Tensor
}

type ditBlock struct {
	q, k, v, o   backend.Weights // self-attention, modulation folded into q/k/v, gate into o
	normQ, normK backend.Tensor
	cq, co       backend.Weights // cross-attention, norm2 folded into cq
	cNormQ       backend.Tensor
	crossK       backend.Tensor // prompt keys (RMS-normalised) and values
	crossV       backend.Tensor
	keys         backend.Weights // merged prompt: keys for AttentionWeights, values folded into co
	ff1, ff2     backend.Weights // FFN, modulation folded into ff1, gate into ff2
}

// Precision is the number format of the DiT blocks' linear layers.
type Precision int

const (
	// BF16 runs them in the storage type, bf16 (the default).
	BF16 Precision = iota
	// FP8 runs them in e4m3 (backend.FP8): weights with a scale per output
	// channel, activations with a scale per token, float32 accumulation;
	// the residual stream, norms, attention, the patch embedding and the
	// head stay in bf16.
	FP8
)

// ParsePrecision parses "bf16" or "fp8".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "bf16":
		return BF16, nil
	case "fp8":
		return FP8, nil
	}
	return 0, fmt.Errorf("DiT precision %q: want bf16 or fp8", s)
}

func (p Precision) String() string { return [...]string{"bf16", "fp8"}[p] }

// NewDiT loads the transformer from src with the dimensions in d onto b,
// whose backend must implement backend.Transformer (and backend.FP8 for
// prec FP8). prompt is the prompt embedding (prompt tokens x text dim).
func NewDiT(b backend.Backend, src Source, d Dims, eps float32, prompt []float32, prec Precision) (*DiT, error) {
	t, ok := b.(backend.Transformer)
	if !ok {
		return nil, fmt.Errorf("dit: backend %s cannot run transformers", b.Name())
	}
	var t8 backend.FP8
	if prec == FP8 {
		if t8, ok = b.(backend.FP8); !ok {
			return nil, fmt.Errorf("dit: fp8 needs a GPU of compute capability 8.9 or newer; %s has no fp8 linear layers: use bf16", b.Name())
		}
	}
	if d.Heads*d.HeadDim != d.Dim || d.HeadDim%2 != 0 || d.PatchSize != [3]int{1, 2, 2} || d.TextDim < 1 || len(prompt)%d.TextDim != 0 || len(prompt) == 0 {
		return nil, fmt.Errorf("dit: %d heads x %d != dim %d, patch %v is not 1x2x2, or a prompt of %d values for text dim %d",
			d.Heads, d.HeadDim, d.Dim, d.PatchSize, len(prompt), d.TextDim)
	}
	m := &DiT{FFNRows: 8192, Graphs: true, b: b, t: t, t8: t8, d: d, eps: eps}
	if err := m.load(src, prompt); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Precision returns the number format of the blocks' linear layers.
func (m *DiT) Precision() Precision {
	if m.t8 != nil {
		return FP8
	}
	return BF16
}

// Close frees the weights and the recordings.
func (m *DiT) Close() {
	m.dropGraphs()
	for _, w := range m.weights {
		w.Free()
	}
	for _, t := range m.tensors {
		t.Free()
	}
	m.weights, m.tensors, m.blocks = nil, nil, nil
}

// tensor reads a tensor of src and checks its size.
func tensor(src Source, name string, want ...int) ([]float32, error) {
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
	return v, nil
}

// fold is a host-side transformation of a linear layer before upload.
type fold struct {
	colScale []float32 // W[o][i] *= colScale[i] (then bias += W·colShift with the original W)
	colShift []float32
	onePlus  bool      // colScale holds s and the factor is 1+s
	rowScale []float32 // W[o][i] *= rowScale[o], b[o] *= rowScale[o]
	// hot marks a layer that runs on every token of every chunk: in fp8
	// when the DiT is (layers run once at load stay in the storage type).
	hot bool
}

// linear loads name.weight (out x in) and name.bias, folds and prepares it.
func (m *DiT) linear(src Source, name string, out, in int, f fold) (backend.Weights, error) {
	w, bias, err := weightBias(src, name, out, in)
	if err != nil {
		return nil, err
	}
	// w and bias are ours (see Source): fold in place.
	parallelRows(out, func(o int) {
		row := w[o*in : (o+1)*in]
		if f.colShift != nil {
			var s float64
			for i, v := range row {
				s += float64(v) * float64(f.colShift[i])
			}
			bias[o] += float32(s)
		}
		if f.colScale != nil {
			for i := range row {
				s := f.colScale[i]
				if f.onePlus {
					s++
				}
				row[i] *= s
			}
		}
		if f.rowScale != nil {
			for i := range row {
				row[i] *= f.rowScale[o]
			}
			bias[o] *= f.rowScale[o]
		}
	})
	var p backend.Weights
	if f.hot && m.t8 != nil {
		p, err = m.t8.PrepareLinearFP8(out, in, w, bias)
	} else {
		p, err = m.t.PrepareLinear(out, in, w, bias)
	}
	if err != nil {
		return nil, fmt.Errorf("dit: %s: %w", name, err)
	}
	m.weights = append(m.weights, p)
	return p, nil
}

// vector uploads a 1 x n tensor of src.
func (m *DiT) vector(src Source, name string, n int) (backend.Tensor, error) {
	v, err := tensor(src, name, n)
	if err != nil {
		return nil, err
	}
	t, err := m.b.Upload(backend.Matrix(1, n), v)
	if err != nil {
		return nil, err
	}
	m.tensors = append(m.tensors, t)
	return t, nil
}

// weightBias reads a linear layer's name.weight (out x in) and name.bias.
func weightBias(src Source, name string, out, in int) (w, b []float32, err error) {
	if w, err = tensor(src, name+".weight", out, in); err != nil {
		return nil, nil, err
	}
	if b, err = tensor(src, name+".bias", out); err != nil {
		return nil, nil, err
	}
	return w, b, nil
}

// hostLinear computes x·Wᵀ + b of the layer name for every row x of xs on
// the host in float64.
func hostLinear(src Source, name string, xs [][]float32, out int) ([][]float32, error) {
	in := len(xs[0])
	w, b, err := weightBias(src, name, out, in)
	if err != nil {
		return nil, err
	}
	ys := make([][]float32, len(xs))
	for i := range ys {
		ys[i] = make([]float32, out)
	}
	parallelRows(out, func(o int) {
		wr := w[o*in : (o+1)*in]
		for i, x := range xs {
			s := float64(b[o])
			for c, v := range x {
				s += float64(v) * float64(wr[c])
			}
			ys[i][o] = float32(s)
		}
	})
	return ys, nil
}

func silu(v float32) float32 { return v / (1 + float32(math.Exp(float64(-v)))) }

func (m *DiT) load(src Source, prompt []float32) error {
	d := m.d
	D := d.Dim
	// Time embedding at t = 1000: Timesteps(flip_sin_to_cos) = [cos, sin],
	// linear_1, SiLU, linear_2; the modulation is time_proj(SiLU(temb)).
	half := d.FreqDim / 2
	sin := make([]float32, d.FreqDim)
	for j := 0; j < half; j++ {
		f := math.Exp(-math.Log(10000) * float64(j) / float64(half))
		sin[j], sin[half+j] = float32(math.Cos(1000*f)), float32(math.Sin(1000*f))
	}
	h, err := hostLinear(src, "condition_embedder.time_embedder.linear_1", [][]float32{sin}, D)
	if err != nil {
		return err
	}
	for i, v := range h[0] {
		h[0][i] = silu(v)
	}
	te, err := hostLinear(src, "condition_embedder.time_embedder.linear_2", h, D)
	if err != nil {
		return err
	}
	temb := te[0]
	st := make([]float32, D)
	for i, v := range temb {
		st[i] = silu(v)
	}
	mods, err := hostLinear(src, "condition_embedder.time_proj", [][]float32{st}, 6*D)
	if err != nil {
		return err
	}
	mod := mods[0]
	if m.patch, err = m.linear(src, "patch_embedding", D, d.InChannels*4, fold{}); err != nil {
		return err
	}
	// The prompt through the text embedder: on the host for the distinct
	// rows of a prompt that merges, else on the backend.
	rows, count := distinctRows(prompt, d.TextDim)
	var merged [][]float32
	var text backend.Tensor
	if mergePrompt && len(rows) <= maxPromptKeys {
		if merged, err = hostLinear(src, "condition_embedder.text_embedder.linear_1", rows, D); err != nil {
			return err
		}
		for _, r := range merged {
			for i, v := range r {
				r[i] = geluTanh(v)
			}
		}
		if merged, err = hostLinear(src, "condition_embedder.text_embedder.linear_2", merged, D); err != nil {
			return err
		}
	} else {
		if text, err = m.textEmbedding(src, prompt); err != nil {
			return err
		}
		defer text.Free()
	}

	for i := 0; i < d.Layers; i++ {
		p := fmt.Sprintf("blocks.%d.", i)
		table, err := tensor(src, p+"scale_shift_table", 1, 6, D)
		if err != nil {
			return err
		}
		mv := func(k int) []float32 { // (table + modulation)[k]
			out := make([]float32, D)
			for c := range out {
				out[c] = table[k*D+c] + mod[k*D+c]
			}
			return out
		}
		shift, scale, gate, cShift, cScale, cGate := mv(0), mv(1), mv(2), mv(3), mv(4), mv(5)
		var blk ditBlock
		pre := fold{colScale: scale, colShift: shift, onePlus: true, hot: true}
		a := p + "attn1."
		for _, l := range []struct {
			w    *backend.Weights
			name string
			f    fold
		}{{&blk.q, a + "to_q", pre}, {&blk.k, a + "to_k", pre}, {&blk.v, a + "to_v", pre}, {&blk.o, a + "to_out.0", fold{rowScale: gate, hot: true}}} {
			if *l.w, err = m.linear(src, l.name, D, D, l.f); err != nil {
				return err
			}
		}
		if blk.normQ, err = m.vector(src, a+"norm_q.weight", D); err != nil {
			return err
		}
		if blk.normK, err = m.vector(src, a+"norm_k.weight", D); err != nil {
			return err
		}
		n2w, err := tensor(src, p+"norm2.weight", D)
		if err != nil {
			return err
		}
		n2b, err := tensor(src, p+"norm2.bias", D)
		if err != nil {
			return err
		}
		a = p + "attn2."
		if blk.cq, err = m.linear(src, a+"to_q", D, D, fold{colScale: n2w, colShift: n2b, hot: true}); err != nil {
			return err
		}
		if merged != nil {
			err = m.promptKeys(src, a, merged, count, &blk)
		} else {
			err = m.crossKV(src, a, text, &blk)
		}
		if err != nil {
			return err
		}
		if blk.ff1, err = m.linear(src, p+"ffn.net.0.proj", d.FFNDim, D, fold{colScale: cScale, colShift: cShift, onePlus: true, hot: true}); err != nil {
			return err
		}
		if blk.ff2, err = m.linear(src, p+"ffn.net.2", D, d.FFNDim, fold{rowScale: cGate, hot: true}); err != nil {
			return err
		}
		m.blocks = append(m.blocks, blk)
	}
	// Head: LayerNorm modulated by (table + temb), then proj_out.
	table, err := tensor(src, "scale_shift_table", 1, 2, D)
	if err != nil {
		return err
	}
	shift, scale := make([]float32, D), make([]float32, D)
	for c := 0; c < D; c++ {
		shift[c], scale[c] = table[c]+temb[c], table[D+c]+temb[c]
	}
	m.head, err = m.linear(src, "proj_out", d.OutChannels*4, D, fold{colScale: scale, colShift: shift, onePlus: true})
	return err
}

// textEmbedding runs the prompt (tokens x text dim) through the text
// embedder on the backend.
func (m *DiT) textEmbedding(src Source, prompt []float32) (backend.Tensor, error) {
	d := m.d
	pt, err := m.b.Upload(backend.Matrix(len(prompt)/d.TextDim, d.TextDim), prompt)
	if err != nil {
		return nil, err
	}
	defer pt.Free()
	l1, err := m.linear(src, "condition_embedder.text_embedder.linear_1", d.Dim, d.TextDim, fold{})
	if err != nil {
		return nil, err
	}
	l2, err := m.linear(src, "condition_embedder.text_embedder.linear_2", d.Dim, d.Dim, fold{})
	if err != nil {
		return nil, err
	}
	defer m.release(l1, l2)
	t1, err := m.t.Linear(pt, l1, backend.ActGELUTanh, nil)
	if err != nil {
		return nil, err
	}
	defer t1.Free()
	return m.t.Linear(t1, l2, backend.ActNone, nil)
}

// release frees weights needed only at load.
func (m *DiT) release(ws ...backend.Weights) {
	for _, w := range ws {
		w.Free()
		m.weights = slices.DeleteFunc(m.weights, func(x backend.Weights) bool { return x == w })
	}
}

// crossKV loads one block's cross-attention output projection and query
// norm, and computes its prompt keys (RMS-normalised) and values.
func (m *DiT) crossKV(src Source, a string, text backend.Tensor, blk *ditBlock) error {
	D := m.d.Dim
	var err error
	if blk.co, err = m.linear(src, a+"to_out.0", D, D, fold{hot: true}); err != nil {
		return err
	}
	if blk.cNormQ, err = m.vector(src, a+"norm_q.weight", D); err != nil {
		return err
	}
	wk, err := m.linear(src, a+"to_k", D, D, fold{})
	if err != nil {
		return err
	}
	wv, err := m.linear(src, a+"to_v", D, D, fold{})
	if err != nil {
		return err
	}
	defer m.release(wk, wv)
	nk, err := m.vector(src, a+"norm_k.weight", D)
	if err != nil {
		return err
	}
	if blk.crossK, err = m.t.Linear(text, wk, backend.ActNone, nil); err != nil {
		return err
	}
	m.tensors = append(m.tensors, blk.crossK)
	if err := m.t.RMSNormRoPE(blk.crossK, nk, m.eps, nil); err != nil {
		return err
	}
	if blk.crossV, err = m.t.Linear(text, wv, backend.ActNone, nil); err != nil {
		return err
	}
	m.tensors = append(m.tensors, blk.crossV)
	return nil
}

// mergePrompt enables the merged cross-attention (VSR_SWIFTVR_PROMPT_MERGE=off
// turns it off, to compare): a prompt of at most maxPromptKeys distinct rows
// attends to those rows alone, each weighted by how often it appears, with
// the values folded into the output projection; a prompt with more distinct
// rows takes the unmerged path. Both compute the same attention up to
// rounding. Why the limit is 8: docs/BENCHMARKS.md.
var mergePrompt = os.Getenv("VSR_SWIFTVR_PROMPT_MERGE") != "off"

const maxPromptKeys = 8

// distinctRows returns the distinct rows of the matrix v (rows of n
// values, compared bit for bit) in order of first appearance, and how
// often each appears.
func distinctRows(v []float32, n int) (rows [][]float32, count []int) {
	seen := map[string]int{}
	key := make([]byte, 0, 4*n)
	for r := 0; r < len(v)/n; r++ {
		row := v[r*n : (r+1)*n]
		key = key[:0]
		for _, x := range row {
			key = binary.LittleEndian.AppendUint32(key, math.Float32bits(x))
		}
		if i, ok := seen[string(key)]; ok {
			count[i]++
			continue
		}
		seen[string(key)] = len(rows)
		rows, count = append(rows, row), append(count, 1)
	}
	return rows, count
}

// promptKeys prepares one block's cross-attention to a prompt of a few
// distinct rows (text: their text embeddings, count: how often each
// appears), exactly:
//   - attending to c identical keys with identical values is attending to
//     one of them with its weight multiplied by c: a bias of log c on its
//     score;
//   - the keys fold in the query's RMSNorm weight and 1/sqrt(headDim), so
//     AttentionWeights gives each token's weights p_hj from the query
//     projection alone;
//   - head h's output is Σ_j p_hj v_jh, so the output projection is
//     b + Σ_hj p_hj (W_o[:, h] v_jh): a linear layer of heads x keys inputs.
//
// The keys are padded with left-out ones (bias -Inf) to make heads x keys
// a multiple of 8, for 16-byte GEMM rows.
func (m *DiT) promptKeys(src Source, a string, text [][]float32, count []int, blk *ditBlock) error {
	D, hd, heads := m.d.Dim, m.d.HeadDim, m.d.Heads
	k, err := hostLinear(src, a+"to_k", text, D)
	if err != nil {
		return err
	}
	v, err := hostLinear(src, a+"to_v", text, D)
	if err != nil {
		return err
	}
	nk, err := tensor(src, a+"norm_k.weight", D)
	if err != nil {
		return err
	}
	nq, err := tensor(src, a+"norm_q.weight", D)
	if err != nil {
		return err
	}
	wo, bo, err := weightBias(src, a+"to_out.0", D, D)
	if err != nil {
		return err
	}
	n := len(text)
	for heads*n%8 != 0 {
		n++
	}
	keys, bias := make([]float32, n*D), make([]float32, n)
	scale := 1 / math.Sqrt(float64(hd))
	for j := range bias {
		if j >= len(text) {
			bias[j] = float32(math.Inf(-1))
			continue
		}
		bias[j] = float32(math.Log(float64(count[j])))
		var sq float64
		for _, x := range k[j] {
			sq += float64(x) * float64(x)
		}
		inv := 1 / math.Sqrt(sq/float64(D)+float64(m.eps))
		for c, x := range k[j] {
			keys[j*D+c] = float32(float64(x) * inv * float64(nk[c]) * float64(nq[c]) * scale)
		}
	}
	in := heads * n
	u := make([]float32, D*in)
	parallelRows(D, func(o int) {
		for h := range heads {
			w := wo[o*D+h*hd:][:hd]
			for j := range text {
				var s float64
				for c, x := range v[j][h*hd : (h+1)*hd] {
					s += float64(w[c]) * float64(x)
				}
				u[o*in+h*n+j] = float32(s)
			}
		}
	})
	if blk.keys, err = m.t.PrepareKeys(n, D, keys, bias); err != nil {
		return err
	}
	m.weights = append(m.weights, blk.keys)
	if blk.co, err = m.t.PrepareLinear(D, in, u, bo); err != nil {
		return fmt.Errorf("dit: %sto_out.0: %w", a, err)
	}
	m.weights = append(m.weights, blk.co)
	return nil
}

// geluTanh is GELU with the tanh approximation, in float64.
func geluTanh(v float32) float32 {
	x := float64(v)
	return float32(0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))))
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

// windows returns the window set of an h x w token grid, shifted or not.
func windows(h, w int, shifted bool) backend.Windows {
	shift := 0
	if shifted {
		shift = Window / 2
	}
	ys, xs := WindowStarts(h, shift), WindowStarts(w, shift)
	return backend.Windows{Size: Window, YStarts: ys, XStarts: xs,
		YOwner: WindowOwners(h, ys, shifted), XOwner: WindowOwners(w, xs, shifted)}
}

// scratch holds a computation's intermediate tensors and frees them.
type scratch []backend.Tensor

// add keeps t (when err is nil) for freeing later.
func (s *scratch) add(t backend.Tensor, err error) (backend.Tensor, error) {
	if err == nil {
		*s = append(*s, t)
	}
	return t, err
}

// drop frees ts now (their memory is reused by what comes next).
func (s *scratch) drop(ts ...backend.Tensor) {
	for _, t := range ts {
		for i, u := range *s {
			if u == t {
				t.Free()
				*s = append((*s)[:i], (*s)[i+1:]...)
				break
			}
		}
	}
}

func (s *scratch) free() {
	for _, t := range *s {
		t.Free()
	}
	*s = nil
}

// Forward predicts v for one chunk of latents x ([f h w in], h and w
// even) whose first latent has global temporal index offset. The restored
// latent is x - v. x is not freed.
func (m *DiT) Forward(x backend.Tensor, offset int) (backend.Tensor, error) {
	return m.ForwardShard(x, offset, nil)
}

// ForwardShard is Forward on one rank of a sequence-parallel group (see
// Shard; nil: alone). Every rank of the group calls it with the same x and
// gets the whole of v. A sharded pass exchanges tensors with the other
// ranks between its ops, so it runs op by op (no recording).
func (m *DiT) ForwardShard(x backend.Tensor, offset int, sh *Shard) (backend.Tensor, error) {
	s := x.Shape()
	if s.H%2 != 0 || s.W%2 != 0 || s.C != m.d.InChannels || s.N < 1 {
		return nil, fmt.Errorf("dit: latents %v: want [frames h w %d] with even h and w", s, m.d.InChannels)
	}
	if sh != nil {
		if m.d.Heads%sh.Size() != 0 {
			return nil, fmt.Errorf("dit: %d heads do not split over %d sequence-parallel ranks (use a divisor of %d)", m.d.Heads, sh.Size(), m.d.Heads)
		}
		m.passes++
		return m.forward(x, offset, sh)
	}
	m.passes++
	k := graphKey{s, m.FFNRows}
	if g := m.graphs[k]; g != nil && m.Graphs {
		v, err := m.replay(g, x, offset)
		if err == nil {
			m.replays++
			return v, nil
		}
		// Out of memory for the graph's own memory, say: run this shape
		// op by op from now on.
		g.free()
		m.graphs[k] = nil
	}
	v, err := m.forward(x, offset, nil)
	if _, seen := m.graphs[k]; err == nil && m.Graphs && !seen {
		m.record(k)
	}
	return v, err
}

// graphKey is what a recorded forward pass depends on: the input shape and
// the FFN's row pieces.
type graphKey struct {
	s       backend.Shape
	ffnRows int
}

// ditGraph is the forward pass recorded for one input shape: it reads the
// latents from in and writes v into out.
type ditGraph struct {
	in, out backend.Tensor
	rec     backend.Recording
}

// maxGraphs bounds the recordings kept (the oldest goes first): a service
// sees a few output sizes, each of two or three chunk shapes. Graphs
// replayed on one stream share memory, so the graphs of a size cost less
// than their activations op by op (docs/BENCHMARKS.md, "Notes moved from
// code comments").
const maxGraphs = 8

// record records the forward pass for k, after a first run has compiled
// its kernels and chosen its GEMM plans. Where that fails (a backend that
// cannot record, a driver without graphs), the shape runs op by op.
func (m *DiT) record(k graphKey) {
	if m.graphs == nil {
		m.graphs = map[graphKey]*ditGraph{}
	}
	if len(m.order) >= maxGraphs {
		if g := m.graphs[m.order[0]]; g != nil {
			g.free()
		}
		delete(m.graphs, m.order[0])
		m.order = m.order[1:]
	}
	m.graphs[k] = nil
	m.order = append(m.order, k)
	r, ok := m.b.(backend.Recorder)
	if !ok {
		return
	}
	g := &ditGraph{}
	var err error
	out := k.s
	out.C = m.d.OutChannels
	if g.in, err = m.b.Empty(k.s); err == nil {
		g.out, err = m.b.Empty(out)
	}
	if err == nil {
		g.rec, err = r.Record(func() error {
			v, err := m.forward(g.in, 0, nil)
			if err != nil {
				return err
			}
			defer v.Free()
			return m.b.CopyFrames(g.out, 0, v)
		})
	}
	if err != nil {
		g.free()
		return
	}
	m.graphs[k] = g
}

// replay runs the recorded forward pass g on x.
func (m *DiT) replay(g *ditGraph, x backend.Tensor, offset int) (backend.Tensor, error) {
	if err := m.b.CopyFrames(g.in, 0, x); err != nil {
		return nil, err
	}
	if err := g.rec.Replay(offset); err != nil {
		return nil, err
	}
	return m.t.Reshape(g.out, g.out.Shape()) // a copy: the next replay overwrites out
}

func (g *ditGraph) free() {
	for _, t := range []backend.Tensor{g.in, g.out} {
		if t != nil {
			t.Free()
		}
	}
	if g.rec != nil {
		g.rec.Free()
	}
}

// dropGraphs frees every recording.
func (m *DiT) dropGraphs() {
	for _, g := range m.graphs {
		if g != nil {
			g.free()
		}
	}
	m.graphs, m.order = nil, nil
}

// forward runs the forward pass op by op, on one rank of sh (nil: alone).
func (m *DiT) forward(x backend.Tensor, offset int, sh *Shard) (backend.Tensor, error) {
	s := x.Shape()
	var sc scratch
	defer sc.free()
	g := backend.Grid{F: s.N, H: s.H / 2, W: s.W / 2}
	n := g.Tokens()
	rope := &backend.RoPE{Grid: g, Offset: offset, HeadDim: m.d.HeadDim}
	win := [2]backend.Windows{windows(g.H, g.W, false), windows(g.H, g.W, true)}
	// Patch embedding: (c, a, b) patches are PixelUnshuffle's channel order.
	pu, err := sc.add(m.b.PixelUnshuffle(x, 2))
	if err != nil {
		return nil, err
	}
	pm, err := sc.add(m.t.Reshape(pu, backend.Matrix(n, m.d.InChannels*4)))
	if err != nil {
		return nil, err
	}
	if sh != nil { // this rank's slice of the tokens, zero-padded
		per := sh.slice(n)
		rope.First = sh.Me * per
		if pm, err = sc.add(m.b.CropPad(pm, 1, sh.Size()*per)); err != nil {
			return nil, err
		}
		if pm, err = sc.add(m.t.Rows(pm, rope.First, per)); err != nil {
			return nil, err
		}
	}
	hid, err := sc.add(m.t.Linear(pm, m.patch, backend.ActNone, nil))
	if err != nil {
		return nil, err
	}
	sc.drop(pu, pm)
	for i := range m.blocks {
		if err := m.block(&m.blocks[i], hid, rope, win[i%2], sh); err != nil {
			return nil, fmt.Errorf("dit block %d: %w", i, err)
		}
	}
	norm, err := sc.add(m.t.LayerNorm(hid, m.eps))
	if err != nil {
		return nil, err
	}
	y, err := sc.add(m.t.Linear(norm, m.head, backend.ActNone, nil))
	if err != nil {
		return nil, err
	}
	if sh != nil {
		if y, err = sc.add(m.gather(sh, y, n)); err != nil {
			return nil, err
		}
	}
	// Unpatchify: proj_out's (a, b, c) order is a depth-to-space shuffle.
	ys, err := sc.add(m.t.Reshape(y, backend.Shape{N: g.F, H: g.H, W: g.W, C: 4 * m.d.OutChannels}))
	if err != nil {
		return nil, err
	}
	return m.b.PixelShuffle(ys, 2, backend.ShuffleDCR)
}

// block runs one transformer block on hid (tokens x dim, or the slice of
// them of a rank of sh) in place.
func (m *DiT) block(blk *ditBlock, hid backend.Tensor, rope *backend.RoPE, win backend.Windows, sh *Shard) error {
	var sc scratch
	defer sc.free()
	hd, none := m.d.HeadDim, backend.ActNone
	// Self-attention in shifted windows, gated residual (gate in o).
	norm, err := sc.add(m.norm(hid))
	if err != nil {
		return err
	}
	var qkv [3]backend.Tensor
	for i, w := range []backend.Weights{blk.q, blk.k, blk.v} {
		if qkv[i], err = sc.add(m.t.Linear(norm, w, none, nil)); err != nil {
			return err
		}
	}
	sc.drop(norm)
	if err := m.t.RMSNormRoPE(qkv[0], blk.normQ, m.eps, rope); err != nil {
		return err
	}
	if err := m.t.RMSNormRoPE(qkv[1], blk.normK, m.eps, rope); err != nil {
		return err
	}
	att, err := sc.add(m.selfAttention(qkv, rope.Grid, win, sh))
	if err != nil {
		return err
	}
	sc.drop(qkv[:]...)
	if _, err := m.t.Linear(att, blk.o, none, hid); err != nil {
		return err
	}
	sc.drop(att)
	// Cross-attention to the prompt, residual.
	if norm, err = sc.add(m.norm(hid)); err != nil {
		return err
	}
	q, err := sc.add(m.t.Linear(norm, blk.cq, none, nil))
	if err != nil {
		return err
	}
	sc.drop(norm)
	if blk.keys != nil { // merged prompt: weights, then values and projection in co
		att, err = sc.add(m.t.AttentionWeights(q, blk.keys, hd, m.eps))
	} else if err = m.t.RMSNormRoPE(q, blk.cNormQ, m.eps, nil); err == nil {
		att, err = sc.add(m.t.Attention(q, blk.crossK, blk.crossV, hd))
	}
	if err != nil {
		return err
	}
	sc.drop(q)
	if _, err := m.t.Linear(att, blk.co, none, hid); err != nil {
		return err
	}
	sc.drop(att)
	// Feed-forward, gated residual (gate in ff2), in pieces of rows.
	if norm, err = sc.add(m.norm(hid)); err != nil {
		return err
	}
	rows := hid.Shape().W
	piece := rows
	if m.FFNRows > 0 && m.FFNRows < rows {
		k := (rows + m.FFNRows - 1) / m.FFNRows
		piece = min(rows, ((rows+k-1)/k+63)/64*64) // k even pieces, GEMM-friendly
	}
	for start := 0; start < rows; start += piece {
		if err := m.ffn(blk, norm, hid, start, min(piece, rows-start)); err != nil {
			return err
		}
	}
	return nil
}

// norm is the LayerNorm before a block's linear layers: quantised to fp8
// by the same kernel when they run in fp8.
func (m *DiT) norm(hid backend.Tensor) (backend.Tensor, error) {
	if m.t8 != nil {
		return m.t8.LayerNormFP8(hid, m.eps)
	}
	return m.t.LayerNorm(hid, m.eps)
}

// selfAttention is the window attention of q, k and v; on a rank of sh,
// between the all-to-alls that give it every token of its heads and give
// the result back to the tokens' ranks.
func (m *DiT) selfAttention(qkv [3]backend.Tensor, g backend.Grid, win backend.Windows, sh *Shard) (backend.Tensor, error) {
	hd := m.d.HeadDim
	if sh == nil {
		return m.t.WindowAttention(qkv[0], qkv[1], qkv[2], hd, g, win)
	}
	var sc scratch
	defer sc.free()
	var heads [3]backend.Tensor
	for i, x := range qkv {
		var err error
		if heads[i], err = sc.add(m.toHeads(sh, x, g.Tokens())); err != nil {
			return nil, err
		}
	}
	att, err := sc.add(m.t.WindowAttention(heads[0], heads[1], heads[2], hd, g, win))
	if err != nil {
		return nil, err
	}
	sc.drop(heads[:]...)
	return m.toTokens(sh, att, qkv[0].Shape().W)
}

// ffn adds the feed-forward output of rows [start, start+n) of norm to
// the same rows of hid.
func (m *DiT) ffn(blk *ditBlock, norm, hid backend.Tensor, start, n int) error {
	var sc scratch
	defer sc.free()
	if n < norm.Shape().W {
		var err error
		if norm, err = sc.add(m.t.Rows(norm, start, n)); err != nil {
			return err
		}
		if hid, err = sc.add(m.t.Rows(hid, start, n)); err != nil {
			return err
		}
	}
	ff, err := sc.add(m.t.Linear(norm, blk.ff1, backend.ActGELUTanh, nil))
	if err != nil {
		return err
	}
	_, err = m.t.Linear(ff, blk.ff2, backend.ActNone, hid)
	return err
}
