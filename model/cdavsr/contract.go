// Package cdavsr runs CDA-VSR (Wang et al., "Compressed-Domain-Aware Online
// Video Super-Resolution", CVPR 2026): an online x s network that restores
// one frame at a time, with a recurrent state aligned by per-pixel motion
// vectors and gated by the luma residual. The first frame and every reset
// run the "I" path (24 residual blocks); the others the "P" path (12).
//
// The package holds the checkpoint contract (contract.go), the network on
// the backend interface (net.go), the online instance of pixtreme's runtime
// contract (instance.go), the side data vsr computes itself from decoded
// luma (sidedata.go), the model family (family.go) and what vsr
// checkpoint inspect and synth do for it (checkpoint.go).
package cdavsr

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
)

// Metadata keys and the values the contract accepts.
const (
	MetaResidualUnit = "cda_vsr.residual_unit"
	ResidualUnit     = "luma-range"
	MetaGate         = "cda_vsr.gate"
	GateSigmoid      = "sigmoid"
)

// Groups and OffsetLimit are the deformable alignment's: 4 groups of 32
// channels, offsets of at most 8 pixels around the motion vector.
const (
	Groups      = 4
	OffsetLimit = 8
	features    = 64
	blocksI     = 24
	blocksP     = 12
	blocksFE    = 3
)

// ErrContract marks a checkpoint that breaks the contract.
var ErrContract = errors.New("not a CDA-VSR checkpoint vsr accepts")

// shapes returns the 179 tensor names of the network at scale s and their
// shapes.
func shapes(s int) map[string][]int {
	m := map[string][]int{}
	conv := func(name string, out, in, k int, bias bool) {
		m[name+".weight"] = []int{out, in, k, k}
		if bias {
			m[name+".bias"] = []int{out}
		}
	}
	conv("conv_first", features, 3, 3, true)
	for i := 0; i < blocksFE; i++ {
		conv(fmt.Sprintf("feature_extraction.%d.conv1", i), features, features, 3, true)
		conv(fmt.Sprintf("feature_extraction.%d.conv2", i), features, features, 3, true)
	}
	conv("deform_align.conv_offset.0", 16, offsetIn, 3, true)
	conv("deform_align.conv_offset.2", 16, 16, 3, true)
	conv("deform_align.conv_offset.4", 16, 16, 3, true)
	conv("deform_align.conv_offset.6", 3*Groups, 16, 1, true)
	conv("deform_align.dcn", 2*features, 2*features, 1, false)
	conv("conv_weight_l.0", features, 1, 1, true)
	conv("conv_weight_l.2", features, features, 1, true)
	conv("conv_weight_l.4", 1, features, 1, true)
	conv("convs.0", features, 3*features, 3, true)
	for i := 0; i < blocksI; i++ {
		conv(fmt.Sprintf("reconstruction_I.%d.conv1", i), features, features, 3, true)
		conv(fmt.Sprintf("reconstruction_I.%d.conv2", i), features, features, 3, true)
	}
	for i := 0; i < blocksP; i++ {
		conv(fmt.Sprintf("reconstruction_P.%d.conv1", i), features, features, 3, true)
		conv(fmt.Sprintf("reconstruction_P.%d.conv2", i), features, features, 3, true)
	}
	conv("conv_h", features, features, 3, true)
	conv("upconv1", 3*s*s, features, 3, true)
	return m
}

// Contract is what a checkpoint's header says about it, read without any
// tensor value.
type Contract struct {
	Path   string `json:"path"`
	Family string `json:"family"` // "cdavsr"
	// Prefix is the weight set's prefix before the documented names
	// ("", "params.", "params_ema.", "module.", ...).
	Prefix string `json:"prefix"`
	// Tensors is the number of tensors in the weight set (179).
	Tensors    int    `json:"tensors"`
	Scale      int    `json:"scale"`
	Gate       string `json:"gate"` // "1+w" or "sigmoid"
	Parameters int    `json:"parameters"`
	// Width and Height are the input size the state was sized for (0: not
	// given); StateBytes the two float32 state buffers at that size.
	Width      int   `json:"width,omitempty"`
	Height     int   `json:"height,omitempty"`
	StateBytes int64 `json:"state_bytes,omitempty"`
	// Problems lists every way the checkpoint breaks the contract (empty
	// for one vsr opens).
	Problems []string `json:"problems"`
}

// StateBytesAt is the memory of the two recurrent state buffers (128
// float32 channels each) for an input of w x h.
func StateBytesAt(w, h int) int64 { return 2 * 2 * features * 4 * int64(w) * int64(h) }

// Sniff reports whether the file at path reads as a CDA-VSR checkpoint: a
// safetensors file whose metadata names the residual unit or whose tensors
// include the network's own names under some prefix. It reads only the
// header.
func Sniff(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, ok := f.Metadata()[MetaResidualUnit]; ok {
		return true
	}
	for _, n := range f.Names() {
		if strings.HasSuffix(n, "deform_align.dcn.weight") {
			return true
		}
	}
	return false
}

