// Package nvrtc compiles CUDA C++ source to device code at run time with
// NVRTC (libnvrtc), loaded through purego, and caches the results on disk.
//
// NVRTC 13 ships no built-in cuda_fp16.h or cuda_bf16.h: keep kernels free
// of CUDA headers (use unsigned short for bf16 bits and convert by hand),
// or pass --include-path to a toolkit include directory ([IncludeDirs]
// lists the likely ones).
package nvrtc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vsr-dev/vsr/nvidia/dl"
)

// Kind is the form of compiled code.
type Kind string

// Kinds of output.
const (
	// CUBIN is machine code for one GPU architecture (sm_XY).
	CUBIN Kind = "cubin"
	// PTX is virtual-ISA assembly (compute_XY) that the driver compiles
	// when it loads it.
	PTX Kind = "ptx"
)

// Result is an nvrtcResult status code.
type Result int32

var resultNames = map[Result]string{
	0:  "NVRTC_SUCCESS",
	1:  "NVRTC_ERROR_OUT_OF_MEMORY",
	2:  "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
	3:  "NVRTC_ERROR_INVALID_INPUT",
	4:  "NVRTC_ERROR_INVALID_PROGRAM",
	5:  "NVRTC_ERROR_INVALID_OPTION",
	6:  "NVRTC_ERROR_COMPILATION",
	7:  "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
	8:  "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
	9:  "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
	10: "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
	11: "NVRTC_ERROR_INTERNAL_ERROR",
	12: "NVRTC_ERROR_TIME_FILE_WRITE_FAILED",
}

// Name returns the nvrtcResult's enum name.
func (r Result) Name() string {
	if lib.nvrtcGetErrorString != nil {
		if s := lib.nvrtcGetErrorString(int32(r)); s != "" {
			return s
		}
	}
	if n, ok := resultNames[r]; ok {
		return n
	}
	return "NVRTC_ERROR_UNRECOGNIZED"
}

// Error is a failed NVRTC call: the function and the nvrtcResult.
type Error struct {
	Op   string // the NVRTC function
	Code Result // the nvrtcResult
	Name string // its enum name, "NVRTC_ERROR_INVALID_OPTION"
}

// Error formats as "nvrtcCreateProgram: NVRTC_ERROR_OUT_OF_MEMORY (1)".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, int32(e.Code))
}

func check(op string, r int32) error {
	if r == 0 {
		return nil
	}
	return &Error{Op: op, Code: Result(r), Name: Result(r).Name()}
}

// CompileError is a compilation that failed; it carries NVRTC's log.
type CompileError struct {
	// Name is the program's name, Arch the target (sm_90).
	Name, Arch string
	// Err is the failed nvrtcCompileProgram call.
	Err *Error
	// Log is NVRTC's full log.
	Log string
}

// Error returns a one-line summary (the first error of the log and the
// error count), a newline, and the log.
func (e *CompileError) Error() string {
	var first string
	count := 0
	for _, l := range strings.Split(e.Log, "\n") {
		if strings.Contains(l, "error:") {
			if count == 0 {
				first = strings.TrimSpace(l)
			}
			count++
		}
	}
	s := fmt.Sprintf("nvrtc: compiling %s for %s failed: %s (%d)", e.Name, e.Arch, e.Err.Name, int32(e.Err.Code))
	if first != "" {
		s += ": " + first
		if count > 1 {
			s += fmt.Sprintf(" (and %d more)", count-1)
		}
	}
	if log := strings.TrimSpace(e.Log); log != "" {
		s += "\n" + log
	}
	return s
}

// Unwrap returns the NVRTC error.
func (e *CompileError) Unwrap() error { return e.Err }

var lib struct {
	lib  *dl.Library
	once sync.Once
	err  error

	nvrtcVersion              func(major, minor *int32) int32
	nvrtcGetErrorString       func(r int32) string
	nvrtcCreateProgram        func(prog *uintptr, src string, name string, numHeaders int32, headers **byte, includeNames **byte) int32
	nvrtcDestroyProgram       func(prog *uintptr) int32
	nvrtcCompileProgram       func(prog uintptr, numOptions int32, options **byte) int32
	nvrtcGetProgramLogSize    func(prog uintptr, n *uintptr) int32
	nvrtcGetProgramLog        func(prog uintptr, log *byte) int32
	nvrtcGetPTXSize           func(prog uintptr, n *uintptr) int32
	nvrtcGetPTX               func(prog uintptr, ptx *byte) int32
	nvrtcGetCUBINSize         func(prog uintptr, n *uintptr) int32
	nvrtcGetCUBIN             func(prog uintptr, cubin *byte) int32
	nvrtcGetNumSupportedArchs func(n *int32) int32
	nvrtcGetSupportedArchs    func(archs *int32) int32

	major, minor int
	archs        []int // supported sm numbers, e.g. 75, 80, 86, 89, 90, ...
}

// Load opens libnvrtc and binds it; it returns the same result every time.
func Load() error {
	lib.once.Do(func() { lib.err = load() })
	return lib.err
}

