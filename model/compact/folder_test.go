package compact

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/internal/pthtest"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
	"github.com/vsr-dev/vsr/model/cdavsr"
)

// TestFolderReadsHeadersOnly: the models folder's listing reads headers
// only, allocating a few MB, in moments. A 4 MB .pth whose one record
// inflates to 4 GiB of zeros its tensor views whole is listed with its
// one-line error; one whose 256 MiB of deflated zeros a tensor uses (a
// state dict of no architecture vsr knows) is left out without being
// inflated, as are a CDA-VSR checkpoint, an ncnn .bin and a text file; a
// Compact state dict is listed with its architecture.
func TestFolderReadsHeadersOnly(t *testing.T) {
	dir := t.TempDir()
	zeros := func(name string, numel int) {
		pkl := pthtest.Dict("w", pthtest.Tensor("FloatStorage", "0", numel, 0, []int{numel}, []int{1}))
		pthtest.WriteZeros(t, filepath.Join(dir, name), pkl, "0", 4*int64(numel))
	}
	zeros("bomb.pth", 1<<30)
	zeros("zeros.pth", 1<<26)
	if err := arch.Write(filepath.Join(dir, "2x-tiny.safetensors"), archtest.New(1).Compact(8, 2, 3, 2, true).D, nil); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dir, "cda.safetensors"), cdavsr.Synthesize(2, 1), nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "x4.bin"), []byte("ncnn weights"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a model"), 0o644)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	fm, err := Folder(dir)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 32<<20 || took > 5*time.Second {
		t.Errorf("listing allocated %d MB in %v, want under 32 MB within 5 s", a>>20, took)
	}
	if len(fm) != 2 {
		t.Fatalf("listed %+v, want 2x-tiny.safetensors and bomb.pth", fm)
	}
	tiny, bomb := fm[0], fm[1]
	if bomb.File != "bomb.pth" || bomb.Runs || bomb.Architecture != "" || strings.ContainsAny(bomb.Error, "\r\n") ||
		!strings.Contains(bomb.Error, "bomb.pth") || !strings.Contains(bomb.Error, "its tensors reach 4294967296 bytes (4.0 GiB) of storage data, more than the limit") {
		t.Errorf("bomb.pth listed as %+v", bomb)
	}
	if tiny.File != "2x-tiny.safetensors" || tiny.Architecture != "SRVGGNetCompact" || !tiny.Runs || tiny.Error != "" {
		t.Errorf("2x-tiny.safetensors listed as %+v", tiny)
	}
}
