package cudnn

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestDiskRankings: a stored ranking is read back by the next process (a
// fresh load of the file); a file that does not parse is ignored and
// replaced; "off" keeps nothing on disk.
func TestDiskRankings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "algos.json")
	t.Setenv("VSR_CUDNN_CACHE", path)
	reset := func() {
		disk.once = sync.Once{}
		disk.path, disk.m = "", nil
	}
	reset()
	t.Cleanup(reset)
	perf := []AlgoPerf{{Algo: AlgoImplicitPrecompGemm, Status: StatusSuccess, Time: 1234, Memory: 64, MathType: TensorOpMath}}
	if _, ok := diskLoad("a"); ok {
		t.Fatal("a ranking before any was stored")
	}
	diskStore("a", perf)
	reset()
	got, ok := diskLoad("a")
	if !ok || len(got) != 1 || got[0] != perf[0] {
		t.Fatalf("read back %+v %v, want %+v", got, ok, perf)
	}
	os.WriteFile(path, []byte("{not json"), 0o644)
	reset()
	if _, ok := diskLoad("a"); ok {
		t.Error("a ranking from a damaged file")
	}
	diskStore("b", perf)
	reset()
	if _, ok := diskLoad("b"); !ok {
		t.Error("the damaged file was not replaced")
	}
	t.Setenv("VSR_CUDNN_CACHE", "off")
	reset()
	diskStore("c", perf)
	if _, ok := diskLoad("c"); ok || disk.path != "" {
		t.Error("off: a ranking was kept on disk")
	}
}
