package arch

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// rrdb is an RRDBNet's layout (ESRGAN, Real-ESRGAN, BSRGAN), whichever
// key names its file uses: the key of each convolution (its weight is
// KEY.weight, its bias KEY.bias).
type rrdb struct {
	first, body, hr, last string
	ups                   []string
	conv                  func(block, rdb, c int) string // rdb 1..3, c 1..5
	blocks, nf, gc        int
	in, out, unshuffle    int
	scale                 int
}

var (
	oldTop      = regexp.MustCompile(`^model\.(\d+)\.weight$`)
	oldBlocks   = regexp.MustCompile(`^model\.1\.sub\.(\d+)\.RDB1\.conv1\.0\.weight$`)
	newUps      = regexp.MustCompile(`^conv_up(\d+)\.weight$`)
	bsrganUps   = regexp.MustCompile(`^upconv(\d+)\.weight$`)
	newBlocks   = regexp.MustCompile(`^body\.(\d+)\.rdb1\.conv1\.weight$`)
	bsrgBlocks  = regexp.MustCompile(`^RRDB_trunk\.(\d+)\.RDB1\.conv1\.weight$`)
	esrganPlusK = "model.1.sub.0.RDB1.conv1x1.weight"
)

// detectESRGAN recognises an RRDBNet by spandrel's key sets: the old
// ESRGAN names (model.0, model.1.sub.N.RDBk.convj.0, model.3, ...), the
// BasicSR / Real-ESRGAN names (conv_first, body.N.rdbk.convj, conv_body,
// conv_up1, conv_up2, conv_hr, conv_last) and BSRGAN's (RRDB_trunk,
// trunk_conv, upconv1, HRconv).
func detectESRGAN(d *statedict.Dict) (*Info, bool, error) {
	_, info, ok, err := parseRRDB(d)
	return info, ok, err
}

// parseRRDB is detectESRGAN with the layout it found.
func parseRRDB(d *statedict.Dict) (*rrdb, *Info, bool, error) {
	r := &rrdb{}
	info := &Info{Arch: "ESRGAN", Kind: "convolutional"}
	switch {
	case has(d, "model.0.weight", esrganPlusK):
		info.Variant, info.Support = "ESRGAN+", NotRun
		info.why("model.0.weight and %s: ESRGAN+ (RRDBs with 1x1 residual convolutions and noise)", esrganPlusK)
		return r, info, true, nil
	case has(d, "model.0.weight", "model.1.sub.0.RDB1.conv1.0.weight"):
		info.Variant = "old ESRGAN keys"
		info.why("model.0.weight and model.1.sub.0.RDB1.conv1.0.weight: an RRDBNet with the original ESRGAN key names")
		bl := indices(d, oldBlocks)
		r.blocks = len(bl)
		r.first, r.body = "model.0", fmt.Sprintf("model.1.sub.%d", r.blocks)
		r.conv = func(b, k, c int) string { return fmt.Sprintf("model.1.sub.%d.RDB%d.conv%d.0", b, k, c) }
		top := indices(d, oldTop)
		if len(top) < 3 || top[0] != 0 {
			return nil, nil, false, fmt.Errorf("an old-style ESRGAN state dict whose top convolutions model.N are %v: want model.0, the upsampling convolutions, the HR convolution and the last", top)
		}
		n := len(top)
		r.hr, r.last = fmt.Sprintf("model.%d", top[n-2]), fmt.Sprintf("model.%d", top[n-1])
		for i, t := range top[1 : n-2] {
			if t != 3*(i+1) {
				return nil, nil, false, fmt.Errorf("an old-style ESRGAN state dict with convolution model.%d where an upsampling convolution model.%d belongs", t, 3*(i+1))
			}
			r.ups = append(r.ups, fmt.Sprintf("model.%d", t))
		}
		if want := 3*len(r.ups) + 2; top[n-2] != want || top[n-1] != want+2 {
			return nil, nil, false, fmt.Errorf("an old-style ESRGAN state dict whose last convolutions are model.%d and model.%d: want model.%d and model.%d", top[n-2], top[n-1], want, want+2)
		}
	case has(d, "conv_first.weight", "body.0.rdb1.conv1.weight", "conv_body.weight", "conv_last.weight"):
		info.Variant = "Real-ESRGAN keys"
		info.why("conv_first.weight, body.0.rdb1.conv1.weight, conv_body.weight and conv_last.weight: an RRDBNet with BasicSR's (Real-ESRGAN's) key names")
		r.blocks = len(indices(d, newBlocks))
		r.first, r.body, r.hr, r.last = "conv_first", "conv_body", "conv_hr", "conv_last"
		r.conv = func(b, k, c int) string { return fmt.Sprintf("body.%d.rdb%d.conv%d", b, k, c) }
		for _, i := range indices(d, newUps) {
			r.ups = append(r.ups, fmt.Sprintf("conv_up%d", i))
		}
	case has(d, "conv_first.weight", "RRDB_trunk.0.RDB1.conv1.weight", "trunk_conv.weight", "conv_last.weight"):
		info.Variant = "BSRGAN keys"
		info.why("conv_first.weight, RRDB_trunk.0.RDB1.conv1.weight, trunk_conv.weight and conv_last.weight: an RRDBNet with BSRGAN's (RealSR's) key names")
		r.blocks = len(indices(d, bsrgBlocks))
		r.first, r.body, r.hr, r.last = "conv_first", "trunk_conv", "HRconv", "conv_last"
		r.conv = func(b, k, c int) string { return fmt.Sprintf("RRDB_trunk.%d.RDB%d.conv%d", b, k, c) }
		for _, i := range indices(d, bsrganUps) {
			r.ups = append(r.ups, fmt.Sprintf("upconv%d", i))
		}
	default:
		return nil, nil, false, nil
	}
	if err := r.read(d, info); err != nil {
		return nil, nil, false, fmt.Errorf("an ESRGAN (%s) state dict: %w", info.Variant, err)
	}
	return r, info, true, nil
}

