package model_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	_ "github.com/vsr-dev/vsr/model/compact"
	_ "github.com/vsr-dev/vsr/model/swiftvr"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		p    model.Param
		in   string
		want any
		err  string
	}{
		{model.Param{Name: "scale", Kind: model.Int}, "3", 3, ""},
		{model.Param{Name: "scale", Kind: model.Int}, "3.5", nil, "--scale"},
		{model.Param{Name: "sr-ratio", Kind: model.Float}, "1.5", 1.5, ""},
		{model.Param{Name: "sr-ratio", Kind: model.Float}, "1_0", nil, "--sr-ratio"},
		{model.Param{Name: "sr-ratio", Kind: model.Float}, "Inf", nil, "--sr-ratio"},
		{model.Param{Name: "size", Kind: model.Shape}, "2560x1440", model.Size{W: 2560, H: 1440}, ""},
		{model.Param{Name: "size", Kind: model.Shape}, "2560x1440x3", nil, "WxH"},
		{model.Param{Name: "size", Kind: model.Shape}, "0x10", nil, "WxH"},
		{model.Param{Name: "dit", Kind: model.String}, "off", "off", ""},
	} {
		v, err := c.p.Parse(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse(%q) for %s: %v, want an error naming %q", c.in, c.p.Name, err, c.err)
			}
			continue
		}
		if err != nil || v != c.want {
			t.Errorf("Parse(%q) for %s = %v, %v; want %v", c.in, c.p.Name, v, err, c.want)
		}
	}
	if f := (model.Param{Name: "clip-len"}).FieldName(); f != "clip_len" {
		t.Errorf("field of clip-len: %s", f)
	}
}

func TestParams(t *testing.T) {
	p := model.Params{Set: model.Values{"a": 1}, Default: model.Values{"a": 2, "b": 3}}
	if p.Int("a") != 1 || p.Int("b") != 3 || p.Int("c") != 0 {
		t.Errorf("Params: a %d b %d c %d", p.Int("a"), p.Int("b"), p.Int("c"))
	}
}

func TestFind(t *testing.T) {
	for spec, want := range map[string]string{"": "compact", "realesr-animevideov3-x2": "compact", "m.param": "compact"} {
		if f, err := model.Find(spec); err != nil || f.Name() != want {
			t.Errorf("Find(%q): %v %v, want %s", spec, f, err, want)
		}
	}
	if _, err := model.Find("/no/such/thing"); err == nil || !strings.Contains(err.Error(), "no such file") || !strings.Contains(err.Error(), model.Specs()) {
		t.Errorf("Find of a missing path: %v", err)
	}
	notes := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(notes, []byte("notes"), 0o644)
	if _, err := model.Find(notes); err == nil || !strings.Contains(err.Error(), "compact, swiftvr") || !strings.Contains(err.Error(), model.Specs()) {
		t.Errorf("Find of a file of no family: %v", err)
	}
}

type dup struct{}

func (dup) Name() string                                                    { return "compact" }
func (dup) Detect(string) bool                                              { return false }
func (dup) StorageType() string                                             { return "" }
func (dup) Params() []model.Param                                           { return nil }
func (dup) About() model.About                                              { return model.About{} }
func (dup) Load(backend.Backend, string, model.Params) (model.Model, error) { return nil, nil }

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a second family named compact was registered")
		}
	}()
	model.Register(dup{})
}

// TestListsFromRegistry checks that what lists the families is built
// from the registry: each family's About in Specs, the default model,
// and the help of a shared parameter made of each family's own.
func TestListsFromRegistry(t *testing.T) {
	specs := model.Specs()
	for _, f := range model.Families() {
		if a := f.About(); a.Title == "" || a.Spec == "" || !strings.Contains(specs, a.Spec) {
			t.Errorf("family %s: About %+v, Specs %q", f.Name(), a, specs)
		}
	}
	if !strings.HasPrefix(specs, "a bundled or fetchable name") || !strings.HasSuffix(specs, "; or a SwiftVR checkpoint directory") {
		t.Errorf("Specs: %q, want the default model's family first", specs)
	}
	if d := model.DefaultModel(); d != "bundled realesr-animevideov3" {
		t.Errorf("DefaultModel: %q", d)
	}
	var size *model.Param
	all := model.AllParams()
	seen := map[string]bool{}
	for i, p := range all {
		if seen[p.Name] {
			t.Errorf("AllParams: %s twice", p.Name)
		}
		seen[p.Name] = true
		if p.Name == "size" {
			size = &all[i]
		}
	}
	// A parameter several families share has the same Kind and Default
	// in each (AllParams keeps the first's).
	first := map[string]model.Param{}
	for _, f := range model.Families() {
		for _, p := range f.Params() {
			if q, ok := first[p.Name]; !ok {
				first[p.Name] = p
			} else if p.Kind != q.Kind || p.Default != q.Default {
				t.Errorf("parameter %s: kind %v default %v in family %s, kind %v default %v in another", p.Name, p.Kind, p.Default, f.Name(), q.Kind, q.Default)
			}
		}
	}
	want := "output size WxH: compact, the model's output resized (bicubic) to it, from the bundled graph of the smallest scale that reaches it; SwiftVR, any even size (wins over --sr-ratio)"
	if size == nil || size.Help != want {
		t.Errorf("AllParams' size: %+v, want the help %q", size, want)
	}
	for _, f := range model.Families() {
		for _, p := range f.Params() {
			if p.Name == "size" && strings.Contains(p.Help, ";") {
				t.Errorf("family %s's help of size speaks for another family: %q", f.Name(), p.Help)
			}
		}
	}
	if got := model.List([]string{"a", "b", "c"}, "and"); got != "a, b and c" {
		t.Errorf("List: %q", got)
	}
}
