package dl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTree builds a root with toolkit, system and pip directories.
func fakeTree(t *testing.T) (root string, env map[string]string) {
	t.Helper()
	root = t.TempDir()
	dirs := []string{
		"usr/local/cuda-12.4/targets/x86_64-linux/lib",
		"usr/local/cuda-13.0/targets/x86_64-linux/lib",
		"usr/local/cuda-13.0/lib64",
		"usr/lib/x86_64-linux-gnu",
		"usr/lib",
		"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib",
		"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib",
		"venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib",
		"ld1", "ld2",
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env = map[string]string{
		"LD_LIBRARY_PATH": filepath.Join(root, "ld1") + "::" + filepath.Join(root, "ld2"),
		"VIRTUAL_ENV":     filepath.Join(root, "venv"),
		"HOME":            filepath.Join(root, "home"),
	}
	return root, env
}

func testEnv(root string, env map[string]string) searchEnv {
	e := defaultEnv()
	e.root = root
	e.goarch = "amd64"
	e.getenv = func(k string) string { return env[k] }
	return e
}

func dirsOf(places []Place) []string {
	var out []string
	for _, p := range places {
		if p.Dir != "" {
			out = append(out, p.Dir)
		}
	}
	return out
}

func TestSearchOrder(t *testing.T) {
	root, env := fakeTree(t)
	places := searchPlaces(NVRTC, testEnv(root, env))
	if !strings.HasPrefix(places[0].Label, "loader(libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so)") || places[0].Dir != "" {
		t.Fatalf("first place = %+v, want the loader", places[0])
	}
	r := func(p string) string { return filepath.Join(root, p) }
	want := []string{
		r("ld1"), r("ld2"),
		r("usr/local/cuda-13.0/targets/x86_64-linux/lib"),
		r("usr/local/cuda-12.4/targets/x86_64-linux/lib"),
		r("usr/local/cuda-13.0/lib64"),
		r("usr/lib/x86_64-linux-gnu"),
		r("usr/lib"),
		r("venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib"),
		r("opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib"),
		r("opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib"),
	}
	got := dirsOf(places)
	// Directories that do not exist (usr/local/nvidia/lib64, usr/lib64) are
	// still listed: filter to the ones this tree has, keeping order.
	var have []string
	for _, d := range got {
		if _, err := os.Stat(d); err == nil {
			have = append(have, d)
		}
	}
	if strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Fatalf("search dirs:\n%s\nwant:\n%s", strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
	// Patterns that matched nothing are still listed.
	var labels []string
	for _, p := range places {
		labels = append(labels, p.Label)
	}
	all := strings.Join(labels, "|")
	if !strings.Contains(all, filepath.Join(root, "usr/local/lib/python3*/dist-packages/nvidia/*/lib")+" (no match)") {
		t.Errorf("unmatched pip pattern not listed: %s", all)
	}
}

func TestSearchDedupSymlink(t *testing.T) {
	root, env := fakeTree(t)
	if err := os.Symlink(filepath.Join(root, "usr/local/cuda-13.0"), filepath.Join(root, "usr/local/cuda")); err != nil {
		t.Fatal(err)
	}
	env["LD_LIBRARY_PATH"] = filepath.Join(root, "usr/lib")
	got := dirsOf(searchPlaces(CUDA, testEnv(root, env)))
	count := map[string]int{}
	for _, d := range got {
		r, err := filepath.EvalSymlinks(d)
		if err != nil {
			r = d
		}
		count[r]++
		if count[r] > 1 {
			t.Errorf("%s listed twice (as %s)", r, d)
		}
	}
	// The unversioned link is the system default and comes first.
	if len(got) < 2 || got[1] != filepath.Join(root, "usr/local/cuda/targets/x86_64-linux/lib") {
		t.Errorf("want usr/local/cuda first among toolkits, got %v", got)
	}
}

func TestNotFoundMessage(t *testing.T) {
	root, env := fakeTree(t)
	spec := Spec{Name: "libnvrtc", Sonames: []string{"libnvrtc-vsr-test.so.13", "libnvrtc-vsr-test.so"},
		Hint: "install the CUDA toolkit or pip install nvidia-cuda-nvrtc, or set LD_LIBRARY_PATH"}
	places := searchPlaces(spec, testEnv(root, env))
	_, err := open(spec, places, sysDlopen)
	if err == nil {
		t.Fatal("found a library that does not exist")
	}
	msg := err.Error()
	t.Log(msg)
	if strings.Contains(msg, "\n") {
		t.Errorf("message is not one line")
	}
	if !strings.HasPrefix(msg, "libnvrtc not found (searched: loader(libnvrtc-vsr-test.so.13, libnvrtc-vsr-test.so), ") {
		t.Errorf("bad prefix: %s", msg)
	}
	if !strings.HasSuffix(msg, "); install the CUDA toolkit or pip install nvidia-cuda-nvrtc, or set LD_LIBRARY_PATH") {
		t.Errorf("bad suffix: %s", msg)
	}
	for _, p := range places {
		if !strings.Contains(msg, p.Label) {
			t.Errorf("message lacks %q", p.Label)
		}
	}
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is(err, ErrNotFound) = false")
	}
}

func TestOpenFromDirAndBrokenFile(t *testing.T) {
	root, env := fakeTree(t)
	// A file that exists but is no shared object: reported, then skipped.
	bad := filepath.Join(root, "ld1", "libfake.so.1")
	if err := os.WriteFile(bad, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Name: "libfake", Sonames: []string{"libfake.so.1"}}
	_, err := open(spec, searchPlaces(spec, testEnv(root, env)), sysDlopen)
	var nf *NotFoundError
	if !errors.As(err, &nf) || len(nf.Failed) != 1 || !strings.Contains(nf.Failed[0], bad) {
		t.Fatalf("want a NotFoundError naming %s as unloadable, got %v", bad, err)
	}
	// A fake opener sees the place order: the second soname in the first
	// directory that has it.
	good := filepath.Join(root, "ld2", "libfake.so")
	if err := os.WriteFile(good, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Sonames = []string{"libfake.so.2", "libfake.so"}
	var tried []string
	fake := func(p string) (uintptr, error) {
		tried = append(tried, p)
		if p == good {
			return 1, nil
		}
		return 0, errors.New("No such file")
	}
	lib, err := open(spec, searchPlaces(spec, testEnv(root, env)), fake)
	if err != nil || lib.Path != good || lib.Soname != "libfake.so" {
		t.Fatalf("open = %+v, %v; tried %v", lib, err, tried)
	}
	if tried[0] != "libfake.so.2" || tried[1] != "libfake.so" {
		t.Errorf("loader not tried first: %v", tried)
	}
}

func TestBindLibc(t *testing.T) {
	lib, err := Open(Spec{Name: "libc", Sonames: []string{"libc.so.6"}})
	if err != nil {
		t.Skipf("no libc.so.6 on this system: %v", err)
	}
	t.Logf("libc at %s", lib.Path)
	if !strings.HasPrefix(lib.Path, "/") {
		t.Errorf("loader path not resolved: %q", lib.Path)
	}
	var strlen func(s string) uintptr
	if err := lib.Bind(&strlen, "strlen"); err != nil {
		t.Fatal(err)
	}
	if n := strlen("hello"); n != 5 {
		t.Errorf("strlen = %d", n)
	}
	var missing func() int32
	err = lib.Bind(&missing, "vsr_no_such_symbol")
	if !errors.Is(err, ErrMissingSymbol) || !strings.Contains(err.Error(), "vsr_no_such_symbol") {
		t.Errorf("missing symbol: %v", err)
	}
	b := lib.Binder()
	if b.Optional(&missing, "vsr_no_such_symbol") {
		t.Error("Optional bound a missing symbol")
	}
	b.Bind(&strlen, "vsr_no_such_symbol", "strlen")
	if b.Err() != nil {
		t.Errorf("fallback symbol: %v", b.Err())
	}
	b.Bind(&missing, "vsr_no_such_symbol")
	if b.Err() == nil {
		t.Error("Binder kept no error")
	}
}

func TestDefaultPlaces(t *testing.T) {
	for _, p := range SearchPlaces(NVRTC) {
		t.Log(p.Label)
	}
}

func TestGoString(t *testing.T) {
	if s := GoString([]byte("abc\x00def")); s != "abc" {
		t.Errorf("GoString = %q", s)
	}
	b := []byte("xyz\x00")
	if s := CString(&b[0]); s != "xyz" {
		t.Errorf("CString = %q", s)
	}
}

func BenchmarkCall(b *testing.B) {
	lib, err := Open(Spec{Name: "libc", Sonames: []string{"libc.so.6"}})
	if err != nil {
		b.Skip(err)
	}
	var abs func(int32) int32
	if err := lib.Bind(&abs, "abs"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		abs(-3)
	}
}

// TestFindNVIDIA logs where each NVIDIA library is found on this machine.
func TestFindNVIDIA(t *testing.T) {
	found := 0
	for _, s := range []Spec{CUDA, NVML, NVRTC, CUDNN, CUBLASLT, NCCL} {
		l, err := Open(s)
		if err != nil {
			t.Logf("%s: not found", s.Name)
			continue
		}
		found++
		t.Logf("%s: %s (as %s)", s.Name, l.Path, l.Soname)
	}
	if found == 0 {
		t.Skip("no NVIDIA libraries on this machine")
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{91400: "9.14.0", 130100: "13.1.0", 22803: "2.28.3", 120804: "12.8.4"} {
		if got := VersionString(v); got != want {
			t.Errorf("VersionString(%d) = %q, want %q", v, got, want)
		}
	}
}
