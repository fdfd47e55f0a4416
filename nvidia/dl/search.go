package dl

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// Place is one location the search tries, in order.
type Place struct {
	// Dir is the directory to look in; empty for the dynamic loader's own
	// search (dlopen of the plain soname: LD_LIBRARY_PATH, the ld.so cache
	// and the default system directories).
	Dir string
	// Label is how the place is written in a "not found" message: the
	// directory itself, "loader(...)" for the loader, or a glob pattern
	// followed by "(no match)" when a pattern matched no directory.
	Label string
}

// searchEnv is what building the search list reads; tests replace it.
type searchEnv struct {
	getenv func(string) string
	glob   func(string) ([]string, error)
	isDir  func(string) bool
	// root is prepended to the fixed system paths (/usr/..., /opt/...).
	root   string
	goarch string
}

func defaultEnv() searchEnv {
	return searchEnv{
		getenv: os.Getenv,
		glob:   filepath.Glob,
		isDir: func(p string) bool {
			fi, err := os.Stat(p)
			return err == nil && fi.IsDir()
		},
		goarch: runtime.GOARCH,
	}
}

// SearchPlaces returns, in order, the places Open tries for spec:
//
//  1. the dynamic loader with the plain soname (dlopen("libcuda.so.1"));
//  2. each directory of LD_LIBRARY_PATH;
//  3. $CUDA_HOME and $CUDA_PATH (targets/<arch>-linux/lib, lib64), then
//     /usr/local/cuda*/targets/<arch>-linux/lib and /usr/local/cuda*/lib64,
//     newest toolkit first, and /usr/local/nvidia/lib64;
//  4. /usr/lib/<arch>-linux-gnu, /usr/lib, /usr/lib64 and $CONDA_PREFIX/lib;
//  5. the pip wheel layout site-packages/nvidia/*/lib under $VIRTUAL_ENV,
//     $CONDA_PREFIX, /opt/*/.venv, /opt/*, ~/.local, /usr/local/lib and
//     /usr/lib python3 site and dist directories.
//
// Directories are listed once (after resolving symbolic links); glob
// patterns that match nothing are kept as labels so that a "not found"
// message shows they were tried.
func SearchPlaces(spec Spec) []Place {
	return searchPlaces(spec, defaultEnv())
}

func searchPlaces(spec Spec, e searchEnv) []Place {
	var out []Place
	seen := map[string]bool{}
	add := func(dir string) {
		if dir == "" {
			return
		}
		dir = filepath.Clean(dir)
		key := dir
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			key = r
		}
		if seen[key] || seen[dir] {
			return
		}
		seen[key], seen[dir] = true, true
		out = append(out, Place{Dir: dir, Label: dir})
	}
	// addGlob expands pattern into existing directories (sorted by
	// sortDirs) or records the pattern as tried-without-match.
	addGlob := func(pattern string, sortDirs func([]string)) {
		m, _ := e.glob(pattern)
		var dirs []string
		for _, d := range m {
			if e.isDir(d) {
				dirs = append(dirs, d)
			}
		}
		if len(dirs) == 0 {
			if !seen["pattern:"+pattern] {
				seen["pattern:"+pattern] = true
				out = append(out, Place{Label: pattern + " (no match)"})
			}
			return
		}
		if sortDirs != nil {
			sortDirs(dirs)
		}
		for _, d := range dirs {
			add(d)
		}
	}
	sys := func(p string) string { return filepath.Join(e.root, p) }
	target, triplet := archNames(e.goarch)

	// 1. The loader.
	out = append(out, Place{Label: "loader(" + strings.Join(spec.Sonames, ", ") + ")"})

	// 2. LD_LIBRARY_PATH.
	for _, d := range filepath.SplitList(e.getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			add(d)
		}
	}

	// 3. CUDA toolkits.
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if h := e.getenv(v); h != "" {
			add(filepath.Join(h, "targets", target, "lib"))
			add(filepath.Join(h, "lib64"))
		}
	}
	for _, t := range []string{target, altTarget(e.goarch)} {
		if t == "" {
			continue
		}
		addGlob(sys("/usr/local/cuda*/targets/"+t+"/lib"), sortToolkits)
	}
	addGlob(sys("/usr/local/cuda*/lib64"), sortToolkits)
	add(sys("/usr/local/nvidia/lib64"))

	// 4. System directories.
	if triplet != "" {
		add(sys("/usr/lib/" + triplet))
	}
	add(sys("/usr/lib"))
	add(sys("/usr/lib64"))
	if c := e.getenv("CONDA_PREFIX"); c != "" {
		add(filepath.Join(c, "lib"))
	}

	// 5. pip wheels: site-packages/nvidia/*/lib.
	for _, sp := range sitePackagePatterns(e) {
		addGlob(filepath.Join(sp, "nvidia", "*", "lib"), nil)
	}
	return out
}

// sitePackagePatterns lists glob patterns of Python site directories, most
// specific (the active virtual environment) first.
func sitePackagePatterns(e searchEnv) []string {
	var pats []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := e.getenv(v); p != "" {
			pats = append(pats, filepath.Join(p, "lib", "python3*", "site-packages"))
		}
	}
	sys := func(p string) string { return filepath.Join(e.root, p) }
	pats = append(pats,
		sys("/opt/*/.venv/lib/python3*/site-packages"),
		sys("/opt/*/lib/python3*/site-packages"),
	)
	if h := e.getenv("HOME"); h != "" {
		pats = append(pats, filepath.Join(h, ".local", "lib", "python3*", "site-packages"))
	}
	pats = append(pats,
		sys("/usr/local/lib/python3*/dist-packages"),
		sys("/usr/local/lib/python3*/site-packages"),
		sys("/usr/lib/python3/dist-packages"),
		sys("/usr/lib/python3*/site-packages"),
	)
	return pats
}

// archNames returns the CUDA toolkit target directory name and the Debian
// multiarch triplet for a GOARCH.
func archNames(goarch string) (target, triplet string) {
	switch goarch {
	case "arm64":
		return "sbsa-linux", "aarch64-linux-gnu"
	case "amd64":
		return "x86_64-linux", "x86_64-linux-gnu"
	}
	return goarch + "-linux", ""
}

func altTarget(goarch string) string {
	if goarch == "arm64" {
		return "aarch64-linux"
	}
	return ""
}

// sortToolkits orders /usr/local/cuda* directories: the unversioned
// "cuda" link first (the system default), then versions newest first.
func sortToolkits(dirs []string) {
	ver := func(d string) (bool, []int) {
		// The component after /usr/local/ is "cuda" or "cuda-13.0".
		rest := d
		for {
			base := filepath.Base(rest)
			if strings.HasPrefix(base, "cuda") {
				v := strings.TrimLeft(strings.TrimPrefix(base, "cuda"), "-_")
				if v == "" {
					return true, nil
				}
				var nums []int
				for _, f := range strings.Split(v, ".") {
					n, err := strconv.Atoi(f)
					if err != nil {
						break
					}
					nums = append(nums, n)
				}
				return false, nums
			}
			parent := filepath.Dir(rest)
			if parent == rest {
				return false, nil
			}
			rest = parent
		}
	}
	sort.SliceStable(dirs, func(i, j int) bool {
		di, vi := ver(dirs[i])
		dj, vj := ver(dirs[j])
		if di != dj {
			return di
		}
		for k := 0; k < len(vi) && k < len(vj); k++ {
			if vi[k] != vj[k] {
				return vi[k] > vj[k]
			}
		}
		if len(vi) != len(vj) {
			return len(vi) > len(vj)
		}
		return dirs[i] < dirs[j]
	})
}
