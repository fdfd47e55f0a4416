package arch_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/checkpoint/statedict"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
	"github.com/vsr-dev/vsr/model/cdavsr"
)

// TestDetect recognises each architecture and variant from synthetic
// state dicts in the published modules' layouts.
func TestDetect(t *testing.T) {
	x4plus := archtest.RRDB{Features: 16, Growth: 8, Blocks: 3, In: 3, Out: 3, Ups: 2}
	x2 := x4plus
	x2.In = 12
	x1 := x4plus
	x1.In = 48
	x8 := x4plus
	x8.Ups = 3
	gray := x4plus
	gray.In, gray.Out, gray.Ups = 1, 1, 0
	cases := []struct {
		name string
		d    *statedict.Dict
		want arch.Info
	}{
		{"ESRGAN x4 new keys", archtest.New(1).ESRGAN(x4plus).D,
			arch.Info{Arch: "ESRGAN", Variant: "Real-ESRGAN keys", Scale: 4, In: 3, Out: 3, Features: 16, Blocks: 3, Growth: 8, Unshuffle: 1}},
		{"ESRGAN x2 unshuffle", archtest.New(1).ESRGAN(x2).D,
			arch.Info{Arch: "ESRGAN", Variant: "Real-ESRGAN keys", Scale: 2, In: 3, Out: 3, Features: 16, Blocks: 3, Growth: 8, Unshuffle: 2}},
		{"ESRGAN x1 unshuffle", archtest.New(1).ESRGAN(x1).D,
			arch.Info{Arch: "ESRGAN", Variant: "Real-ESRGAN keys", Scale: 1, In: 3, Out: 3, Features: 16, Blocks: 3, Growth: 8, Unshuffle: 4}},
		{"ESRGAN x8 old keys", archtest.New(1).ESRGANOld(x8).D,
			arch.Info{Arch: "ESRGAN", Variant: "old ESRGAN keys", Scale: 8, In: 3, Out: 3, Features: 16, Blocks: 3, Growth: 8, Unshuffle: 1}},
		{"ESRGAN x4 old keys", archtest.New(1).ESRGANOld(x4plus).D,
			arch.Info{Arch: "ESRGAN", Variant: "old ESRGAN keys", Scale: 4, In: 3, Out: 3, Features: 16, Blocks: 3, Growth: 8, Unshuffle: 1}},
		{"ESRGAN x1 grey old keys", archtest.New(1).ESRGANOld(gray).D,
			arch.Info{Arch: "ESRGAN", Variant: "old ESRGAN keys", Scale: 1, In: 1, Out: 1, Features: 16, Blocks: 3, Growth: 8, Unshuffle: 1}},
		{"ESRGAN BSRGAN keys", archtest.New(1).ESRGANBSRGAN(x4plus).D,
			arch.Info{Arch: "ESRGAN", Variant: "BSRGAN keys", Scale: 4, In: 3, Out: 3, Features: 16, Blocks: 3, Growth: 8, Unshuffle: 1}},
		{"Compact PReLU", archtest.New(1).Compact(16, 4, 3, 4, true).D,
			arch.Info{Arch: "SRVGGNetCompact", Scale: 4, In: 3, Out: 3, Features: 16, Blocks: 4, Activation: "prelu"}},
		{"Compact ReLU x2", archtest.New(1).Compact(8, 2, 3, 2, false).D,
			arch.Info{Arch: "SRVGGNetCompact", Scale: 2, In: 3, Out: 3, Features: 8, Blocks: 2, Activation: "relu"}},
		{"Compact x1 one channel", archtest.New(1).Compact(8, 1, 1, 1, true).D,
			arch.Info{Arch: "SRVGGNetCompact", Scale: 1, In: 1, Out: 1, Features: 8, Blocks: 1, Activation: "prelu"}},
		{"SPAN", archtest.New(1).SPAN(8, 3, 4).D,
			arch.Info{Arch: "SPAN", Support: arch.Runs, Scale: 4, In: 3, Out: 3, Features: 8, Blocks: 6}},
		{"Real-CUGAN 2x", archtest.New(1).RealCUGAN(2, false, false).D,
			arch.Info{Arch: "RealCUGAN", Support: arch.Runs, Scale: 2, In: 3, Out: 3, Features: 32}},
		{"Real-CUGAN 3x pro", archtest.New(1).RealCUGAN(3, false, true).D,
			arch.Info{Arch: "RealCUGAN", Variant: "pro", Support: arch.Runs, Scale: 3, In: 3, Out: 3, Features: 32}},
		{"Real-CUGAN 4x", archtest.New(1).RealCUGAN(4, false, false).D,
			arch.Info{Arch: "RealCUGAN", Support: arch.Runs, Scale: 4, In: 3, Out: 3, Features: 32}},
		{"Real-CUGAN 2x fast", archtest.New(1).RealCUGAN(2, true, false).D,
			arch.Info{Arch: "RealCUGAN", Variant: "fast", Support: arch.NotRun, Scale: 2, In: 3, Out: 3, Features: 32}},
		{"RealPLKSR", archtest.New(1).PLKSR(true, 16, 4, 9, 4, 2).D,
			arch.Info{Arch: "RealPLKSR", Support: arch.Runs, Scale: 2, In: 3, Out: 3, Features: 16, Blocks: 4}},
		{"PLKSR", archtest.New(1).PLKSR(false, 16, 3, 9, 4, 4).D,
			arch.Info{Arch: "PLKSR", Support: arch.NeedsOps, Scale: 4, In: 3, Out: 3, Features: 16, Blocks: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := arch.Detect(c.d)
			if err != nil {
				t.Fatal(err)
			}
			w := c.want
			if got.Arch != w.Arch || got.Variant != w.Variant || got.Support != w.Support || got.Scale != w.Scale ||
				got.In != w.In || got.Out != w.Out || got.Features != w.Features || got.Blocks != w.Blocks ||
				got.Growth != w.Growth || got.Unshuffle != w.Unshuffle || got.Activation != w.Activation {
				t.Errorf("got  %+v\nwant %+v", *got, w)
			}
			if len(got.Evidence) == 0 || got.Params == 0 {
				t.Errorf("no evidence or parameters: %+v", *got)
			}
			if runs := got.Support == arch.Runs && got.In == 3 && got.Out == 3; runs != (got.Check() == nil) {
				t.Errorf("Support %v, Check %v", got.Support, got.Check())
			}
		})
	}
}

