package nvrtc

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestCacheKey(t *testing.T) {
	base := CacheKey("src", "a.cu", []string{"-O3", "--use_fast_math"}, "sm_90", "13.0")
	if base != CacheKey("src", "a.cu", []string{"-O3", "--use_fast_math"}, "sm_90", "13.0") {
		t.Fatal("key is not deterministic")
	}
	if len(base) != 64 {
		t.Fatalf("key %q is not hex sha256", base)
	}
	others := []string{
		CacheKey("src2", "a.cu", []string{"-O3", "--use_fast_math"}, "sm_90", "13.0"),
		CacheKey("src", "b.cu", []string{"-O3", "--use_fast_math"}, "sm_90", "13.0"),
		CacheKey("src", "a.cu", []string{"--use_fast_math", "-O3"}, "sm_90", "13.0"),
		CacheKey("src", "a.cu", []string{"-O3"}, "sm_90", "13.0"),
		CacheKey("src", "a.cu", []string{"-O3", "--use_fast_math"}, "sm_89", "13.0"),
		CacheKey("src", "a.cu", []string{"-O3", "--use_fast_math"}, "compute_90", "13.0"),
		CacheKey("src", "a.cu", []string{"-O3", "--use_fast_math"}, "sm_90", "12.8"),
		// Field boundaries matter: moving bytes between fields changes the key.
		CacheKey("srca", ".cu", []string{"-O3", "--use_fast_math"}, "sm_90", "13.0"),
		CacheKey("src", "a.cu", []string{"-O3--use_fast_math"}, "sm_90", "13.0"),
	}
	seen := map[string]int{base: -1}
	for i, k := range others {
		if j, dup := seen[k]; dup {
			t.Errorf("variant %d has the same key as %d", i, j)
		}
		seen[k] = i
	}
}

func TestCacheDefaultDir(t *testing.T) {
	x := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", x)
	if d, _ := DefaultCacheDir(); d != filepath.Join(x, "vsr", "kernels") {
		t.Errorf("with XDG_CACHE_HOME: %s", d)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	h := t.TempDir()
	t.Setenv("HOME", h)
	if d, _ := DefaultCacheDir(); d != filepath.Join(h, ".cache", "vsr", "kernels") {
		t.Errorf("without XDG_CACHE_HOME: %s", d)
	}
}

// fakeCompiler counts compilations and returns a fixed image.
type fakeCompiler struct {
	mu    sync.Mutex
	calls int
	img   []byte
}

func (f *fakeCompiler) compile() (*Output, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return &Output{Kind: CUBIN, Arch: "sm_90", Image: bytes.Clone(f.img), Log: "ok"}, nil
}

func TestCacheHitAndAtomicWrite(t *testing.T) {
	c := &Cache{Dir: filepath.Join(t.TempDir(), "vsr", "kernels")} // created on first Put
	fc := &fakeCompiler{img: bytes.Repeat([]byte("\x7fELF cubin"), 1000)}
	key := CacheKey("src", "k.cu", nil, "sm_90", "13.0")

	o, putErr, err := c.GetOrCompile(key, fc.compile)
	if err != nil || putErr != nil {
		t.Fatal(err, putErr)
	}
	if o.Cached || fc.calls != 1 {
		t.Fatalf("first call: cached=%v calls=%d", o.Cached, fc.calls)
	}
	o2, _, err := c.GetOrCompile(key, fc.compile)
	if err != nil {
		t.Fatal(err)
	}
	if !o2.Cached || fc.calls != 1 || !bytes.Equal(o2.Image, fc.img) || o2.Kind != CUBIN || o2.Arch != "sm_90" {
		t.Fatalf("second call: cached=%v calls=%d kind=%s arch=%s", o2.Cached, fc.calls, o2.Kind, o2.Arch)
	}
	// Nothing but the entry is left in the directory.
	ents, _ := os.ReadDir(c.Dir)
	if len(ents) != 1 || ents[0].Name() != key+".bin" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("cache dir holds %v", names)
	}
	if c.Entries() != 1 {
		t.Errorf("Entries = %d", c.Entries())
	}
}

