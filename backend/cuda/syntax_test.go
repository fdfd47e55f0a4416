package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestKernelSyntax checks the kernel sources with the host C++ compiler
// (g++ -fsyntax-only, with testdata/cuda_stub.h standing in for CUDA's
// built-ins), so that a typo in a .cu file fails here rather than in
// NVRTC on a GPU host, where it would take every kernel down with it. It
// cannot check the inline PTX; the GPU tests do.
func TestKernelSyntax(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ on this host")
	}
	stub, err := filepath.Abs("testdata/cuda_stub.h")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []*Source{{Name: "kernels.cu", Code: kernelSource}, {Name: "convfused.cu", Code: fusedConvSource},
		sliceSource, attentionSource, transformerSource, fp8Source} {
		path := filepath.Join(t.TempDir(), src.Name)
		if err := os.WriteFile(path, []byte(src.Code), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-fsyntax-only", "-x", "c++", "-std=c++17", "-include", stub}, src.Options...) // -D options
		out, err := exec.Command(gxx, append(args, path)...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", src.Name, err, out)
		}
	}
}
