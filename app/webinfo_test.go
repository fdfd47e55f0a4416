package app

import (
	"testing"

	"github.com/vsr-dev/vsr/model"
)

// TestFamilyParams: every registered family is listed with the
// parameters a request may set, and none of the command line's own.
func TestFamilyParams(t *testing.T) {
	fams := familyParams()
	if len(fams) != len(model.Families()) {
		t.Fatalf("%d families listed, %d registered", len(fams), len(model.Families()))
	}
	for i, f := range model.Families() {
		got := fams[i]
		if got["name"] != f.Name() {
			t.Errorf("family %d: %v, want %s", i, got["name"], f.Name())
		}
		params := got["params"].([]map[string]any)
		n := 0
		for _, p := range f.Params() {
			if p.Local {
				continue
			}
			if n >= len(params) {
				t.Errorf("%s: parameter %s not listed", f.Name(), p.FieldName())
				break
			}
			if params[n]["field"] != p.FieldName() || params[n]["kind"] == "" || params[n]["kind"] == nil {
				t.Errorf("%s: parameter %d is %v, want %s", f.Name(), n, params[n], p.FieldName())
			}
			n++
		}
		if n != len(params) {
			t.Errorf("%s: %d parameters listed, want %d", f.Name(), len(params), n)
		}
	}
}

// TestDeviceStatsCPU: the CPU is listed without figures.
func TestDeviceStatsCPU(t *testing.T) {
	devs, err := OpenDevices("cpu", StorageType("f16"))
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{devs: devs}
	defer r.Close()
	got := r.DeviceStats()
	if len(got) != 1 || got[0].Name != "cpu" || got[0].Kind != "cpu" || got[0].MemoryTotal != 0 || got[0].Utilization != nil {
		t.Errorf("DeviceStats on the CPU: %+v", got)
	}
}
