package arch

import (
	"fmt"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// detectRealCUGAN recognises Real-CUGAN (UpCunet2x, 3x, 4x, 2x fast) by
// spandrel's keys: its two U-Nets.
func detectRealCUGAN(d *statedict.Dict) (*Info, bool, error) {
	if !has(d, "unet1.conv1.conv.0.weight", "unet1.conv1_down.weight", "unet1.conv2.seblock.conv1.weight",
		"unet1.conv_bottom.weight", "unet2.conv1.conv.0.weight", "unet2.conv_bottom.weight") {
		return nil, false, nil
	}
	info := &Info{Arch: "RealCUGAN", Kind: "convolutional U-Net", Support: Runs}
	info.why("unet1.conv1.conv.0.weight, unet1.conv2.seblock.conv1.weight and unet2.conv_bottom.weight: Real-CUGAN's two U-Nets with squeeze-excitation blocks")
	f, in, _, ok := conv(d, "unet1.conv1.conv.0.weight")
	if !ok {
		return nil, false, fmt.Errorf("a Real-CUGAN state dict whose unet1.conv1.conv.0.weight is %v, want a convolution", d.Shape("unet1.conv1.conv.0.weight"))
	}
	info.In, info.Out, info.Features = in, 3, f
	var variant []string
	if marked(d, "pro") {
		variant = append(variant, "pro")
		info.why("the key pro: a pro model")
	}
	bottom := shape(d, "unet1.conv_bottom.weight", 4)
	switch {
	case has(d, "conv_final.weight") && in == 12:
		info.Scale, info.In = 2, 3
		variant = append(variant, "fast")
		info.why("conv_final.weight with 12 input channels: UpCunet2x_fast (x2)")
		info.Support = NotRun // its pixel-unshuffled U-Nets are not written as a graph yet
	case has(d, "conv_final.weight"):
		info.Scale = 4
		info.why("conv_final.weight: UpCunet4x (x4)")
	case bottom != nil && bottom[2] == 5:
		info.Scale = 3
		info.why("unet1.conv_bottom.weight %v, a 5x5 kernel: UpCunet3x (x3)", bottom)
	default:
		info.Scale = 2
		info.why("no conv_final and a %v unet1.conv_bottom: UpCunet2x (x2)", bottom)
	}
	if info.Scale != 4 {
		if s := shape(d, "unet2.conv_bottom.weight", 4); s != nil && !has(d, "conv_final.weight") {
			info.Out = s[0]
		}
	}
	info.Variant = strings.Join(variant, ", ")
	return info, true, nil
}

// detectPLKSR recognises PLKSR and RealPLKSR by spandrel's keys: the
// large-kernel convolution of the first block, and its channel mixer
// (misspelt channe_mixer in PLKSR, which is how the two are told apart).
func detectPLKSR(d *statedict.Dict) (*Info, bool, error) {
	if !has(d, "feats.0.weight", "feats.1.lk.conv.weight", "feats.1.refine.weight") {
		return nil, false, nil
	}
	info := &Info{Kind: "convolutional", Support: NeedsOps}
	var tail int
	switch {
	case has(d, "feats.1.channel_mixer.0.weight"):
		info.Arch, tail, info.Support = "RealPLKSR", 3, Runs
		info.why("feats.0.weight, feats.1.lk.conv.weight and feats.1.channel_mixer.0.weight: RealPLKSR's partial large-kernel blocks")
	case has(d, "feats.1.channe_mixer.0.weight"):
		info.Arch, tail = "PLKSR", 2
		info.Missing = "GELU, sigmoid gates and a channel repeat"
		info.why("feats.0.weight, feats.1.lk.conv.weight and feats.1.channe_mixer.0.weight (sic): PLKSR's partial large-kernel blocks")
	default:
		return nil, false, nil
	}
	dim, in, _, ok := conv(d, "feats.0.weight")
	lk := shape(d, "feats.1.lk.conv.weight", 4)
	n := seqLen(d, "feats")
	if !ok || lk == nil || n < tail+1 {
		return nil, false, fmt.Errorf("a %s state dict whose feats.0.weight is %v and feats.1.lk.conv.weight %v, want convolutions", info.Arch, d.Shape("feats.0.weight"), d.Shape("feats.1.lk.conv.weight"))
	}
	lastKey := fmt.Sprintf("feats.%d.weight", n-1)
	lo, _, _, ok := conv(d, lastKey)
	if !ok {
		return nil, false, fmt.Errorf("a %s state dict whose last layer %s is %v, want a convolution", info.Arch, lastKey, d.Shape(lastKey))
	}
	s, out, ok := scaleAndOut(lo, in)
	if !ok {
		return nil, false, fmt.Errorf("a %s state dict whose %s has %d outputs: no scale and channel count make it", info.Arch, lastKey, lo)
	}
	info.Scale, info.In, info.Out, info.Features, info.Blocks = s, in, out, dim, n-tail
	info.why("%d features from feats.0.weight %v, %d blocks (feats.1 to feats.%d), a %dx%d large kernel on %d channels", dim, d.Shape("feats.0.weight"), n-tail, n-tail, lk[2], lk[3], lk[0])
	info.why("x%d: %s has %d outputs, %d channels times %d² for the pixel shuffle", s, lastKey, lo, out, s)
	info.MACs = lowResMACs(d, func(k string) bool { return strings.HasPrefix(k, "feats.") && strings.HasSuffix(k, ".weight") }, s)
	return info, true, nil
}

// lowResMACs is the multiply-accumulates per output pixel of a network
// that runs every convolution whose key keep takes at the input's
// resolution before a pixel shuffle by scale: a convolution's weights
// are its MACs per pixel.
func lowResMACs(d *statedict.Dict, keep func(string) bool, scale int) float64 {
	var n float64
	for _, k := range d.Keys {
		if keep(k) && shape(d, k, 4) != nil {
			n += float64(d.Tensors[k].Elems())
		}
	}
	return n / float64(scale*scale)
}

// seqLenNamed counts the keys prefixN.* for N from 1 up (SPAN's block_1,
// block_2, ...): the largest N such that 1 to N all have keys.
func seqLenNamed(d *statedict.Dict, prefix string) int {
	seen := map[string]bool{}
	for _, k := range d.Keys {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			num, _, _ := strings.Cut(rest, ".")
			seen[num] = true
		}
	}
	n := 0
	for seen[fmt.Sprint(n+1)] {
		n++
	}
	return n
}

