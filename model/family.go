package model

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vsr-dev/vsr/internal/decimal"
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
		v, err := decimal.Parse(s)
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

// Families returns the registered families, ordered by name (the order
// of registration, which is the order of package initialisation, decides
// nothing).
func Families() []Family {
	mu.Lock()
	defer mu.Unlock()
	out := slices.Clone(families)
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// Find returns the family of spec: the one family that detects it. Two
// families that both detect it are an error naming both (registration
// order decides nothing).
func Find(spec string) (Family, error) {
	fams := Families()
	var found Family
	for _, f := range fams {
		if !f.Detect(spec) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("--model %q: both the %s and the %s family take it", spec, found.Name(), f.Name())
		}
		found = f
	}
	if found != nil {
		return found, nil
	}
	// Say what spec is instead: a file or directory a family can explain
	// (a .pth that is no state dict of an architecture vsr knows, a
	// directory without a checkpoint's layout), or nothing at all.
	if _, err := os.Stat(spec); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--model %q: no such file or directory, and no model vsr knows by that name: give %s", spec, Specs())
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
	return nil, fmt.Errorf("--model %q is not a model vsr knows: give %s (families: %s)", spec, Specs(), strings.Join(names, ", "))
}

// Specs says what a --model value may be, from each registered family's
// About.Spec, the default model's family first: "a; b; or c".
func Specs() string {
	var out []string
	for _, f := range Families() {
		switch s := f.About().Spec; {
		case s == "":
		case f.Detect(""):
			out = slices.Insert(out, 0, s)
		default:
			out = append(out, s)
		}
	}
	if len(out) > 1 {
		out[len(out)-1] = "or " + out[len(out)-1]
	}
	return strings.Join(out, "; ")
}

// DefaultModel names the model that --model "" stands for (the About's
// Default of the family that detects ""), or "" when none does.
func DefaultModel() string {
	f, err := Find("")
	if err != nil {
		return ""
	}
	return f.About().Default
}

// Titles returns the Titles of the registered families that keep, in
// Families' order.
func Titles(keep func(Family) bool) []string {
	var out []string
	for _, f := range Families() {
		if keep(f) {
			out = append(out, f.About().Title)
		}
	}
	return out
}

// List joins items as prose with conj ("and", "or"): "a", "a or b",
// "a, b or c".
func List(items []string, conj string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conj + " " + items[len(items)-1]
}

// AllParams lists the parameters of every registered family, each name
// once, in Families' order: the command line's flags (see MergeParams).
func AllParams() []Param {
	var lists [][]Param
	for _, f := range Families() {
		lists = append(lists, f.Params())
	}
	return MergeParams(lists...)
}

// MergeParams lists the parameters of several families (or of one of
// their capabilities, as SynthParams), each name once, in the order
// given. A parameter that several families share has the first one's
// Kind and Default, and a Help made of each family's own: the part before
// ": " that they all begin with, once, then the rest of each, joined by
// "; " ("output size WxH: compact, ...; SwiftVR, ..."); helps that begin
// differently are joined whole.
func MergeParams(lists ...[]Param) []Param {
	var out []Param
	helps := map[string][]string{}
	for _, l := range lists {
		for _, p := range l {
			if _, seen := helps[p.Name]; !seen {
				out = append(out, p)
			}
			helps[p.Name] = append(helps[p.Name], p.Help)
		}
	}
	for i, p := range out {
		out[i].Help = joinHelp(helps[p.Name])
	}
	return out
}

// joinHelp is the Help of a parameter that families share (see
// MergeParams).
func joinHelp(helps []string) string {
	if len(helps) == 1 {
		return helps[0]
	}
	head, _, ok := strings.Cut(helps[0], ": ")
	var rests []string
	for _, h := range helps {
		h2, rest, ok2 := strings.Cut(h, ": ")
		if !ok2 || h2 != head {
			ok = false
			break
		}
		rests = append(rests, rest)
	}
	if !ok {
		return strings.Join(helps, "; ")
	}
	return head + ": " + strings.Join(rests, "; ")
}

// ParamOwners returns the names of the families other than except that
// have a parameter named name, for messages that say where a parameter
// belongs.
func ParamOwners(name string, except Family) []string {
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
