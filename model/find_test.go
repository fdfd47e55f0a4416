package model

import (
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
)

// claims is a family that detects the specs in its set.
type claims struct {
	name  string
	specs map[string]bool
	help  string
}

func (c claims) Name() string                                      { return c.name }
func (c claims) Detect(spec string) bool                           { return c.specs[spec] }
func (claims) StorageType() string                                 { return "" }
func (c claims) Params() []Param                                   { return []Param{{Name: "shared", Kind: Int, Help: c.help}} }
func (c claims) About() About                                      { return About{Title: c.name, Spec: "a " + c.name + " file"} }
func (claims) Load(backend.Backend, string, Params) (Model, error) { return nil, nil }

// withFamilies runs fn with the registry holding fams only.
func withFamilies(t *testing.T, fams ...Family) {
	t.Helper()
	mu.Lock()
	saved := families
	families = nil
	mu.Unlock()
	t.Cleanup(func() {
		mu.Lock()
		families = saved
		mu.Unlock()
	})
	for _, f := range fams {
		Register(f)
	}
}

// TestFindTwoClaim: a spec that two families detect is an error naming
// both, whatever their order of registration; a spec one detects is its.
func TestFindTwoClaim(t *testing.T) {
	a := claims{name: "alpha", specs: map[string]bool{"both": true, "a": true}, help: "shared thing: alpha, one way"}
	b := claims{name: "beta", specs: map[string]bool{"both": true, "b": true}, help: "shared thing: beta, another"}
	for _, order := range [][]Family{{a, b}, {b, a}} {
		withFamilies(t, order...)
		_, err := Find("both")
		if err == nil || !strings.Contains(err.Error(), "alpha") || !strings.Contains(err.Error(), "beta") {
			t.Errorf("Find of a spec two families detect: %v, want an error naming both", err)
		}
		for spec, want := range map[string]string{"a": "alpha", "b": "beta"} {
			if f, err := Find(spec); err != nil || f.Name() != want {
				t.Errorf("Find(%q): %v %v, want %s", spec, f, err, want)
			}
		}
		if s := Specs(); s != "a alpha file; or a beta file" {
			t.Errorf("Specs: %q", s)
		}
		if ps := AllParams(); len(ps) != 1 || ps[0].Help != "shared thing: alpha, one way; beta, another" {
			t.Errorf("AllParams: %+v", ps)
		}
	}
}

func TestJoinHelp(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"x: one"}, "x: one"},
		{[]string{"x: one", "x: two"}, "x: one; two"},
		{[]string{"x: one", "y: two"}, "x: one; y: two"},
		{[]string{"one", "two"}, "one; two"},
	} {
		if got := joinHelp(c.in); got != c.want {
			t.Errorf("joinHelp(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
