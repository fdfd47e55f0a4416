package model

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
)

// Kind is the type of a parameter's values.
type Kind int

const (
	Int    Kind = iota // an int
	Float              // a float64
	String             // a string
	Shape              // an output size: "WxH" on the command line, [height, width] in a request
)

// Param is one per-request parameter of a family.
type Param struct {
	// Name is the command-line flag ("sr-ratio"); the request field is the
	// same with '_' for '-' ("sr_ratio") unless Field says otherwise.
	Name  string
	Field string
	// Short is a one-letter command-line shorthand ("s" for -s), as the
	// tools users know have it; "" for none.
	Short string
	Kind  Kind
	// Default is the value when the request does not set one, of Kind's Go
	// type (int, float64, string; a Shape's default is the zero Size).
	Default any
	Help    string
	// Local marks a parameter of the command line only (a path on the
	// machine that runs vsr): the service refuses it in requests.
	Local bool
}

// FieldName is the parameter's request field.
func (p Param) FieldName() string {
	if p.Field != "" {
		return p.Field
	}
	return strings.ReplaceAll(p.Name, "-", "_")
}

// Size is a value of kind Shape: an output width and height.
type Size struct{ W, H int }

// Parse turns a command-line value into the parameter's Go type.
func (p Param) Parse(s string) (any, error) {
	bad := func(want string) error { return fmt.Errorf("--%s %q: want %s", p.Name, s, want) }
	switch p.Kind {
	case Int:
		v, err := strconv.Atoi(s)
		if err != nil {
			return nil, bad("an integer")
		}
		return v, nil
	case Float:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, bad("a number")
		}
		return v, nil
	case Shape:
		var z Size
		if _, err := fmt.Sscanf(s, "%dx%d", &z.W, &z.H); err != nil || z.W <= 0 || z.H <= 0 || fmt.Sprintf("%dx%d", z.W, z.H) != s {
			return nil, bad("WxH, e.g. 2560x1440")
		}
		return z, nil
	}
	return s, nil
}

// Values are parameter values by Name, each of its Kind's Go type (int,
// float64, string, Size).
type Values map[string]any

// Params are a request's parameters: those it set, and the defaults for
// the others (the family's own, or those of the service or server that
// runs it). A family tells them apart where it matters: a value set that
// contradicts the model is refused, a default is not.
type Params struct{ Set, Default Values }

// Get returns the value set for name, else its default.
func (p Params) Get(name string) (any, bool) {
	if v, ok := p.Set[name]; ok {
		return v, true
	}
	v, ok := p.Default[name]
	return v, ok
}

// Int, Float, String and Size return Get's value as that type (zero when
// unset or of another type).
func (p Params) Int(name string) int {
	v, _ := p.Get(name)
	x, _ := v.(int)
	return x
}

func (p Params) Float(name string) float64 {
	v, _ := p.Get(name)
	x, _ := v.(float64)
	return x
}

func (p Params) String(name string) string {
	v, _ := p.Get(name)
	x, _ := v.(string)
	return x
}

func (p Params) Size(name string) (Size, bool) {
	v, _ := p.Get(name)
	x, ok := v.(Size)
	return x, ok
}

// Defaults returns the defaults of params.
func Defaults(params []Param) Values {
	out := Values{}
	for _, p := range params {
		if p.Default != nil {
			out[p.Name] = p.Default
		}
	}
	return out
}

// Video is what a Session is made for.
type Video struct {
	Width, Height int
	// Frames is how many frames the session will be given (0: a live
	// stream, whose length is not known).
	Frames int
	// Keys marks the key frames in display order (nil when unknown).
	Keys []bool
}

// Family is one kind of model: how to recognise it, what it needs and what
// a request may set.
type Family interface {
	// Name is the family's name ("compact", "swiftvr").
	Name() string
	// Detect reports whether spec (a --model value: a name, a file or a
	// directory) is a model of this family. "" is the default model's
	// spec.
	Detect(spec string) bool
	// StorageType is the GPU storage type the family needs ("bf16"), or ""
	// for any.
	StorageType() string
	// Params are the per-request parameters, in the order help shows them.
	Params() []Param
	// Load reads the model at spec onto dev, to stay resident. p are the
	// parameters of the command or server that loads it: they may shape
	// what is loaded (SwiftVR's "dit") and are its sessions' defaults.
	Load(dev backend.Backend, spec string, p Params) (Model, error)
}

// Model is a family's model resident on a device. Its methods may be
// called from several goroutines; requests never change it.
type Model interface {
	// Name names the model in messages and metadata.
	Name() string
	// Describe is the model's entry in the service's metadata.
	Describe() map[string]any
	// NewSession makes the state for one video with the request's
	// parameters. It refuses parameters that contradict the model.
	NewSession(ctx context.Context, v Video, p Params) (Session, error)
	// Close frees the model.
	Close()
}

var (
	mu       sync.Mutex
	families []Family
)

// Register makes a family available. It is called from the init function
// of the family's package, and panics when the name is taken.
func Register(f Family) {
	mu.Lock()
	defer mu.Unlock()
	for _, o := range families {
		if o.Name() == f.Name() {
			panic("model: Register called twice for family " + f.Name())
		}
	}
	families = append(families, f)
}

// Families returns the registered families in registration order.
func Families() []Family {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(families)
}

// Find returns the family of spec: the last registered family that
// detects it, so that a family registered later (more specific) wins
// over the default one.
func Find(spec string) (Family, error) {
	fams := Families()
	for i := len(fams) - 1; i >= 0; i-- {
		if fams[i].Detect(spec) {
			return fams[i], nil
		}
	}
	// Say what spec is instead: a pickle, a directory a family can
	// explain, or nothing at all.
	if st, err := os.Stat(spec); err == nil && st.Mode().IsRegular() {
		if err := safetensors.CheckNotPickle(spec); err != nil {
			return nil, fmt.Errorf("--model: %w", err)
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--model %q: no such file or directory, and not a bundled or fetchable model name (see `vsr models`)", spec)
	}
	for _, f := range fams {
		if e, ok := f.(Explainer); ok {
			if err := e.Explain(spec); err != nil {
				return nil, fmt.Errorf("--model: %w", err)
			}
		}
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.Name())
	}
	sort.Strings(names)
	return nil, fmt.Errorf("--model %q is not a model vsr knows: give a bundled or fetchable name (see `vsr models`), an ncnn .param file or a SwiftVR checkpoint directory (families: %s)", spec, strings.Join(names, ", "))
}

// Owner returns the families other than f that have a parameter name,
// for messages that say where a parameter belongs.
func Owner(name string, except Family) []string {
	var out []string
	for _, f := range Families() {
		if f == except {
			continue
		}
		for _, p := range f.Params() {
			if p.Name == name {
				out = append(out, f.Name())
			}
		}
	}
	return out
}
