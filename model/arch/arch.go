// Package arch recognises the architecture of a PyTorch super-resolution
// model from its state dict's keys and shapes, as spandrel (the loader
// under chaiNNer and ComfyUI) does, and builds the ncnn graph of those
// that vsr runs, for package compact to load: the networks are written
// from the published modules' names and shapes, never from code in the
// file (a state dict holds only tensors).
//
// Detect names the architecture and its hyperparameters (scale, image
// channels, features, blocks, parameter count, multiply-accumulates per
// output pixel) with the keys and shapes that gave each away. Every
// architecture it knows is one of three kinds (Support):
//
//   - Runs: ESRGAN (RRDBNet in its old, new and BSRGAN key layouts, any
//     number of blocks, features and growth channels, x1 and x2 through
//     Real-ESRGAN's pixel unshuffle, x4, x8), SRVGGNetCompact (any
//     depth, width, scale; PReLU, ReLU or LeakyReLU), SPAN (any width,
//     channels and scale, with or without the input normalisation),
//     Real-CUGAN (2x, 3x, 4x, pro) and RealPLKSR (GroupNorm or LayerNorm,
//     with or without attention). Build builds the ncnn graph.
//   - NeedsOps: PLKSR, recognised and described, whose graph needs ops
//     vsr's backends do not have yet.
//   - NotRun: transformers and others (SwinIR, HAT, DAT, OmniSR, ...)
//     and Real-CUGAN's 2x fast, named so that the user knows what the
//     file is.
//
// A state dict none of them matches is ErrUnknown. Detect never panics,
// whatever the keys and shapes (it is fuzzed).
package arch

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/statedict"
)

// Support says what vsr can do with an architecture.
type Support int

const (
	// Runs: vsr builds the model's graph and runs it.
	Runs Support = iota
	// NeedsOps: recognised; running it needs backend ops vsr lacks.
	NeedsOps
	// NotRun: recognised; vsr does not run this architecture.
	NotRun
)

func (s Support) String() string {
	switch s {
	case Runs:
		return "runs"
	case NeedsOps:
		return "recognised; running it needs ops not yet in vsr"
	}
	return "recognised; vsr does not run this architecture yet"
}

// MarshalText writes the Support as its String.
func (s Support) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Info is what Detect found.
type Info struct {
	// Arch is the architecture's name as spandrel and OpenModelDB spell
	// it ("ESRGAN", "SRVGGNetCompact", "SPAN", "RealCUGAN", "RealPLKSR",
	// "SwinIR", ...), and Variant the form of it ("Real-ESRGAN keys",
	// "pro"), "" for the plain one.
	Arch    string `json:"architecture"`
	Variant string `json:"variant,omitempty"`
	// Kind is the family of network in a word, for messages
	// ("convolutional", "transformer").
	Kind    string  `json:"kind"`
	Support Support `json:"support"`
	// Missing names the ops a NeedsOps architecture lacks.
	Missing string `json:"missing_ops,omitempty"`

	// Scale is the output size over the input size; In and Out the image
	// channels. Zero where the architecture's were not read (NotRun).
	Scale int `json:"scale,omitempty"`
	In    int `json:"in_channels,omitempty"`
	Out   int `json:"out_channels,omitempty"`
	// Features is the width of the body, Blocks its depth in the
	// architecture's own unit (RRDBs, convolutions, PLK blocks).
	Features int `json:"features,omitempty"`
	Blocks   int `json:"blocks,omitempty"`
	// Growth is an ESRGAN's dense-block growth channels, Unshuffle the
	// factor of the pixel unshuffle in front of it (1 for none).
	Growth    int `json:"growth,omitempty"`
	Unshuffle int `json:"pixel_unshuffle,omitempty"`
	// Activation is SRVGGNetCompact's: "prelu", "relu" or "leakyrelu".
	Activation string `json:"activation,omitempty"`

	// Params counts the elements of every tensor in the state dict.
	Params int64 `json:"parameters"`
	// MACs is the multiply-accumulates of the convolutions per output
	// pixel (one MAC is two FLOPs), 0 where not computed.
	MACs float64 `json:"macs_per_output_pixel,omitempty"`

	// Evidence lists the keys and shapes that gave each finding away.
	Evidence []string `json:"evidence"`
}

// Title is the architecture and its variant: "ESRGAN (Real-ESRGAN keys)".
func (i *Info) Title() string {
	if i.Variant == "" {
		return i.Arch
	}
	return i.Arch + " (" + i.Variant + ")"
}

// Check returns nil for a model vsr runs (an architecture it runs, RGB in
// and out), else the one-line error that says what the model is and why
// vsr does not run it.
func (i *Info) Check() error {
	switch i.Support {
	case Runs:
		if i.In != 3 || i.Out != 3 {
			return fmt.Errorf("%s %s model with %d input and %d output channels: vsr runs RGB models (3 and 3)", article(i.Arch), i.Title(), i.In, i.Out)
		}
		return nil
	case NeedsOps:
		return fmt.Errorf("%s %s model (%s): recognised; running it needs ops not yet in vsr (%s)", article(i.Arch), i.Title(), i.Kind, i.Missing)
	}
	return fmt.Errorf("%s %s model (%s): vsr does not run this architecture yet", article(i.Arch), i.Title(), i.Kind)
}

