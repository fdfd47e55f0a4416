package torch

import (
	"archive/zip"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/internal/pthtest"
)

// TestLoadFixtures: the hand-made files load as the objects they hold.
func TestLoadFixtures(t *testing.T) {
	for _, name := range []string{"handmade-zip.pth", "handmade-legacy.pth"} {
		v, err := Load(fixture(t, name))
		if err != nil {
			t.Fatal(err)
		}
		top := v.(*Dict)
		if it, _ := top.Get("iter"); it != int64(7) {
			t.Errorf("%s: iter = %v", name, it)
		}
		sd, _ := top.Get("params_ema")
		d, ok := sd.(*Dict)
		if !ok || !d.Ordered || d.Len() != 9 {
			t.Fatalf("%s: params_ema is %#v", name, sd)
		}
		nb, _ := d.Get("module.bn.num_batches_tracked")
		if tn, ok := nb.(*Tensor); !ok || tn.DType != I64 || len(tn.Shape) != 0 || !bytes.Equal(tn.Data, []byte{0x39, 0x30, 0, 0, 0, 0, 0, 0}) {
			t.Errorf("%s: num_batches_tracked is %#v", name, nb)
		}
	}
}

// TestZipLayouts: any top folder, deflated records (torch stores them; a
// re-zipped file deflates them) and data.pkl at the top all read.
func TestZipLayouts(t *testing.T) {
	dir := t.TempDir()
	pkl := pthtest.Dict("w", pthtest.Tensor("FloatStorage", "0", 6, 0, []int{2, 3}, []int{3, 1}))
	st := map[string][]byte{"0": pthtest.F32(6)}
	for _, tc := range []struct {
		name, top string
		method    uint16
	}{
		{"stored.pth", "archive", zip.Store},
		{"deflated.pth", "my model v2", zip.Deflate},
	} {
		p := pthtest.WriteZip(t, dir, tc.name, tc.top, pkl, st, tc.method)
		v, err := Load(p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		w, _ := v.(*Dict).Get("w")
		if !bytes.Equal(w.(*Tensor).Data, pthtest.F32(6)) {
			t.Errorf("%s: data % x", tc.name, w.(*Tensor).Data)
		}
	}
}

// TestZipErrors: archives that are not torch.save files, or whose pickle
// and records disagree, give one line naming the file.
func TestZipErrors(t *testing.T) {
	dir := t.TempDir()
	tensor := pthtest.Tensor("FloatStorage", "0", 6, 0, []int{2, 3}, []int{3, 1})
	good := map[string][]byte{"0": pthtest.F32(6)}
	for _, tc := range []struct {
		name     string
		pkl      string
		storages map[string][]byte
		want     string
	}{
		{"missing.pth", tensor, nil, `storage "0" is missing`},
		{"short.pth", tensor, map[string][]byte{"0": pthtest.F32(5)}, "declares 6 elements of F32 but archive/data/0 holds 20 bytes"},
		{"long.pth", tensor, map[string][]byte{"0": pthtest.F32(7)}, "holds 28 bytes"},
		{"half.pth", pthtest.Tensor("HalfStorage", "0", 6, 0, []int{6}, []int{1}), good, "declares 6 elements of F16"},
		{"list.pth", "]", nil, ""},
		{"evil.pth", pthtest.Glob("posix", "system") + pthtest.Uni("x") + "\x85R", good, "archive/data.pkl: refusing posix.system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pthtest.WriteZip(t, dir, tc.name, "archive", tc.pkl, tc.storages, zip.Store)
			_, err := Load(p)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			pthtest.CheckOneLine(t, err, p, tc.want)
		})
	}
	zipOf := func(name string, files map[string]string) string {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for n, c := range files {
			w, _ := zw.Create(n)
			w.Write([]byte(c))
		}
		zw.Close()
		p := filepath.Join(dir, name)
		os.WriteFile(p, buf.Bytes(), 0o644)
		return p
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"nopkl.pth", map[string]string{"a/b.txt": "x"}, "without data.pkl"},
		{"twopkl.pth", map[string]string{"a/data.pkl": "N.", "b/data.pkl": "N."}, "2 data.pkl records"},
		{"deep.pth", map[string]string{"a/b/data.pkl": "N."}, "without data.pkl"},
		{"byteorder.pth", map[string]string{"a/data.pkl": "N.", "a/byteorder": "middle"}, `byteorder is "middle"`},
		{"empty.pth", map[string]string{}, "without data.pkl"},
		{"script.pt", map[string]string{"m/data.pkl": "N.", "m/constants.pkl": "N.", "m/code/m.py": ""}, "a TorchScript archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := zipOf(tc.name, tc.files)
			_, err := Load(p)
			pthtest.CheckOneLine(t, err, p, tc.want)
		})
	}
}

// TestFileErrors: truncated and corrupt files give one line naming the
// file.
func TestFileErrors(t *testing.T) {
	dir := t.TempDir()
	zipBytes, err := os.ReadFile(fixture(t, "handmade-zip.pth"))
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := os.ReadFile(fixture(t, "handmade-legacy.pth"))
	if err != nil {
		t.Fatal(err)
	}
	// the first storage (conv.weight: 6 elements, 0.5 first) counted 7
	miscounted := bytes.Clone(legacy)
	i := bytes.Index(miscounted, []byte("\x06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x3f"))
	if i < 0 {
		t.Fatal("the fixture has no conv.weight storage")
	}
	miscounted[i] = 7
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"zip-truncated.pth", zipBytes[:len(zipBytes)-100], "not a readable zip archive (truncated or corrupt?)"},
		{"zip-head.pth", zipBytes[:40], "not a readable zip archive"},
		{"legacy-truncated.pth", legacy[:len(legacy)-3], "the file ends early (truncated?)"},
		{"legacy-in-pickle.pth", legacy[:300], "ends early"},
		{"legacy-count.pth", miscounted, "holds 7 elements but the pickle declares 6"},
		{"legacy-magic.pth", []byte("\x80\x02K\x05."), "without torch's magic number"},
		{"random.pth", []byte("hello world"), "not a torch.save file"},
		{"empty.pth", nil, "not a torch.save file"},
		{"tar.pth", append(make([]byte, 257), []byte("ustar\x00")...), "tar format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			pthtest.CheckOneLine(t, err, p, tc.want)
		})
	}
	if _, err := Load(filepath.Join(dir, "absent.pth")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: %v", err)
	}
	pthtest.CheckOneLine(t, func() error { _, err := Load(dir); return err }(), dir, "not a regular file")
}
