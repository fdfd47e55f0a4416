package swiftvr

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
)

// Source gives weights by checkpoint key as float32 with their shape
// (FileSource reads a safetensors File or Set). The values are the
// caller's: loaders fold scales into them in place.
type Source interface {
	Tensor(name string) (shape []int, data []float32, err error)
}

// ReAE is SwiftVR's causal video autoencoder (TAEHV topology) bound to a
// backend. Frames are tensors whose batch dimension is time. The encoder
// maps 4 frames of RGB in [0,1] at H x W to one latent of LatentC channels
// at H/16 x W/16; the decoder maps each latent back to 4 frames. All causal
// context lives in a State passed in and out per chunk.
type ReAE struct {
	b   backend.Backend
	enc []layer
	dec []layer
	// InC is the channel count after pixel unshuffle (12); LatentC the
	// latent channels (48).
	InC, LatentC int
	// Widths are the encoder width and the decoder stage widths, as read
	// from the checkpoint.
	EncWidth  int
	DecWidths []int
	// TGrowBefore runs each TGrow before the nearest upsample that
	// precedes it in the official order (LightX2V's reorder): the same
	// result on a quarter of the pixels.
	TGrowBefore bool
	// FrameBatch runs runs of per-frame layers a few frames at a time (0 =
	// the whole chunk at once).
	FrameBatch int

	halo *halo // nil: whole frames; else one height band of them (bands.go)
}

type layerKind int

const (
	lConv layerKind = iota
	lReLU
	lTPool   // fold frames into channels, then a 1x1 conv
	lMem     // MemBlock: causal residual block on [x_t, x_{t-1}]
	lUp      // nearest upsample x2
	lTGrow   // 1x1 conv to s*C channels, then unfold into s frames
	lClamp   // tanh(x/3)*3
	lShuffle // not a checkpoint layer: pixel (un)shuffle at the ends
)

// layer is one entry of encoder.<i> / decoder.<i>.
type layer struct {
	kind   layerKind
	key    string
	conv   conv
	mem    [3]conv // MemBlock's conv.0, conv.2, conv.4
	stride int     // TPool / TGrow frame factor
	state  int     // MemBlock: index into State
}

type conv struct {
	w     backend.Weights
	p     backend.ConvParams
	out   int
	inC   int
	relu  bool
	kSize int
}

// State is the causal context between chunks: for each MemBlock, the last
// frame of its input in the previous chunk (nil at the start of a video,
// meaning zeros). It is exactly what the multi-GPU scheme hands from one
// chunk to the next.
type State struct {
	Enc, Dec []backend.Tensor
}

// Free releases the state's tensors.
func (s *State) Free() {
	for _, l := range [][]backend.Tensor{s.Enc, s.Dec} {
		for i, t := range l {
			if t != nil {
				t.Free()
				l[i] = nil
			}
		}
	}
}

// NewState returns an empty state (the start of a video) for r.
func (r *ReAE) NewState() *State {
	count := func(ls []layer) int {
		n := 0
		for _, l := range ls {
			if l.kind == lMem {
				n++
			}
		}
		return n
	}
	return &State{Enc: make([]backend.Tensor, count(r.enc)), Dec: make([]backend.Tensor, count(r.dec))}
}

// reaeLoader reads checkpoint tensors and prepares them on the backend.
type reaeLoader struct {
	b   backend.Backend
	src Source
	err error
}

func (l *reaeLoader) tensor(name string, dims int) ([]int, []float32) {
	if l.err != nil {
		return nil, nil
	}
	shape, data, err := l.src.Tensor(name)
	if err != nil {
		l.err = err
		return nil, nil
	}
	if len(shape) != dims {
		l.err = fmt.Errorf("reae: %s has shape %v, want %d dimensions", name, shape, dims)
		return nil, nil
	}
	return shape, data
}

