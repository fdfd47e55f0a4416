// Package dl finds and opens NVIDIA's shared libraries at run time and binds
// their functions through purego, so that vsr stays one CGO_ENABLED=0 binary.
//
// A library is described by a [Spec] (a name, the sonames to accept, newest
// first, and an install hint). [Open] tries the places listed by
// [SearchPlaces] in order and, when the library is nowhere, returns a
// [*NotFoundError] whose message lists every place searched on one line.
// [Load] is Open with the result remembered for the life of the process.
// [Library.Bind] registers a Go function variable for a C symbol and returns
// an error, rather than panicking, when the symbol is missing.
package dl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Spec describes one library to look for.
type Spec struct {
	// Name is the short name used in messages, e.g. "libnvrtc".
	Name string
	// Sonames are the file names to accept, preferred first, e.g.
	// libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so.
	Sonames []string
	// Hint ends the "not found" message and says how to install the library.
	Hint string
}

// The NVIDIA libraries vsr uses.
var (
	// CUDA is the driver API, installed with the NVIDIA driver.
	CUDA = Spec{
		Name:    "libcuda",
		Sonames: []string{"libcuda.so.1", "libcuda.so"},
		Hint:    "install the NVIDIA driver, or set LD_LIBRARY_PATH",
	}
	// NVML is the management library, installed with the NVIDIA driver.
	NVML = Spec{
		Name:    "libnvidia-ml",
		Sonames: []string{"libnvidia-ml.so.1", "libnvidia-ml.so"},
		Hint:    "install the NVIDIA driver, or set LD_LIBRARY_PATH",
	}
	// NVRTC is the run-time CUDA C++ compiler.
	NVRTC = Spec{
		Name:    "libnvrtc",
		Sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"},
		Hint:    "install the CUDA toolkit or pip install nvidia-cuda-nvrtc, or set LD_LIBRARY_PATH",
	}
	// CUDNN is cuDNN 9.
	CUDNN = Spec{
		Name:    "libcudnn",
		Sonames: []string{"libcudnn.so.9", "libcudnn.so"},
		Hint:    "install cuDNN 9 or pip install nvidia-cudnn-cu13, or set LD_LIBRARY_PATH",
	}
	// CUBLASLT is the cuBLAS lightweight (matmul) library.
	CUBLASLT = Spec{
		Name:    "libcublasLt",
		Sonames: []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
		Hint:    "install the CUDA toolkit or pip install nvidia-cublas, or set LD_LIBRARY_PATH",
	}
	// NCCL is the collective communications library.
	NCCL = Spec{
		Name:    "libnccl",
		Sonames: []string{"libnccl.so.2", "libnccl.so"},
		Hint:    "install NCCL or pip install nvidia-nccl-cu13, or set LD_LIBRARY_PATH",
	}
)

// Library is an opened shared library.
type Library struct {
	// Name is the Spec's name.
	Name string
	// Soname is the file name that was opened.
	Soname string
	// Path is where the library was found: a full path, or the soname alone
	// if the loader found it and its path could not be asked for.
	Path string
	// Handle is the dlopen handle.
	Handle uintptr
}

// NotFoundError says that a library was in none of the places searched.
type NotFoundError struct {
	// Name is the library's short name.
	Name string
	// Searched lists the places tried, in order.
	Searched []string
	// Failed lists files that exist but could not be opened, with the reason.
	Failed []string
	// Hint says how to install the library.
	Hint string
}

// Error returns a one-line message:
// "libnvrtc not found (searched: ...); install ..., or set LD_LIBRARY_PATH".
func (e *NotFoundError) Error() string {
	var b strings.Builder
	b.WriteString(e.Name)
	b.WriteString(" not found (searched: ")
	b.WriteString(strings.Join(e.Searched, ", "))
	if len(e.Failed) > 0 {
		b.WriteString("; could not open: ")
		b.WriteString(strings.Join(e.Failed, "; "))
	}
	b.WriteString(")")
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return oneLine(b.String())
}

// ErrNotFound matches every *NotFoundError under errors.Is.
var ErrNotFound = errors.New("library not found")

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// SymbolError says that a library lacks a symbol.
type SymbolError struct {
	// Library is the library's short name and Path where it was loaded from.
	Library, Path string
	// Symbol is the missing symbol (or the alternatives tried, joined by "|").
	Symbol string
}

// Error formats as "libnvrtc (/path/libnvrtc.so.13): symbol nvrtcX not found".
func (e *SymbolError) Error() string {
	return fmt.Sprintf("%s (%s): symbol %s not found", e.Library, e.Path, e.Symbol)
}

// ErrMissingSymbol matches every *SymbolError under errors.Is.
var ErrMissingSymbol = errors.New("symbol not found")

// Is reports whether target is ErrMissingSymbol.
func (e *SymbolError) Is(target error) bool { return target == ErrMissingSymbol }

// dlopener opens one path or soname; tests replace it.
type dlopener func(path string) (uintptr, error)

func sysDlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// Open searches the places of [SearchPlaces] for the spec's sonames and
// opens the first that loads. Within each place the sonames are tried in
// order. Files that exist but fail to load (wrong architecture, a missing
// dependency) are skipped and reported in the error.
func Open(spec Spec) (*Library, error) {
	return open(spec, SearchPlaces(spec), sysDlopen)
}