// TestDetectCompactLeaky reads a weightless activation's kind from the
// metadata Real-ESRGAN's option names.
func TestDetectCompactLeaky(t *testing.T) {
	b := archtest.New(1).Compact(8, 2, 3, 2, false)
	b.D.Metadata["act_type"] = "leakyrelu"
	if got, err := arch.Detect(b.D); err != nil || got.Activation != "leakyrelu" {
		t.Fatalf("%+v %v", got, err)
	}
}

// TestDetectCounts checks the parameter count and the MACs per output
// pixel of realesrgan-x4plus's shape: 16,697,987 parameters, as
// Real-ESRGAN's model has, and the MACs counted layer by layer below.
func TestDetectCounts(t *testing.T) {
	b := archtest.New(1).ESRGAN(archtest.RRDB{Features: 64, Growth: 32, Blocks: 23, In: 3, Out: 3, Ups: 2})
	got, err := arch.Detect(b.D)
	if err != nil {
		t.Fatal(err)
	}
	if got.Params != 16697987 {
		t.Errorf("%d parameters, want 16697987", got.Params)
	}
	// Per input pixel: conv_first 9*64*3, 69 dense blocks of
	// 9*(64*32+96*32+128*32+160*32+192*64), conv_body 9*64*64; at 4 and
	// 16 times the area conv_up1 and conv_up2, at 16 conv_hr and
	// conv_last (9*64*64, 9*3*64).
	in := 9*64*3 + 69*9*(64*32+96*32+128*32+160*32+192*64) + 9*64*64 + 4*9*64*64 + 16*(9*64*64+9*64*64+9*3*64)
	if want := float64(in) / 16; got.MACs != want {
		t.Errorf("%g MACs per output pixel, want %g", got.MACs, want)
	}
}

// TestDetectNamed names the architectures vsr recognises and does not
// run, with a clear error.
func TestDetectNamed(t *testing.T) {
	swinir := []string{"conv_first.weight", "layers.0.residual_group.blocks.0.norm1.weight", "layers.0.residual_group.blocks.0.mlp.fc1.bias", "layers.0.residual_group.blocks.0.attn.relative_position_index"}
	cases := map[string][]string{
		"SwinIR":  swinir,
		"HAT":     append([]string{"relative_position_index_SA", "layers.0.residual_group.blocks.0.conv_block.cab.0.weight", "layers.0.residual_group.overlap_attn.qkv.weight"}, swinir...),
		"Swin2SR": append([]string{"patch_embed.proj.weight"}, swinir...),
		"DAT":     {"conv_first.weight", "before_RG.1.weight", "layers.0.blocks.0.ffn.sg.conv.weight", "layers.0.blocks.0.attn.attns.0.rpe_biases"},
		"OmniSR":  {"residual_layer.0.residual_layer.0.layer.0.fn.0.weight", "input.weight", "up.0.weight"},
		"RCAN":    {"head.0.weight", "tail.1.weight", "body.0.body.0.body.0.weight", "body.0.body.0.body.3.conv_du.0.weight"},
	}
	for name, keys := range cases {
		got, err := arch.Detect(archtest.New(1).Keys(keys...).D)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Arch != name || got.Support != arch.NotRun {
			t.Errorf("%s: detected %s (%v)", name, got.Arch, got.Support)
		}
	}
	got, _ := arch.Detect(archtest.New(1).Keys(swinir...).D)
	if err := got.Check(); err == nil || err.Error() != "a SwinIR model (transformer): vsr does not run this architecture yet" {
		t.Errorf("SwinIR: %v", err)
	}
	plksr, _ := arch.Detect(archtest.New(1).PLKSR(false, 16, 4, 9, 4, 2).D)
	if err := plksr.Check(); err == nil || !strings.Contains(err.Error(), "a PLKSR model (convolutional): recognised; running it needs ops not yet in vsr") {
		t.Errorf("PLKSR: %v", err)
	}
}

