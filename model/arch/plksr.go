package arch

import (
	"fmt"

	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// plksr is a RealPLKSR to write as an ncnn graph, as read from its state
// dict by spandrel's keys.
type plksr struct {
	dim, blocks, scale int
	pdim, kernel       int  // the partial large kernel: its channels and size
	ea, layerNorm      bool // element-wise attention; a LayerNorm before each block instead of a GroupNorm after
}

// read reads the hyperparameters the weights give; the GroupNorm's groups
// are not among them, and take the published default, 4.
func (p *plksr) read(d *statedict.Dict, info *Info) error {
	lk := shape(d, "feats.1.lk.conv.weight", 4)
	if lk == nil || lk[2] != lk[3] || lk[2]%2 == 0 {
		return fmt.Errorf("feats.1.lk.conv.weight is %v, want an odd square kernel", d.Shape("feats.1.lk.conv.weight"))
	}
	p.dim, p.blocks, p.scale = info.Features, info.Blocks, info.Scale
	p.pdim, p.kernel = lk[0], lk[2]
	p.ea = has(d, "feats.1.attn.f.0.weight")
	p.layerNorm = has(d, "feats.1.layer_norm.weight")
	if info.Out != 3 || info.In != 3 {
		return fmt.Errorf("a RealPLKSR of %d input and %d output channels: vsr runs RGB models", info.In, info.Out)
	}
	return nil
}

// plksrGroups is the groups of a RealPLKSR's GroupNorms (norm_groups).
const plksrGroups = 4

// graph writes the network as neosr's realplksr_arch.py runs it in
// inference: per block a channel mixer (3x3 convolution to twice the
// channels, Mish, 3x3 convolution back), the large-kernel convolution of
// the first pdim channels (a channel Crop of each part, a Concat), the
// element-wise attention (a 3x3 convolution, Sigmoid, product), a 1x1
// refinement, a GroupNorm (or a ChannelNorm before the mixer: spandrel's
// layer_norm) and the block's input added; then the last convolution's
// pixel shuffle plus the nearest-upsampled input (torch.repeat_interleave
// of the input's channels before the shuffle is that).
func (p plksr) graph(w *writer) {
	in := w.input()
	x := w.conv("feats.0", in, actNone, 0)
	for i := 1; i <= p.blocks; i++ {
		key := fmt.Sprintf("feats.%d", i)
		skip, y := x, x
		if p.layerNorm {
			y = w.norm("ChannelNorm", key+".layer_norm", y, fmt.Sprintf("0=%d 1=%e", p.dim, float32(1e-6)))
		}
		y = w.conv(key+".channel_mixer.0", y, actNone, 0)
		y = w.layer("Mish", key+".channel_mixer.1", []string{y}, "")
		y = w.conv(key+".channel_mixer.2", y, actNone, 0)
		head := w.layer("Crop", key+".lk.head", []string{y}, fmt.Sprintf("2=0 5=%d", p.pdim))
		tail := w.layer("Crop", key+".lk.tail", []string{y}, fmt.Sprintf("2=%d 5=%d", p.pdim, p.dim-p.pdim))
		y = w.layer("Concat", key+".lk", []string{w.conv(key+".lk.conv", head, actNone, 0), tail}, "")
		if p.ea {
			g := w.conv(key+".attn.f.0", y, actNone, 0)
			g = w.layer("Sigmoid", key+".attn.f.1", []string{g}, "")
			y = w.layer("BinaryOp", key+".attn", []string{y, g}, "0=2")
		}
		y = w.conv(key+".refine", y, actNone, 0)
		if !p.layerNorm {
			y = w.norm("GroupNorm", key+".norm", y, fmt.Sprintf("0=%d 1=%d 2=%e 3=1", plksrGroups, p.dim, float32(1e-5)))
		}
		x = w.layer("BinaryOp", key+".add", []string{y, skip}, "0=0")
	}
	x = w.conv(fmt.Sprintf("feats.%d", p.blocks+2), x, actNone, 0)
	sh := w.layer("PixelShuffle", "to_img", []string{x}, fmt.Sprintf("0=%d", p.scale))
	up := w.layer("Interp", "repeat", []string{in}, fmt.Sprintf("0=1 1=%e 2=%e", float32(p.scale), float32(p.scale)))
	w.layer("BinaryOp", "add", []string{sh, up}, "0=0")
}

// norm writes a normalisation layer typ named by KEY with the weights
// KEY.weight and KEY.bias (raw, the scale then the shift).
func (w *writer) norm(typ, key, in, params string) string {
	w.raw(w.floats(key + ".weight"))
	w.raw(w.floats(key + ".bias"))
	return w.layer(typ, key, []string{in}, params)
}
