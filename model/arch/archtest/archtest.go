// Package archtest builds synthetic state dicts in the layouts of the
// published PyTorch modules that package arch recognises (their key names
// and shapes), with deterministic random float32 weights, for tests.
package archtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// Builder adds tensors to a state dict.
type Builder struct {
	D   *statedict.Dict
	rng *rand.Rand
}

// New starts a state dict whose weights come from seed.
func New(seed uint64) *Builder {
	return &Builder{D: &statedict.Dict{Tensors: map[string]*statedict.Tensor{}, Metadata: map[string]string{}}, rng: rand.New(rand.NewPCG(seed, 1))}
}

// Tensor adds key with shape and random values of about unit variance
// over fan, the product of the shape's dimensions after the first.
func (b *Builder) Tensor(key string, shape ...int) *Builder {
	n, fan := 1, 1
	for i, s := range shape {
		n *= s
		if i > 0 {
			fan *= s
		}
	}
	data := make([]byte, 4*n)
	amp := 1 / math.Sqrt(float64(fan))
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32((b.rng.Float64()*2-1)*amp)))
	}
	if err := b.D.Add(key, &statedict.Tensor{Shape: shape, DType: statedict.F32, Data: data}); err != nil {
		panic(err)
	}
	return b
}

// Conv adds KEY.weight [out in k k] and KEY.bias [out].
func (b *Builder) Conv(key string, out, in, k int) *Builder {
	return b.Tensor(key+".weight", out, in, k, k).Tensor(key+".bias", out)
}

// RRDB is an RRDBNet's hyperparameters.
type RRDB struct {
	Features, Growth, Blocks int
	In, Out                  int // the first convolution's input channels (after any pixel unshuffle) and the output's
	Ups                      int // upsampling convolutions (x2 each)
}

// ESRGAN adds an RRDBNet with BasicSR's (Real-ESRGAN's) key names:
// conv_first, body.N.rdbK.convJ, conv_body, conv_upN, conv_hr, conv_last.
func (b *Builder) ESRGAN(r RRDB) *Builder {
	return b.rrdb(r, "conv_first", func(n, k, c int) string { return fmt.Sprintf("body.%d.rdb%d.conv%d", n, k, c) },
		"conv_body", func(i int) string { return fmt.Sprintf("conv_up%d", i+1) }, "conv_hr", "conv_last")
}

// ESRGANOld adds an RRDBNet with the original ESRGAN key names: model.0,
// model.1.sub.N.RDBK.convJ.0, model.1.sub.NB, model.3, model.6, ...,
// then the HR and last convolutions.
func (b *Builder) ESRGANOld(r RRDB) *Builder {
	return b.rrdb(r, "model.0", func(n, k, c int) string { return fmt.Sprintf("model.1.sub.%d.RDB%d.conv%d.0", n, k, c) },
		fmt.Sprintf("model.1.sub.%d", r.Blocks), func(i int) string { return fmt.Sprintf("model.%d", 3*(i+1)) },
		fmt.Sprintf("model.%d", 3*r.Ups+2), fmt.Sprintf("model.%d", 3*r.Ups+4))
}

// ESRGANBSRGAN adds an RRDBNet with BSRGAN's key names: conv_first,
// RRDB_trunk.N.RDBK.convJ, trunk_conv, upconvN, HRconv, conv_last.
func (b *Builder) ESRGANBSRGAN(r RRDB) *Builder {
	return b.rrdb(r, "conv_first", func(n, k, c int) string { return fmt.Sprintf("RRDB_trunk.%d.RDB%d.conv%d", n, k, c) },
		"trunk_conv", func(i int) string { return fmt.Sprintf("upconv%d", i+1) }, "HRconv", "conv_last")
}

func (b *Builder) rrdb(r RRDB, first string, conv func(n, k, c int) string, body string, up func(int) string, hr, last string) *Builder {
	nf, gc := r.Features, r.Growth
	b.Conv(first, nf, r.In, 3)
	for n := 0; n < r.Blocks; n++ {
		for k := 1; k <= 3; k++ {
			for c := 1; c <= 5; c++ {
				out := gc
				if c == 5 {
					out = nf
				}
				b.Conv(conv(n, k, c), out, nf+(c-1)*gc, 3)
			}
		}
	}
	b.Conv(body, nf, nf, 3)
	for i := 0; i < r.Ups; i++ {
		b.Conv(up(i), nf, nf, 3)
	}
	return b.Conv(hr, nf, nf, 3).Conv(last, r.Out, nf, 3)
}