func load() error {
	l, err := dl.Load(dl.NVRTC)
	if err != nil {
		return err
	}
	lib.lib = l
	b := l.Binder()
	b.Bind(&lib.nvrtcVersion, "nvrtcVersion")
	b.Bind(&lib.nvrtcGetErrorString, "nvrtcGetErrorString")
	b.Bind(&lib.nvrtcCreateProgram, "nvrtcCreateProgram")
	b.Bind(&lib.nvrtcDestroyProgram, "nvrtcDestroyProgram")
	b.Bind(&lib.nvrtcCompileProgram, "nvrtcCompileProgram")
	b.Bind(&lib.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize")
	b.Bind(&lib.nvrtcGetProgramLog, "nvrtcGetProgramLog")
	b.Bind(&lib.nvrtcGetPTXSize, "nvrtcGetPTXSize")
	b.Bind(&lib.nvrtcGetPTX, "nvrtcGetPTX")
	if err := b.Err(); err != nil {
		return err
	}
	// CUBIN output arrived in NVRTC 11.1; without it, compile to PTX.
	if !b.Optional(&lib.nvrtcGetCUBINSize, "nvrtcGetCUBINSize") || !b.Optional(&lib.nvrtcGetCUBIN, "nvrtcGetCUBIN") {
		lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN = nil, nil
	}
	b.Optional(&lib.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs")
	b.Optional(&lib.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs")

	var ma, mi int32
	if err := check("nvrtcVersion", lib.nvrtcVersion(&ma, &mi)); err != nil {
		return err
	}
	lib.major, lib.minor = int(ma), int(mi)
	if lib.nvrtcGetNumSupportedArchs != nil && lib.nvrtcGetSupportedArchs != nil {
		var n int32
		if lib.nvrtcGetNumSupportedArchs(&n) == 0 && n > 0 && n < 1024 {
			a := make([]int32, n)
			if lib.nvrtcGetSupportedArchs(&a[0]) == 0 {
				for _, v := range a {
					lib.archs = append(lib.archs, int(v))
				}
				slices.Sort(lib.archs)
			}
		}
	}
	return nil
}

// Version returns NVRTC's version, e.g. 13, 0.
func Version() (major, minor int, err error) {
	if err := Load(); err != nil {
		return 0, 0, err
	}
	return lib.major, lib.minor, nil
}

// LibraryPath returns where libnvrtc was loaded from ("" before Load).
func LibraryPath() string {
	if lib.lib == nil {
		return ""
	}
	return lib.lib.Path
}

// SupportedArchs returns the sm numbers NVRTC can compile CUBINs for
// (75, 80, ... 90, ...), or nil if this NVRTC cannot say.
func SupportedArchs() []int {
	if Load() != nil {
		return nil
	}
	return slices.Clone(lib.archs)
}

// Program is CUDA C++ source to compile.
type Program struct {
	// Name is the source's name in messages, e.g. "saxpy.cu".
	Name string
	// Source is the CUDA C++ text; kernels should be extern "C".
	Source string
	// Options are extra NVRTC options (--use_fast_math, --include-path=...).
	// They must not set the architecture; use Arch for that.
	Options []string
	// Arch, if set, overrides the target chosen from the compute
	// capability: "sm_90a" for a CUBIN with Hopper-only instructions,
	// "compute_90" for PTX.
	Arch string
}

// Output is compiled code.
type Output struct {
	// Kind is CUBIN or PTX.
	Kind Kind
	// Arch is the target it was compiled for, "sm_90" or "compute_90".
	Arch string
	// Image is the CUBIN or PTX, ready for cuModuleLoadData.
	Image []byte
	// Log is NVRTC's log (warnings); empty when read from the cache.
	Log string
	// Cached reports whether the output came from the disk cache.
	Cached bool
}

// Compiler compiles programs for one GPU architecture and caches the
// results.
type Compiler struct {
	// Major and Minor are the target compute capability.
	Major, Minor int
	// Cache stores compiled kernels; nil disables caching.
	Cache *Cache
}

// NewCompiler loads NVRTC and returns a compiler for compute capability
// major.minor with the cache in [DefaultCacheDir] (no cache if there is no
// home directory).
func NewCompiler(major, minor int) (*Compiler, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	c := &Compiler{Major: major, Minor: minor}
	if dir, err := DefaultCacheDir(); err == nil {
		c.Cache = &Cache{Dir: dir}
	}
	return c, nil
}

// Target returns the architecture flag value and output kind Compile uses
// for p: sm_XY (CUBIN) when NVRTC can emit CUBINs for the device,
// compute_XY (PTX) when it cannot emit CUBINs at all, and PTX for the
// newest architecture NVRTC knows when the device is newer than that (the
// driver then compiles the PTX for the device).
func (c *Compiler) Target(p Program) (arch string, kind Kind) {
	if p.Arch != "" {
		if strings.HasPrefix(p.Arch, "compute_") {
			return p.Arch, PTX
		}
		return p.Arch, CUBIN
	}
	sm := c.Major*10 + c.Minor
	if len(lib.archs) > 0 && sm > lib.archs[len(lib.archs)-1] {
		return "compute_" + strconv.Itoa(lib.archs[len(lib.archs)-1]), PTX
	}
	if lib.nvrtcGetCUBIN == nil {
		return "compute_" + strconv.Itoa(sm), PTX
	}
	return "sm_" + strconv.Itoa(sm), CUBIN
}

// Compile compiles p, or returns the cached result of an identical earlier
// compilation (same source, name, options, target and NVRTC version). A
// compilation error is a *CompileError with NVRTC's log. A failure to
// write the cache is ignored.
func (c *Compiler) Compile(p Program) (*Output, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if p.Name == "" {
		p.Name = "kernel.cu"
	}
	arch, kind := c.Target(p)
	if c.Cache == nil {
		return compile(p, arch, kind)
	}
	key := CacheKey(p.Source, p.Name, p.Options, arch, fmt.Sprintf("%d.%d", lib.major, lib.minor))
	out, _, err := c.Cache.GetOrCompile(key, func() (*Output, error) { return compile(p, arch, kind) })
	return out, err
}

// compile runs NVRTC once.
func compile(p Program, arch string, kind Kind) (*Output, error) {
	if kind == CUBIN && lib.nvrtcGetCUBIN == nil {
		return nil, fmt.Errorf("nvrtc: %s cannot emit CUBIN (no nvrtcGetCUBIN); use a compute_XY target", LibraryPath())
	}
	var prog uintptr
	if err := check("nvrtcCreateProgram", lib.nvrtcCreateProgram(&prog, p.Source, p.Name, 0, nil, nil)); err != nil {
		return nil, err
	}
	defer lib.nvrtcDestroyProgram(&prog)

	opts := append([]string{"--gpu-architecture=" + arch}, p.Options...)
	// The options array is C-like: NUL-terminated copies and an array of
	// pointers to them, all pinned for the call.
	var pin runtime.Pinner
	defer pin.Unpin()
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		b := append([]byte(o), 0)
		pin.Pin(&b[0])
		ptrs[i] = &b[0]
	}
	pin.Pin(&ptrs[0])
	r := lib.nvrtcCompileProgram(prog, int32(len(ptrs)), &ptrs[0])
	log := programLog(prog)
	if r != 0 {
		e := check("nvrtcCompileProgram", r).(*Error)
		return nil, &CompileError{Name: p.Name, Arch: arch, Err: e, Log: log}
	}
	out := &Output{Kind: kind, Arch: arch, Log: log}
	var n uintptr
	if kind == CUBIN {
		if err := check("nvrtcGetCUBINSize", lib.nvrtcGetCUBINSize(prog, &n)); err != nil {
			return nil, err
		}
		out.Image = make([]byte, n)
		if n > 0 {
			if err := check("nvrtcGetCUBIN", lib.nvrtcGetCUBIN(prog, &out.Image[0])); err != nil {
				return nil, err
			}
		}
	} else {
		if err := check("nvrtcGetPTXSize", lib.nvrtcGetPTXSize(prog, &n)); err != nil {
			return nil, err
		}
		out.Image = make([]byte, n)
		if n > 0 {
			if err := check("nvrtcGetPTX", lib.nvrtcGetPTX(prog, &out.Image[0])); err != nil {
				return nil, err
			}
		}
		// Drop the trailing NUL; cuda.LoadModule adds its own.
		for len(out.Image) > 0 && out.Image[len(out.Image)-1] == 0 {
			out.Image = out.Image[:len(out.Image)-1]
		}
	}
	if len(out.Image) == 0 {
		return nil, errors.New("nvrtc: compilation of " + p.Name + " produced no code")
	}
	return out, nil
}

func programLog(prog uintptr) string {
	var n uintptr
	if lib.nvrtcGetProgramLogSize(prog, &n) != 0 || n <= 1 {
		return ""
	}
	buf := make([]byte, n)
	if lib.nvrtcGetProgramLog(prog, &buf[0]) != 0 {
		return ""
	}
	return strings.TrimRight(dl.GoString(buf), "\n")
}

// IncludeDirs returns existing directories that hold cuda_fp16.h, for
// --include-path when a kernel needs CUDA headers: the toolkit's include
// directories and the pip layout site-packages/nvidia/*/include, in the
// order that libraries are searched.
func IncludeDirs() []string {
	var out []string
	seen := map[string]bool{}
	try := func(d string) {
		if seen[d] {
			return
		}
		seen[d] = true
		if _, err := os.Stat(filepath.Join(d, "cuda_fp16.h")); err == nil {
			out = append(out, d)
		}
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if h := os.Getenv(v); h != "" {
			try(filepath.Join(h, "include"))
		}
	}
	for _, p := range dl.SearchPlaces(dl.NVRTC) {
		if p.Dir == "" {
			continue
		}
		// .../targets/x86_64-linux/lib -> .../targets/x86_64-linux/include,
		// .../lib64 -> .../include, site-packages/nvidia/cu13/lib -> .../include.
		try(filepath.Join(filepath.Dir(p.Dir), "include"))
	}
	m, _ := filepath.Glob("/usr/local/cuda*/include")
	for _, d := range m {
		try(d)
	}
	try("/usr/include")
	return out
}