func open(spec Spec, places []Place, dlopen dlopener) (*Library, error) {
	nf := &NotFoundError{Name: spec.Name, Hint: spec.Hint}
	for _, p := range places {
		nf.Searched = append(nf.Searched, p.Label)
		if p.Dir == "" && strings.HasPrefix(p.Label, "loader(") {
			for _, so := range spec.Sonames {
				h, err := dlopen(so)
				if err == nil {
					return &Library{Name: spec.Name, Soname: so, Path: loadedPath(h, so), Handle: h}, nil
				}
				// "No such file" is the normal not-there case and not worth
				// repeating; any other failure (a broken dependency) is.
				if msg := err.Error(); !strings.Contains(msg, "No such file") {
					nf.Failed = append(nf.Failed, fmt.Sprintf("loader %s: %s", so, msg))
				}
			}
			continue
		}
		if p.Dir == "" {
			continue
		}
		for _, so := range spec.Sonames {
			path := filepath.Join(p.Dir, so)
			if _, err := os.Stat(path); err != nil {
				continue
			}
			h, err := dlopen(path)
			if err != nil {
				nf.Failed = append(nf.Failed, fmt.Sprintf("%s: %v", path, err))
				continue
			}
			return &Library{Name: spec.Name, Soname: so, Path: path, Handle: h}, nil
		}
	}
	return nil, nf
}

var (
	loadMu  sync.Mutex
	loaded  = map[string]*Library{}
	loadErr = map[string]error{}
)

// Load is [Open] with the outcome, library or error, remembered per spec
// name for the life of the process. It is safe for concurrent use.
func Load(spec Spec) (*Library, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	if l, ok := loaded[spec.Name]; ok {
		return l, nil
	}
	if err, ok := loadErr[spec.Name]; ok {
		return nil, err
	}
	l, err := Open(spec)
	if err != nil {
		loadErr[spec.Name] = err
		return nil, err
	}
	loaded[spec.Name] = l
	return l, nil
}

// Sym returns the address of symbol name, or a *SymbolError.
func (l *Library) Sym(name string) (uintptr, error) {
	p, err := purego.Dlsym(l.Handle, name)
	if err != nil || p == 0 {
		return 0, &SymbolError{Library: l.Name, Path: l.Path, Symbol: name}
	}
	return p, nil
}

// Has reports whether the library exports name.
func (l *Library) Has(name string) bool {
	_, err := l.Sym(name)
	return err == nil
}

// Bind sets *fptr, a pointer to a Go function variable whose signature
// mirrors the C function (see purego.RegisterFunc for the type mapping), to
// call symbol name. A missing symbol is returned as a *SymbolError.
func (l *Library) Bind(fptr any, name string) error {
	p, err := l.Sym(name)
	if err != nil {
		return err
	}
	return register(fptr, p, name)
}

// BindFirst binds *fptr to the first of names that the library exports and
// returns that name; alternatives let a caller prefer a versioned symbol
// (cuEventElapsedTime_v2) and fall back to an older one.
func (l *Library) BindFirst(fptr any, names ...string) (string, error) {
	for _, n := range names {
		if p, err := l.Sym(n); err == nil {
			return n, register(fptr, p, n)
		}
	}
	return "", &SymbolError{Library: l.Name, Path: l.Path, Symbol: strings.Join(names, "|")}
}

func register(fptr any, p uintptr, name string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("dl: binding %s: %v", name, r)
		}
	}()
	purego.RegisterFunc(fptr, p)
	return nil
}

// Binder binds many symbols and keeps the first error, so a package can
// write a list of Bind calls and check once.
type Binder struct {
	lib *Library
	err error
}

// Binder returns a Binder for l.
func (l *Library) Binder() *Binder { return &Binder{lib: l} }

// Bind binds a required symbol; after the first failure it does nothing.
func (b *Binder) Bind(fptr any, names ...string) {
	if b.err != nil {
		return
	}
	if _, err := b.lib.BindFirst(fptr, names...); err != nil {
		b.err = err
	}
}

// Optional binds a symbol that may be absent and reports whether it was
// bound; an absent symbol is not an error.
func (b *Binder) Optional(fptr any, names ...string) bool {
	_, err := b.lib.BindFirst(fptr, names...)
	return err == nil
}

// Err returns the first error of Bind.
func (b *Binder) Err() error { return b.err }

// loadedPath asks the loader where a library opened by soname came from
// (dlinfo RTLD_DI_LINKMAP); it returns so when that is not possible.
func loadedPath(handle uintptr, so string) string {
	dlinfoOnce.Do(bindDlinfo)
	if dlinfo == nil {
		return so
	}
	var lm *linkMap
	if dlinfo(handle, rtldDILinkmap, unsafe.Pointer(&lm)) != 0 || lm == nil || lm.name == nil {
		return so
	}
	if s := cString(lm.name); s != "" {
		return s
	}
	return so
}

// linkMap is the head of glibc's struct link_map.
type linkMap struct {
	addr uintptr
	name *byte
}

const rtldDILinkmap = 2

var (
	dlinfoOnce sync.Once
	dlinfo     func(handle uintptr, request int32, arg unsafe.Pointer) int32
)

func bindDlinfo() {
	for _, libc := range []string{"libc.so.6", "libdl.so.2"} {
		h, err := purego.Dlopen(libc, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			continue
		}
		p, err := purego.Dlsym(h, "dlinfo")
		if err != nil || p == 0 {
			continue
		}
		var f func(uintptr, int32, unsafe.Pointer) int32
		if register(&f, p, "dlinfo") == nil {
			dlinfo = f
			return
		}
	}
}

// CString copies the NUL-terminated C string at p into a Go string.
func CString(p *byte) string { return cString(p) }

func cString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// GoString returns the bytes of b up to its first NUL as a string; it reads
// the fixed-size char buffers that C functions fill in.
func GoString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(strings.NewReplacer("\r", " ", "\n", " ").Replace(s)), " ")
}

// VersionString formats a library version encoded as major*10000 +
// minor*100 + patch (cuDNN 9, cuBLASLt, NCCL 2.9+) as "major.minor.patch".
func VersionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}