// Compact adds an SRVGGNetCompact (body.0 the first convolution, body.1
// its activation, ..., body.L the last convolution) of nf features, conv
// body convolutions, in channels, scale, with PReLU weights when prelu.
func (b *Builder) Compact(nf, conv, in, scale int, prelu bool) *Builder {
	i := 0
	layer := func(out, cin int, act bool) {
		b.Conv(fmt.Sprintf("body.%d", i), out, cin, 3)
		i++
		if act {
			if prelu {
				b.Tensor(fmt.Sprintf("body.%d.weight", i), nf)
			}
			i++
		}
	}
	layer(nf, in, true)
	for range conv {
		layer(nf, nf, true)
	}
	layer(in*scale*scale, nf, false)
	return b
}

// SPAN adds SPAN's keys: six blocks of three Conv3XC (their training
// branches and eval_conv), conv_cat, upsampler.
func (b *Builder) SPAN(nf, in, scale int) *Builder {
	c3 := func(key string, out, cin int) {
		b.Conv(key+".sk", out, cin, 1).Conv(key+".conv.0", 2*cin, cin, 1).Conv(key+".conv.1", 2*out, 2*cin, 3).Conv(key+".conv.2", out, 2*out, 1).Conv(key+".eval_conv", out, cin, 3)
	}
	c3("conv_1", nf, in)
	for n := 1; n <= 6; n++ {
		for _, c := range []string{"c1_r", "c2_r", "c3_r"} {
			c3(fmt.Sprintf("block_%d.%s", n, c), nf, nf)
		}
	}
	b.Conv("conv_cat", nf, 4*nf, 1)
	c3("conv_2", nf, nf)
	return b.Conv("upsampler.0", in*scale*scale, nf, 3)
}

// RealCUGAN adds an UpCunet of scale 2, 3 or 4 (fast: UpCunet2x_fast):
// the two U-Nets' keys that detection reads, with their shapes.
func (b *Builder) RealCUGAN(scale int, fast, pro bool) *Builder {
	in := 3
	if fast {
		in = 12
	}
	unet := func(p string, cin, out int, deconv int) {
		b.Conv(p+".conv1.conv.0", 32, cin, 3).Conv(p+".conv1.conv.2", 64, 32, 3).Conv(p+".conv1_down", 64, 64, 2)
		b.Conv(p+".conv2.conv.0", 128, 64, 3).Conv(p+".conv2.conv.2", 64, 128, 3)
		b.Conv(p+".conv2.seblock.conv1", 8, 64, 1).Conv(p+".conv2.seblock.conv2", 64, 8, 1)
		b.Conv(p+".conv2_up", 64, 64, 2)
		b.Conv(p+".conv_bottom", out, 64, deconv)
	}
	bottom := 4
	if scale == 3 {
		bottom = 5
	}
	unet("unet1", in, 64, bottom)
	unet("unet2", 64, 3, 3)
	b.Conv("unet2.conv3.conv.0", 128, 128, 3).Conv("unet2.conv3.seblock.conv1", 16, 128, 1).Conv("unet2.conv3_up", 128, 128, 2)
	b.Conv("unet2.conv4.conv.0", 64, 128, 3).Conv("unet2.conv4_up", 64, 64, 2).Conv("unet2.conv5", 64, 64, 3)
	if scale == 4 || fast {
		b.Conv("conv_final", 3, 64, 3)
	}
	if pro {
		b.Tensor("pro", 1)
	}
	return b
}

// PLKSR adds a RealPLKSR (real) or PLKSR of dim features, blocks blocks,
// a kernel x kernel large kernel on split channels, scale.
func (b *Builder) PLKSR(real bool, dim, blocks, kernel, split, scale int) *Builder {
	b.Conv("feats.0", dim, 3, 3)
	mixer := "channe_mixer"
	if real {
		mixer = "channel_mixer"
	}
	for n := 1; n <= blocks; n++ {
		p := fmt.Sprintf("feats.%d.", n)
		b.Conv(p+mixer+".0", 2*dim, dim, 3).Conv(p+mixer+".2", dim, 2*dim, 1)
		b.Conv(p+"lk.conv", split, split, kernel).Conv(p+"refine", dim, dim, 1)
		if real {
			b.Conv(p+"attn.f.0", dim, dim, 3).Tensor(p+"norm.weight", dim).Tensor(p+"norm.bias", dim)
		}
	}
	last := blocks + 1
	if real {
		last++ // a Dropout2d before the last convolution
	}
	return b.Conv(fmt.Sprintf("feats.%d", last), 3*scale*scale, dim, 3)
}

// Keys adds each key as a small tensor (for architectures recognised by
// their keys only).
func (b *Builder) Keys(keys ...string) *Builder {
	for _, k := range keys {
		b.Tensor(k, 4)
	}
	return b
}