// conv loads a k x k convolution (stride s, padding k/2) with an optional
// bias.
func (l *reaeLoader) conv(key string, stride int, bias bool, inC int) conv {
	shape, w := l.tensor(key+".weight", 4)
	if l.err != nil {
		return conv{}
	}
	out, in, kh, kw := shape[0], shape[1], shape[2], shape[3]
	if kh != kw || kh%2 == 0 || (inC > 0 && in != inC) {
		l.err = fmt.Errorf("reae: %s.weight has shape %v; want [out %d k k] with odd k", key, shape, inC)
		return conv{}
	}
	var b []float32
	if bias {
		var bs []int
		if bs, b = l.tensor(key+".bias", 1); l.err == nil && bs[0] != out {
			l.err = fmt.Errorf("reae: %s.bias has shape %v, want [%d]", key, bs, out)
		}
	}
	if l.err != nil {
		return conv{}
	}
	pad := kh / 2
	c := conv{out: out, inC: in, kSize: kh, p: backend.ConvParams{KH: kh, KW: kw, StrideH: stride, StrideW: stride, DilH: 1, DilW: 1, PadT: pad, PadL: pad, PadB: pad, PadR: pad}}
	c.w, l.err = l.b.PrepareConv(out, in, kh, kw, w, b)
	return c
}

// NewReAE builds the autoencoder from reae.safetensors keys. Channel
// widths come from the weights, so reduced test models load through the
// same code.
func NewReAE(b backend.Backend, src Source) (*ReAE, error) {
	l := &reaeLoader{b: b, src: src}
	r := &ReAE{b: b, TGrowBefore: true, FrameBatch: 1}
	// Encoder: conv, ReLU, then three stages of TPool, stride-2 conv and
	// three MemBlocks, then a conv to the latent channels.
	first := l.conv("encoder.0", 1, true, 0)
	r.InC, r.EncWidth = first.inC, first.out
	r.enc = append(r.enc, layer{kind: lConv, key: "encoder.0", conv: first}, layer{kind: lReLU})
	mem := 0
	for stage, base := range []int{2, 7, 12} {
		r.enc = append(r.enc, l.tpool(fmt.Sprintf("encoder.%d", base), r.EncWidth))
		r.enc = append(r.enc, layer{kind: lConv, key: fmt.Sprintf("encoder.%d", base+1), conv: l.conv(fmt.Sprintf("encoder.%d", base+1), 2, false, r.EncWidth)})
		for i := 0; i < 3; i++ {
			r.enc = append(r.enc, l.memBlock(fmt.Sprintf("encoder.%d", base+2+i), r.EncWidth, mem))
			mem++
		}
		_ = stage
	}
	last := l.conv("encoder.17", 1, true, r.EncWidth)
	r.LatentC = last.out
	r.enc = append(r.enc, layer{kind: lConv, key: "encoder.17", conv: last})

	// Decoder: clamp, conv, ReLU, then three stages of MemBlocks, nearest
	// upsample, TGrow and a conv, then ReLU and a conv to 12 channels.
	c1 := l.conv("decoder.1", 1, true, r.LatentC)
	w := c1.out
	r.DecWidths = []int{w}
	r.dec = append(r.dec, layer{kind: lClamp}, layer{kind: lConv, key: "decoder.1", conv: c1}, layer{kind: lReLU})
	mem = 0
	for _, base := range []int{3, 9, 15} {
		for i := 0; i < 3; i++ {
			r.dec = append(r.dec, l.memBlock(fmt.Sprintf("decoder.%d", base+i), w, mem))
			mem++
		}
		r.dec = append(r.dec, layer{kind: lUp})
		r.dec = append(r.dec, l.tgrow(fmt.Sprintf("decoder.%d", base+4), w))
		c := l.conv(fmt.Sprintf("decoder.%d", base+5), 1, false, w)
		r.dec = append(r.dec, layer{kind: lConv, key: fmt.Sprintf("decoder.%d", base+5), conv: c})
		w = c.out
		r.DecWidths = append(r.DecWidths, w)
	}
	out := l.conv("decoder.22", 1, true, w)
	r.dec = append(r.dec, layer{kind: lReLU}, layer{kind: lConv, key: "decoder.22", conv: out})
	if l.err == nil && (out.out != r.InC || r.InC%4 != 0) {
		l.err = fmt.Errorf("reae: decoder.22 has %d outputs and encoder.0 %d inputs; both must be 3*2*2 = 12", out.out, r.InC)
	}
	if l.err != nil {
		r.Close()
		return nil, l.err
	}
	return r, nil
}

