package statedict

import (
	"archive/zip"
	"slices"
	"testing"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/internal/pthtest"
)

// w is a 2-element float tensor pickle with storage key k.
func w(k string) string { return pthtest.Tensor("FloatStorage", k, 2, 0, []int{2}, []int{1}) }

// TestContainers: the state dict is found under spandrel's keys, in
// spandrel's order, and its common prefixes are removed as spandrel does.
func TestContainers(t *testing.T) {
	dir := t.TempDir()
	st := map[string][]byte{"0": pthtest.F32(2), "1": pthtest.F32(2)}
	for _, tc := range []struct {
		name, pkl string
		keys      []string
	}{
		{"plain", pthtest.Dict("a.weight", w("0"), "b.weight", w("1")), []string{"a.weight", "b.weight"}},
		{"state_dict first", pthtest.Dict("params_ema", pthtest.Dict("x", w("0")), "state_dict", pthtest.Dict("y", w("1"))), []string{"y"}},
		{"model_state_dict first", pthtest.Dict("state_dict", pthtest.Dict("x", w("0")), "model_state_dict", pthtest.Dict("y", w("1"))), []string{"y"}},
		{"params_ema before params", pthtest.Dict("params", pthtest.Dict("x", w("0")), "params_ema", pthtest.Dict("y", w("1"))), []string{"y"}},
		{"params-ema", pthtest.Dict("params-ema", pthtest.Dict("y", w("1"))), []string{"y"}},
		{"model not a dict: net", pthtest.Dict("model", pthtest.Uni("SRVGG"), "net", pthtest.Dict("y", w("1"))), []string{"y"}},
		{"OrderedDict counts as dict", pthtest.Dict("params", pthtest.OrderedDict+"("+pthtest.Uni("y")+w("1")+"u"), []string{"y"}},
		{"unwrapped once only", pthtest.Dict("params", pthtest.Dict("params", pthtest.Dict("y", w("1")), "z", w("0"))), []string{"z"}},
		{"module.", pthtest.Dict("module.a", w("0"), "module.b", w("1")), []string{"a", "b"}},
		{"module. then netG.", pthtest.Dict("module.netG.a", w("0"), "module.netG.b", w("1")), []string{"a", "b"}},
		{"netG. then module. is not removed", pthtest.Dict("netG.module.a", w("0")), []string{"module.a"}},
		{"prefix not on every key", pthtest.Dict("module.a", w("0"), "b", w("1")), []string{"module.a", "b"}},
		{"prefix not on a non-tensor key", pthtest.Dict("module.a", w("0"), "epoch", "K\x05"), []string{"module.a"}},
		{"prefix on non-tensor keys too", pthtest.Dict("module.a", w("0"), "module.epoch", "K\x05"), []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pthtest.WriteZip(t, dir, "f.pth", "archive", tc.pkl, st, zip.Store)
			d, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.Keys, tc.keys) {
				t.Errorf("keys %q, want %q", d.Keys, tc.keys)
			}
		})
	}
}

// TestNotStateDicts: files whose object is not a state dict of float
// tensors give one line naming the file.
func TestNotStateDicts(t *testing.T) {
	dir := t.TempDir()
	i64 := map[string][]byte{"0": make([]byte, 8)}
	for _, tc := range []struct{ name, pkl, want string }{
		{"list", "]", "holds a list, not a state dict"},
		{"tensor", w("0"), "holds a tensor, not a state dict"},
		{"int key", "}K\x01" + w("0") + "s", "a key of the state dict is a int (1), not a str"},
		{"no float tensors", pthtest.Dict("n", pthtest.Tensor("LongStorage", "0", 1, 0, nil, nil)), "holds no F32, F16 or BF16 tensors"},
		{"empty", "}", "holds no F32"},
		{"refused", pthtest.Dict("a", pthtest.Glob("numpy", "dtype")), "refusing numpy.dtype"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := map[string][]byte{"0": pthtest.F32(2)}
			if tc.name == "no float tensors" {
				st = i64
			}
			p := pthtest.WriteZip(t, dir, tc.name+".pth", "archive", tc.pkl, st, zip.Store)
			_, err := Open(p)
			pthtest.CheckOneLine(t, err, p, tc.want)
		})
	}
}

// TestSafetensors: a safetensors file keeps its float tensors in file
// order and its metadata, skips the others and loses its module. prefix.
func TestSafetensors(t *testing.T) {
	p := t.TempDir() + "/m.safetensors"
	err := safetensors.Write(p, []safetensors.WriteTensor{
		{Name: "module.b", DType: safetensors.F16, Shape: []int{1}, Data: []byte{0, 0x3c}},
		{Name: "module.a", DType: safetensors.F32, Shape: []int{2}, Data: pthtest.F32(2)},
		{Name: "module.n", DType: safetensors.I64, Shape: []int{}, Data: make([]byte, 8)},
	}, map[string]string{"arch": "test"})
	if err != nil {
		t.Fatal(err)
	}
	d, skipped, err := OpenWithSkipped(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ia, _ := f.Info("module.a")
	ib, _ := f.Info("module.b")
	order := []string{"a", "b"} // the file's data order, whatever Write chose
	if ib.Begin < ia.Begin {
		order = []string{"b", "a"}
	}
	if !slices.Equal(skipped, []Skipped{{"n", "a I64 tensor"}}) || d.Metadata["arch"] != "test" {
		t.Errorf("skipped %v, metadata %v", skipped, d.Metadata)
	}
	if a := d.Get("a"); a == nil || a.DType != F32 || !slices.Equal(a.Shape, []int{2}) || !slices.Equal(a.Data, pthtest.F32(2)) {
		t.Errorf("a = %+v", a)
	}
	if b := d.Get("b"); b == nil || b.DType != F16 {
		t.Errorf("b = %+v", b)
	}
	if !slices.Equal(d.Keys, order) {
		t.Errorf("keys %q, want the file's order %q", d.Keys, order)
	}
}