// article is "a" or "an" before an architecture's name as it is read
// aloud ("an ESRGAN", "an SRVGGNetCompact", "a SwinIR").
func article(name string) string {
	if strings.IndexByte("AEIOU", name[0]) >= 0 || strings.HasPrefix(name, "SRVGG") {
		return "an"
	}
	return "a"
}

// Summary is one line: "ESRGAN x4, 3->3 channels, 64 features, 23 blocks".
func (i *Info) Summary() string {
	s := i.Title()
	if i.Scale > 0 {
		s += fmt.Sprintf(" x%d, %d->%d channels", i.Scale, i.In, i.Out)
	}
	if i.Features > 0 {
		s += fmt.Sprintf(", %d features", i.Features)
	}
	if i.Blocks > 0 {
		s += fmt.Sprintf(", %d blocks", i.Blocks)
	}
	return s
}

func (i *Info) why(format string, args ...any) {
	i.Evidence = append(i.Evidence, fmt.Sprintf(format, args...))
}

// ErrUnknown is returned (wrapped) by Detect for a state dict of no
// architecture it knows.
var ErrUnknown = errors.New("no architecture vsr knows")

// detector is one architecture's test: ok is false when d is not of it;
// an error is a state dict that has the architecture's keys but shapes
// that do not fit it.
type detector func(d *statedict.Dict) (info *Info, ok bool, err error)

// detectors in the order they are tried: the more specific key sets
// first (HAT has SwinIR's keys and more).
var detectors = []detector{
	detectESRGAN,
	detectRealCUGAN,
	detectSPAN,
	detectPLKSR,
	detectNamed,
	detectCompact,
}

// Detect recognises the architecture of d. A state dict of no known
// architecture is an error wrapping ErrUnknown that shows a few of its
// keys; one that has an architecture's keys with shapes that do not fit
// it is an error saying which.
func Detect(d *statedict.Dict) (*Info, error) {
	for _, det := range detectors {
		info, ok, err := det(d)
		if err != nil {
			return nil, err
		}
		if ok {
			info.Params = params(d)
			return info, nil
		}
	}
	keys := d.Keys
	more := ""
	if len(keys) > 4 {
		keys, more = keys[:4], fmt.Sprintf(", ... (%d keys)", len(d.Keys))
	}
	return nil, fmt.Errorf("a state dict of %w (keys %s%s)", ErrUnknown, strings.Join(keys, ", "), more)
}

// params counts the elements of every tensor of d.
func params(d *statedict.Dict) int64 {
	var n int64
	for _, k := range d.Keys {
		if t := d.Tensors[k]; t != nil {
			n += int64(max(t.Elems(), 0))
		}
	}
	return n
}

// marked reports whether d has key as a tensor or as an entry of another
// type (Dict.Skipped), or, in a file Write wrote, as a word of its
// MetaVariant: a marker such as Real-CUGAN's "pro", whose value says
// nothing.
func marked(d *statedict.Dict, key string) bool {
	if has(d, key) || slices.ContainsFunc(d.Skipped, func(s statedict.Skipped) bool { return s.Key == key }) {
		return true
	}
	return slices.Contains(strings.Split(d.Metadata[MetaVariant], ", "), key)
}

// has reports whether d has every key.
func has(d *statedict.Dict, keys ...string) bool {
	for _, k := range keys {
		if d.Tensors[k] == nil {
			return false
		}
	}
	return true
}

// shape returns the shape of key when it has rank dims (nil otherwise),
// every dimension positive.
func shape(d *statedict.Dict, key string, rank int) []int {
	t := d.Tensors[key]
	if t == nil || len(t.Shape) != rank {
		return nil
	}
	for _, n := range t.Shape {
		if n <= 0 || n > 1<<20 {
			return nil
		}
	}
	return t.Shape
}

// conv returns a square convolution weight's out, in and kernel size.
func conv(d *statedict.Dict, key string) (out, in, k int, ok bool) {
	s := shape(d, key, 4)
	if s == nil || s[2] != s[3] {
		return 0, 0, 0, false
	}
	return s[0], s[1], s[2], true
}

// seqLen is spandrel's get_seq_len: one more than the largest N of the
// keys prefix.N.*, 0 when there is none.
func seqLen(d *statedict.Dict, prefix string) int {
	n := 0
	for _, k := range d.Keys {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(num); err == nil && i >= 0 && i < 1<<20 {
			n = max(n, i+1)
		}
	}
	return n
}

// indices returns the sorted distinct integers that the first group of re
// matches in d's keys.
func indices(d *statedict.Dict, re *regexp.Regexp) []int {
	var out []int
	for _, k := range d.Keys {
		m := re.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		if i, err := strconv.Atoi(m[1]); err == nil && i >= 0 && i < 1<<20 && !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// scaleAndOut is spandrel's get_scale_and_output_channels: the scale and
// output channels of a pixel shuffle fed x channels, preferring as many
// output channels as in, then 3, 4 and 1.
func scaleAndOut(x, in int) (scale, out int, ok bool) {
	for _, c := range []int{in, 3, 4, 1} {
		if c > 0 && x%c == 0 {
			if s := isqrt(x / c); s*s == x/c {
				return s, c, true
			}
		}
	}
	return 0, 0, false
}

func isqrt(n int) int {
	s := 0
	for (s+1)*(s+1) <= n {
		s++
	}
	return s
}