func (l *reaeLoader) tpool(key string, c int) layer {
	shape, w := l.tensor(key+".conv.weight", 4)
	if l.err != nil {
		return layer{}
	}
	if shape[0] != c || shape[1]%c != 0 || shape[2] != 1 || shape[3] != 1 {
		l.err = fmt.Errorf("reae: %s.conv.weight has shape %v, want [%d s*%d 1 1]", key, shape, c, c)
		return layer{}
	}
	cv := conv{out: c, inC: shape[1], kSize: 1, p: backend.ConvParams{KH: 1, KW: 1, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1}}
	cv.w, l.err = l.b.PrepareConv(c, shape[1], 1, 1, w, nil)
	return layer{kind: lTPool, key: key, conv: cv, stride: shape[1] / c}
}

func (l *reaeLoader) memBlock(key string, c, idx int) layer {
	ly := layer{kind: lMem, key: key, state: idx}
	ly.mem[0] = l.conv(key+".conv.0", 1, true, 2*c)
	ly.mem[1] = l.conv(key+".conv.2", 1, true, c)
	ly.mem[2] = l.conv(key+".conv.4", 1, true, c)
	if l.err == nil && (ly.mem[0].out != c || ly.mem[1].out != c || ly.mem[2].out != c) {
		l.err = fmt.Errorf("reae: %s keeps %d channels but its convs have %d/%d/%d outputs", key, c, ly.mem[0].out, ly.mem[1].out, ly.mem[2].out)
	}
	return ly
}

// tgrow loads TGrow(c, 1) (.proj.weight [c c 1 1]) or TGrow(c, 2)
// (.conv3d.weight [c c 3 1 1]). The official TGrow(c, 2) repeats each frame
// twice and runs a (3,1,1) convolution with zero padding over those two
// copies only, so copy 0 gets (W1+W2)x and copy 1 gets (W0+W1)x: one 1x1
// conv to 2c channels, then unfold into 2 frames.
func (l *reaeLoader) tgrow(key string, c int) layer {
	if l.err != nil {
		return layer{}
	}
	if shape, w, err := l.src.Tensor(key + ".proj.weight"); err == nil {
		if len(shape) != 4 || shape[0] != c || shape[1] != c || shape[2] != 1 || shape[3] != 1 {
			l.err = fmt.Errorf("reae: %s.proj.weight has shape %v, want [%d %d 1 1]", key, shape, c, c)
			return layer{}
		}
		cv := conv{out: c, inC: c, kSize: 1, p: backend.ConvParams{KH: 1, KW: 1, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1}}
		cv.w, l.err = l.b.PrepareConv(c, c, 1, 1, w, nil)
		return layer{kind: lTGrow, key: key, conv: cv, stride: 1}
	}
	shape, w := l.tensor(key+".conv3d.weight", 5)
	if l.err != nil {
		l.err = fmt.Errorf("reae: %s: neither .proj.weight nor .conv3d.weight: %w", key, l.err)
		return layer{}
	}
	if shape[0] != c || shape[1] != c || shape[2] != 3 || shape[3] != 1 || shape[4] != 1 {
		l.err = fmt.Errorf("reae: %s.conv3d.weight has shape %v, want [%d %d 3 1 1]", key, shape, c, c)
		return layer{}
	}
	// w[o][i][k]; rows 0..c-1: W1+W2 (first copy), rows c..2c-1: W0+W1.
	comb := make([]float32, 2*c*c)
	for o := 0; o < c; o++ {
		for i := 0; i < c; i++ {
			k := (o*c + i) * 3
			comb[o*c+i] = w[k+1] + w[k+2]
			comb[(c+o)*c+i] = w[k] + w[k+1]
		}
	}
	cv := conv{out: 2 * c, inC: c, kSize: 1, p: backend.ConvParams{KH: 1, KW: 1, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1}}
	cv.w, l.err = l.b.PrepareConv(2*c, c, 1, 1, comb, nil)
	return layer{kind: lTGrow, key: key, conv: cv, stride: 2}
}

// Close frees the weights.
func (r *ReAE) Close() {
	for _, ls := range [][]layer{r.enc, r.dec} {
		for _, l := range ls {
			if l.conv.w != nil {
				l.conv.w.Free()
			}
			for _, c := range l.mem {
				if c.w != nil {
					c.w.Free()
				}
			}
		}
	}
	r.enc, r.dec = nil, nil
}