// Inspect reads the header of the checkpoint at path and checks it against
// the contract, without reading any tensor value. A file that is not a
// safetensors file at all (a PyTorch pickle or zip, an engine file) is an
// error: a CDA-VSR checkpoint must be safetensors (vsr reads .pth files
// only as state dicts of the super-resolution architectures it knows). A
// safetensors file that breaks the contract comes back with its problems
// listed. w and h, when not 0, size the state.
func Inspect(path string, w, h int) (*Contract, error) {
	if err := safetensors.CheckNotPickle(path); err != nil {
		if errors.Is(err, safetensors.ErrPickle) {
			return nil, fmt.Errorf("a CDA-VSR checkpoint must be safetensors: %w", err)
		}
		return nil, err
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: not a safetensors file (%v); CDA-VSR checkpoints are safetensors: export one with safetensors.torch.save_file", path, err)
	}
	defer f.Close()
	c := &Contract{Path: path, Family: "cdavsr", Width: w, Height: h, Problems: []string{}}
	if w > 0 && h > 0 {
		c.StateBytes = StateBytesAt(w, h)
	}
	problem := func(format string, args ...any) { c.Problems = append(c.Problems, fmt.Sprintf(format, args...)) }
	meta := f.Metadata()
	switch u, ok := meta[MetaResidualUnit]; {
	case !ok:
		problem("metadata %s is missing; the contract needs %q", MetaResidualUnit, ResidualUnit)
	case u != ResidualUnit:
		problem("metadata %s is %q; the contract accepts only %q", MetaResidualUnit, u, ResidualUnit)
	}
	c.Gate = "1+w"
	if g, ok := meta[MetaGate]; ok {
		if g != GateSigmoid {
			problem("metadata %s is %q; accepted: %q, or no key for aligned*(1+w)", MetaGate, g, GateSigmoid)
		}
		c.Gate = GateSigmoid
	}
	// Weight sets: the prefixes before the network's own names.
	names := f.Names()
	sets := map[string]int{}
	known := shapes(4)
	for _, n := range names {
		for k := range known {
			if p, ok := strings.CutSuffix(n, k); ok && (p == "" || strings.HasSuffix(p, ".")) {
				sets[p]++
				break
			}
		}
	}
	var prefixes []string
	for p := range sets {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	quote := func(ps []string) string {
		var q []string
		for _, p := range ps {
			if p == "" {
				p = "(no prefix)"
			}
			q = append(q, fmt.Sprintf("%q", p))
		}
		return strings.Join(q, ", ")
	}
	switch len(prefixes) {
	case 0:
		problem("no weight set: none of the %d tensors has a CDA-VSR name (conv_first.weight, deform_align.dcn.weight, ...)", len(names))
		return c, nil
	case 1:
		c.Prefix = prefixes[0]
	default:
		problem("%d weight sets (prefixes %s); the contract takes exactly one: keep one (e.g. params_ema.) and drop the others", len(prefixes), quote(prefixes))
		return c, nil
	}
	// The scale from upconv1.weight.
	up, ok := f.Info(c.Prefix + "upconv1.weight")
	switch {
	case !ok:
		problem("no %supconv1.weight, which sets the scale", c.Prefix)
	case len(up.Shape) != 4 || up.Shape[0]%3 != 0 || !square(up.Shape[0]/3):
		problem("%supconv1.weight has shape %v; expected [3*s*s 64 3 3] with s a positive integer", c.Prefix, up.Shape)
	default:
		c.Scale = isqrt(up.Shape[0] / 3)
	}
	if c.Scale == 0 {
		return c, nil
	}
	want := shapes(c.Scale)
	for _, n := range names {
		k, ok := strings.CutPrefix(n, c.Prefix)
		if !ok {
			continue // outside the set: ignored
		}
		shape, known := want[k]
		info, _ := f.Info(n)
		switch {
		case !known:
			if c.Prefix != "" || isNetworkLike(k) {
				problem("%s is not a CDA-VSR tensor (the set has exactly the documented names)", n)
			}
			continue
		case info.DType != safetensors.F32:
			problem("%s is %s; the contract takes float32", n, info.DType)
		case !equal(info.Shape, shape):
			problem("%s has shape %v; expected %v", n, info.Shape, shape)
		}
		c.Tensors++
		c.Parameters += info.Elems()
	}
	var missing []string
	for k := range want {
		if _, ok := f.Info(c.Prefix + k); !ok {
			missing = append(missing, c.Prefix+k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		more := ""
		if len(missing) > 3 {
			more = fmt.Sprintf(" and %d more", len(missing)-3)
			missing = missing[:3]
		}
		problem("missing %s%s (the contract has %d tensors)", strings.Join(missing, ", "), more, len(want))
	}
	return c, nil
}

// isNetworkLike reports whether an unprefixed name looks like a layer of
// the network (so an extra one is refused rather than ignored).
func isNetworkLike(k string) bool {
	for _, p := range []string{"conv_first", "feature_extraction", "deform_align", "conv_weight_l", "convs", "reconstruction_", "conv_h", "upconv"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func square(n int) bool { r := isqrt(n); return r > 0 && r*r == n }

func isqrt(n int) int {
	r := 0
	for (r+1)*(r+1) <= n {
		r++
	}
	return r
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Err returns the contract's problems as one error, or nil.
func (c *Contract) Err() error {
	if len(c.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w: %s", c.Path, ErrContract, strings.Join(c.Problems, "; "))
}