func TestCacheCorruptEntry(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	fc := &fakeCompiler{img: []byte("the real cubin")}
	key := CacheKey("src", "k.cu", nil, "sm_90", "13.0")
	if _, _, err := c.GetOrCompile(key, fc.compile); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(c.path(key))
	if err != nil {
		t.Fatal(err)
	}
	damage := map[string][]byte{
		"garbage":     []byte("not a cache entry"),
		"empty":       {},
		"truncated":   good[:len(good)-3],
		"flipped":     func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 1; return b }(),
		"header only": good[:len(cacheMagic)+3],
		"bad kind":    func() []byte { b := bytes.Clone(good); b[len(cacheMagic)+1] = 'x'; return b }(),
		"longer":      append(bytes.Clone(good), 0),
	}
	for name, data := range damage {
		if err := os.WriteFile(c.path(key), data, 0o644); err != nil {
			t.Fatal(err)
		}
		before := fc.calls
		o, _, err := c.GetOrCompile(key, fc.compile)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o.Cached || fc.calls != before+1 || string(o.Image) != "the real cubin" {
			t.Errorf("%s: damaged entry not recompiled (cached=%v, calls %d->%d)", name, o.Cached, before, fc.calls)
		}
		// The entry was rewritten and is good again.
		if o, ok := c.Get(key); !ok || string(o.Image) != "the real cubin" {
			t.Errorf("%s: entry not repaired", name)
		}
	}
}

func TestCacheConcurrentPut(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	key := CacheKey("src", "k.cu", nil, "sm_90", "13.0")
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			img := bytes.Repeat([]byte{byte(i)}, 1<<16)
			if err := c.Put(key, &Output{Kind: PTX, Arch: "compute_90", Image: img}); err != nil {
				t.Error(err)
			}
			if o, ok := c.Get(key); !ok || len(o.Image) != 1<<16 {
				t.Error("reader saw a partial entry")
			}
		}(i)
	}
	wg.Wait()
	o, ok := c.Get(key)
	if !ok || o.Kind != PTX || bytes.Count(o.Image, o.Image[:1]) != 1<<16 {
		t.Fatal("final entry is not one writer's whole output")
	}
	if c.Entries() != 1 {
		t.Errorf("%d entries", c.Entries())
	}
}

func TestCacheCompileErrorNotStored(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	boom := errors.New("boom")
	_, _, err := c.GetOrCompile("k", func() (*Output, error) { return nil, boom })
	if !errors.Is(err, boom) || c.Entries() != 0 {
		t.Fatalf("err=%v entries=%d", err, c.Entries())
	}
}

func TestCachePutFailure(t *testing.T) {
	// A cache directory that cannot be created: compile output still
	// comes back, with the store error beside it.
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	c := &Cache{Dir: filepath.Join(f, "sub")}
	fc := &fakeCompiler{img: []byte("x")}
	o, putErr, err := c.GetOrCompile("k", fc.compile)
	if err != nil || o == nil || putErr == nil {
		t.Fatalf("o=%v putErr=%v err=%v", o, putErr, err)
	}
}

func TestCompileErrorMessage(t *testing.T) {
	e := &CompileError{Name: "bad.cu", Arch: "sm_90", Err: &Error{Op: "nvrtcCompileProgram", Code: 6, Name: "NVRTC_ERROR_COMPILATION"},
		Log: "bad.cu(3): error: identifier \"q\" is undefined\nbad.cu(4): error: expected a \";\"\n\n2 errors detected in the compilation of \"bad.cu\"."}
	msg := e.Error()
	first, rest, _ := strings.Cut(msg, "\n")
	want := `nvrtc: compiling bad.cu for sm_90 failed: NVRTC_ERROR_COMPILATION (6): bad.cu(3): error: identifier "q" is undefined (and 1 more)`
	if first != want {
		t.Errorf("summary:\n%s\nwant:\n%s", first, want)
	}
	if !strings.HasPrefix(rest, "bad.cu(3)") {
		t.Errorf("log not after the summary: %q", rest)
	}
}