// named are the architectures vsr recognises and does not run, each by
// spandrel's keys (a subset enough to tell them apart), the more specific
// first.
var named = []struct {
	arch, kind string
	keys       []string
}{
	{"HAT", "transformer", []string{"relative_position_index_SA", "layers.0.residual_group.blocks.0.conv_block.cab.0.weight", "layers.0.residual_group.overlap_attn.qkv.weight"}},
	{"ATD", "transformer", []string{"relative_position_index_SA", "layers.0.residual_group.td", "layers.0.residual_group.layers.0.attn_atd.wq.weight"}},
	{"Swin2SR", "transformer", []string{"layers.0.residual_group.blocks.0.norm1.weight", "patch_embed.proj.weight", "layers.0.residual_group.blocks.0.attn.relative_position_index"}},
	{"SwinIR", "transformer", []string{"layers.0.residual_group.blocks.0.norm1.weight", "layers.0.residual_group.blocks.0.mlp.fc1.bias", "layers.0.residual_group.blocks.0.attn.relative_position_index"}},
	{"DRCT", "transformer", []string{"layers.0.swin1.attn.relative_position_bias_table", "layers.0.adjust1.weight"}},
	{"RGT", "transformer", []string{"before_RG.1.weight", "layers.0.blocks.0.gamma", "layers.0.blocks.0.attn.attns.0.rpe_biases"}},
	{"DAT", "transformer", []string{"before_RG.1.weight", "layers.0.blocks.0.ffn.sg.conv.weight", "layers.0.blocks.0.attn.attns.0.rpe_biases"}},
	{"OmniSR", "transformer", []string{"residual_layer.0.residual_layer.0.layer.0.fn.0.weight", "input.weight", "up.0.weight"}},
	{"SAFMN", "convolutional, with spatially-adaptive modulation", []string{"to_feat.weight", "feats.0.safm.mfr.0.weight", "to_img.0.weight"}},
	{"SeemoRe", "mixture of experts", []string{"body.0.local_block.block.moe_layer.experts.0.conv_1.weight", "upsampler.0.weight"}},
	{"MoSR", "convolutional, with gated blocks", []string{"gblocks.0.weight", "gblocks.1.norm.weight", "gblocks.1.fc1.weight"}},
	{"RCAN", "convolutional, with channel attention", []string{"tail.1.weight", "body.0.body.0.body.0.weight", "body.0.body.0.body.3.conv_du.0.weight"}},
}

// detectNamed recognises the architectures of named.
func detectNamed(d *statedict.Dict) (*Info, bool, error) {
	for _, a := range named {
		if has(d, a.keys...) {
			info := &Info{Arch: a.arch, Kind: a.kind, Support: NotRun}
			info.why("%s: %s", strings.Join(a.keys, ", "), a.arch)
			return info, true, nil
		}
	}
	return nil, false, nil
}