// TestDetectUnknown refuses state dicts of no known architecture, a
// CDA-VSR checkpoint among them (its family takes it), and reports
// shapes that do not fit a recognised architecture.
func TestDetectUnknown(t *testing.T) {
	cda := &statedict.Dict{}
	for _, wt := range cdavsr.Synthesize(2, 1) {
		if err := cda.Add(wt.Name, &statedict.Tensor{Shape: wt.Shape, DType: statedict.DType(wt.DType), Data: wt.Data}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := arch.Detect(cda); !errors.Is(err, arch.ErrUnknown) {
		t.Errorf("CDA-VSR: %v, want ErrUnknown", err)
	}
	if _, err := arch.Detect(archtest.New(1).Keys("a.weight", "b.bias").D); !errors.Is(err, arch.ErrUnknown) || !strings.Contains(err.Error(), "a.weight, b.bias") {
		t.Errorf("unknown keys: %v", err)
	}
	// An ESRGAN whose second RDB convolution has the wrong input width.
	b := archtest.New(1).ESRGAN(archtest.RRDB{Features: 16, Growth: 8, Blocks: 1, In: 3, Out: 3, Ups: 2})
	b.D.Tensors["body.0.rdb1.conv2.weight"].Shape = []int{8, 17, 3, 3}
	if _, err := arch.Detect(b.D); err == nil || !strings.Contains(err.Error(), "body.0.rdb1.conv2.weight is [8 17 3 3], want [8 24 3 3]") {
		t.Errorf("bad shape: %v", err)
	}
	// SPANs vsr cannot build: a conv_cat of the wrong width, and four
	// input channels with the RGB mean normalisation.
	b = archtest.New(1).SPAN(8, 3, 4)
	b.D.Tensors["conv_cat.weight"].Shape = []int{8, 31, 1, 1}
	if _, err := arch.Detect(b.D); err == nil || !strings.Contains(err.Error(), "conv_cat.weight is [8 31 1 1], want [8 32 1 1]") {
		t.Errorf("SPAN conv_cat: %v", err)
	}
	if _, err := arch.Detect(archtest.New(1).SPAN(8, 4, 4).D); err == nil || !strings.Contains(err.Error(), "4 input channels with the RGB mean normalisation") {
		t.Errorf("SPAN of 4 channels: %v", err)
	}
}

// TestCDAVSRFileNotClaimed checks that Sniff leaves a CDA-VSR
// .safetensors file to its family.
func TestCDAVSRFileNotClaimed(t *testing.T) {
	path := t.TempDir() + "/cda.safetensors"
	if err := safetensors.Write(path, cdavsr.Synthesize(2, 1), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := arch.Sniff(path); ok {
		t.Error("Sniff claims a CDA-VSR checkpoint")
	}
}

// FuzzDetect checks that Detect and Build never panic, whatever the keys
// and shapes.
func FuzzDetect(f *testing.F) {
	f.Add("conv_first.weight\nbody.0.rdb1.conv1.weight\nconv_body.weight\nconv_last.weight", []byte{4, 3, 3, 3, 2, 4, 3, 3})
	f.Add("body.0.weight\nbody.1.weight\nbody.2.weight", []byte{8, 3, 3, 3, 8, 12, 8, 3})
	f.Add("model.0.weight\nmodel.1.sub.0.RDB1.conv1.0.weight\nmodel.3.weight\nmodel.10.weight", []byte{1, 2, 3})
	f.Add("feats.0.weight\nfeats.1.lk.conv.weight\nfeats.1.refine.weight\nfeats.1.channel_mixer.0.weight", []byte{0, 255, 7})
	f.Fuzz(func(t *testing.T, keys string, dims []byte) {
		d := &statedict.Dict{}
		for i, k := range strings.Split(keys, "\n") {
			var shape []int
			for j := 0; j < 4 && i*4+j < len(dims); j++ {
				shape = append(shape, int(dims[i*4+j]))
			}
			n := 1
			for _, s := range shape {
				n *= s
			}
			var data []byte // values only where small: Detect reads none
			if n <= 1<<12 {
				data = make([]byte, 4*n)
			}
			_ = d.Add(k, &statedict.Tensor{Shape: shape, DType: statedict.F32, Data: data})
		}
		info, err := arch.Detect(d)
		if err == nil {
			_, _ = arch.Build(info, d)
		}
	})
}
