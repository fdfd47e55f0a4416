package torch

import (
	"archive/zip"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

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

// allocated is the bytes the heap allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestZipBomb: a 4 MB zip whose one record inflates to 4 GiB of zeros,
// declared as 2^30 floats, is refused at once with one line, having
// allocated a few MB at most: when its tensor views the whole storage
// (more tensor data than one file may hold) and when it views 16 floats
// (a deflated record holding more than its tensors use).
func TestZipBomb(t *testing.T) {
	dir := t.TempDir()
	const numel = 1 << 30
	for _, tc := range []struct {
		name string
		size int
		want string
	}{
		{"all.pth", numel, "its tensors reach 4294967296 bytes (4.0 GiB) of storage data, more than the limit of 2147483648 bytes (2.0 GiB) for one file"},
		{"few.pth", 16, `record "archive/data/0" holds 4294967296 bytes, more than its tensors use (64 bytes): the file is damaged or crafted`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			pthtest.WriteZeros(t, p, pthtest.Dict("w", pthtest.Tensor("FloatStorage", "0", numel, 0, []int{tc.size}, []int{1})), "0", 4*numel)
			if st, err := os.Stat(p); err != nil || st.Size() > 8<<20 {
				t.Fatalf("the bomb: %v, %d bytes", err, st.Size())
			}
			var err error
			start := time.Now()
			a := allocated(func() { _, err = Load(p) })
			if d := time.Since(start); a > 32<<20 || d > 5*time.Second {
				t.Errorf("reading it allocated %d MB in %v, want under 32 MB within 5 s", a>>20, d)
			}
			pthtest.CheckOneLine(t, err, p, tc.want)
		})
	}
}

// TestZipOptions: Options.Header reads shapes and no storage, MaxBytes
// bounds a file's tensor data, and a storage larger than its tensors'
// views is read only as far as they reach: stored, it reads; deflated,
// it is refused, never inflated.
func TestZipOptions(t *testing.T) {
	dir := t.TempDir()
	const numel = 1 << 21 // 8 MiB of zeros, deflated to 8 kB
	p := filepath.Join(dir, "zeros.pth")
	pthtest.WriteZeros(t, p, pthtest.Dict("w", pthtest.Tensor("FloatStorage", "0", numel, 0, []int{numel}, []int{1})), "0", 4*numel)
	var v any
	var err error
	if a := allocated(func() { v, err = Load(p) }); err != nil || a > 12<<20 {
		t.Fatalf("whole: %v, allocated %d MB, want under 12", err, a>>20)
	}
	w, _ := v.(*Dict).Get("w")
	if d := w.(*Tensor).Data; len(d) != 4*numel || !bytes.Equal(d, make([]byte, 4*numel)) {
		t.Errorf("whole: %d bytes, want %d zeros", len(d), 4*numel)
	}
	if a := allocated(func() { v, err = Options{Header: true}.Load(p) }); err != nil || a > 1<<20 {
		t.Fatalf("header: %v, allocated %d kB, want under 1 MB", err, a>>10)
	}
	w, _ = v.(*Dict).Get("w")
	if tn := w.(*Tensor); tn.Data != nil || !slices.Equal(tn.Shape, []int{numel}) || tn.DType != F32 {
		t.Errorf("header: %+v", tn)
	}
	for _, o := range []Options{{MaxBytes: 4 << 20}, {MaxBytes: 4 << 20, Header: true}} {
		_, err := o.Load(p)
		pthtest.CheckOneLine(t, err, p, "its tensors reach 8388608 bytes (8.0 MiB) of storage data, more than the limit of 4194304 bytes (4.0 MiB)")
	}
	part := pthtest.Dict("w", pthtest.Tensor("FloatStorage", "0", 12, 2, []int{3}, []int{1}))
	st := map[string][]byte{"0": pthtest.F32(12)}
	stored := pthtest.WriteZip(t, dir, "stored.pth", "archive", part, st, zip.Store)
	if v, err := Load(stored); err != nil {
		t.Error(err)
	} else if w, _ := v.(*Dict).Get("w"); !bytes.Equal(w.(*Tensor).Data, pthtest.F32(5)[8:]) {
		t.Errorf("stored part: % x", w.(*Tensor).Data)
	}
	deflated := pthtest.WriteZip(t, dir, "deflated.pth", "archive", part, st, zip.Deflate)
	for _, o := range []Options{{}, {Header: true}} {
		_, err := o.Load(deflated)
		pthtest.CheckOneLine(t, err, deflated, `record "archive/data/0" holds 48 bytes, more than its tensors use (20 bytes)`)
	}
}