// read checks every convolution's shape and fills in the hyperparameters.
func (r *rrdb) read(d *statedict.Dict, info *Info) error {
	nf, in, k, ok := conv(d, r.first+".weight")
	if !ok || k != 3 {
		return fmt.Errorf("%s.weight is %v, want a 3x3 convolution", r.first, d.Shape(r.first+".weight"))
	}
	r.nf, r.in = nf, in
	info.why("%d features: %s.weight is %v", nf, r.first, d.Shape(r.first+".weight"))
	if r.blocks == 0 {
		return fmt.Errorf("no residual-in-residual dense blocks")
	}
	gc, _, _, ok := conv(d, r.conv(0, 1, 1)+".weight")
	if !ok {
		return fmt.Errorf("%s.weight is %v, want a convolution", r.conv(0, 1, 1), d.Shape(r.conv(0, 1, 1)+".weight"))
	}
	r.gc = gc
	info.why("%d blocks (%s to %s), growth %d: %s.weight is %v", r.blocks, r.conv(0, 1, 1), r.conv(r.blocks-1, 1, 1), gc, r.conv(0, 1, 1), d.Shape(r.conv(0, 1, 1)+".weight"))
	for b := 0; b < r.blocks; b++ {
		for k := 1; k <= 3; k++ {
			for c := 1; c <= 5; c++ {
				out := gc
				if c == 5 {
					out = nf
				}
				if err := want(d, r.conv(b, k, c), out, nf+(c-1)*gc, 3); err != nil {
					return err
				}
			}
		}
	}
	if err := want(d, r.body, nf, nf, 3); err != nil {
		return err
	}
	for _, u := range r.ups {
		if err := want(d, u, nf, nf, 3); err != nil {
			return err
		}
	}
	if err := want(d, r.hr, nf, nf, 3); err != nil {
		return err
	}
	out, _, _, ok := conv(d, r.last+".weight")
	if !ok {
		return fmt.Errorf("%s.weight is %v, want a convolution", r.last, d.Shape(r.last+".weight"))
	}
	if err := want(d, r.last, out, nf, 3); err != nil {
		return err
	}
	r.out, r.unshuffle = out, 1
	switch in {
	case 4 * out:
		r.unshuffle = 2
	case 16 * out:
		r.unshuffle = 4
	}
	up := 1 << len(r.ups)
	if len(r.ups) > 4 || up%r.unshuffle != 0 {
		return fmt.Errorf("%d upsampling convolutions after a pixel unshuffle by %d: the scale is no whole number", len(r.ups), r.unshuffle)
	}
	r.scale = up / r.unshuffle
	info.Scale, info.In, info.Out = r.scale, in/(r.unshuffle*r.unshuffle), out
	info.Features, info.Blocks, info.Growth, info.Unshuffle = nf, r.blocks, gc, r.unshuffle
	info.why("x%d: %d upsampling convolutions (%s), each after a nearest x2", up, len(r.ups), strings.Join(r.ups, ", "))
	if r.unshuffle > 1 {
		info.why("x%d overall: %s reads %d channels, %d times the %d that %s writes, so a pixel unshuffle by %d comes first (Real-ESRGAN's x%d models)", r.scale, r.first, in, r.unshuffle*r.unshuffle, out, r.last, r.unshuffle, r.scale)
	}
	// Per input pixel: the body at 1/unshuffle², each upsampling
	// convolution at 4 times the area of the one before, the HR and last
	// at the output's.
	u2 := float64(r.unshuffle * r.unshuffle)
	rdb := 0
	for c := 1; c <= 5; c++ {
		o := gc
		if c == 5 {
			o = nf
		}
		rdb += 9 * (nf + (c-1)*gc) * o
	}
	body := float64(9*nf*in) + float64(3*r.blocks*rdb) + float64(9*nf*nf)
	macs := body / u2
	area := 1 / u2
	for range r.ups {
		area *= 4
		macs += area * float64(9*nf*nf)
	}
	macs += area * float64(9*nf*nf+9*out*nf)
	info.MACs = macs / area
	return nil
}

// want checks that KEY.weight is an out x in x k x k convolution and
// KEY.bias, when present, has out values.
func want(d *statedict.Dict, key string, out, in, k int) error {
	o, i, kk, ok := conv(d, key+".weight")
	if !ok || o != out || i != in || kk != k {
		return fmt.Errorf("%s.weight is %v, want [%d %d %d %d]", key, d.Shape(key+".weight"), out, in, k, k)
	}
	if b := d.Get(key + ".bias"); b != nil && (len(b.Shape) != 1 || b.Shape[0] != out) {
		return fmt.Errorf("%s.bias is %v, want [%d]", key, b.Shape, out)
	}
	return nil
}
