package app_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/serve"
)

// TestRequestParams: every field of serve.Request tagged `vsr:"param"` is
// a parameter of some registered family (its FieldName), and no family's
// parameter has the name of a field of the request's own (untagged), which
// would take its value. target_shape is LightX2V's name for size, which
// CheckRequest merges into size.
func TestRequestParams(t *testing.T) {
	fields := map[string]string{} // family parameters' field: a family that has it
	for _, f := range model.Families() {
		for _, p := range f.Params() {
			fields[p.FieldName()] = f.Name()
		}
	}
	rt := reflect.TypeFor[serve.Request]()
	for i := range rt.NumField() {
		sf := rt.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		tagged := sf.Tag.Get("vsr") == "param"
		switch owner, ok := fields[name]; {
		case tagged && name == "target_shape":
			if fields["size"] == "" {
				t.Errorf("serve.Request's target_shape merges into size, which no registered family has")
			}
		case tagged && !ok:
			t.Errorf("serve.Request's %s is tagged a model parameter, and no registered family has it", name)
		case !tagged && ok:
			t.Errorf("family %s's parameter %s has the name of serve.Request's own field %s", owner, name, sf.Name)
		}
	}
	r := serve.Request{VideoPath: "in.mp4", TargetShape: []int{720, 1280}}
	if err := serve.CheckRequest(&r); err != nil {
		t.Fatal(err)
	}
	if got := r.ModelFields(); len(got) != 1 || got["size"] == nil {
		t.Errorf("ModelFields of a request with a target_shape: %v, want it as size", got)
	}
}
