package main

import (
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/internal/pthtest"
)

// TestModelsZipBomb: vsr models FILE tells a state dict's architecture
// from its header alone. Of a 4 MB .pth whose record inflates to 4 GiB of
// zeros (2^30 floats its tensor views) it says in one line why it is
// refused; of 256 MiB of deflated zeros a tensor of no known architecture
// views, that vsr knows no such architecture; vsr models lists the first
// as unreadable. None of it inflates the zeros.
func TestModelsZipBomb(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("VSR_MODELS", dir)
	zeros := func(name string, numel int) string {
		p := filepath.Join(dir, name)
		pkl := pthtest.Dict("w", pthtest.Tensor("FloatStorage", "0", numel, 0, []int{numel}, []int{1}))
		pthtest.WriteZeros(t, p, pkl, "0", 4*int64(numel))
		return p
	}
	bomb, unknown := zeros("bomb.pth", 1<<30), zeros("zeros.pth", 1<<26)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, errBomb := vsr(t, "models", bomb)
	_, errUnknown := vsr(t, "models", unknown)
	list, errList := vsr(t, "models")
	runtime.ReadMemStats(&after)
	pthtest.CheckOneLine(t, errBomb, bomb, "its tensors reach 4294967296 bytes (4.0 GiB) of storage data, more than the limit of 2147483648 bytes (2.0 GiB) for one file")
	if errUnknown == nil || !strings.Contains(errUnknown.Error(), "no architecture vsr knows (keys w)") {
		t.Errorf("vsr models %s: %v, want no architecture vsr knows", unknown, errUnknown)
	}
	if errList != nil || !regexp.MustCompile(`\nbomb\.pth +unreadable model file in the models folder: torch: .*bomb\.pth.*: its tensors reach`).MatchString(list) || strings.Contains(list, "zeros.pth") {
		t.Errorf("vsr models: %v\n%s", errList, list)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 64<<20 {
		t.Errorf("the three commands allocated %d MB, want under 64", a>>20)
	}
}
