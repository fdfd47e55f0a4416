package compact

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model/arch"
)

// A PyTorch state dict (.pth, .safetensors) of an architecture package
// arch builds an ncnn graph for (ESRGAN, SRVGGNetCompact) is a compact
// model: its graph is built in memory and loaded like an ncnn file's, so
// tiling, batching and the fast paths are the same. The family takes
// (Detect) every state dict whose architecture arch recognises, so that
// one it does not run is refused by Load with what it is; a state dict of
// no known architecture (a CDA-VSR checkpoint) it leaves to the others.

// isStateDict reports whether spec is a state dict file of an
// architecture arch recognises.
func isStateDict(spec string) bool {
	_, _, ok := arch.Sniff(spec)
	return ok
}

// StateDictGraph reads the state dict at path and builds its ncnn graph:
// the architecture found and the graph, or the error saying what the
// file is and why vsr does not run it.
func StateDictGraph(path string) (*arch.Info, *arch.Graph, error) {
	d, err := arch.Open(path, false)
	if err != nil {
		return nil, nil, err
	}
	info, err := arch.Detect(d)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	arch.Name(info, path)
	if err := info.Check(); err != nil {
		return info, nil, fmt.Errorf("%s: %w", path, err)
	}
	g, err := arch.Build(info, d)
	if err != nil {
		return info, nil, fmt.Errorf("%s: %w", path, err)
	}
	return info, g, nil
}

// loadStateDict loads the state dict at spec onto dev.
func loadStateDict(dev backend.Backend, spec string) (*graphModel, error) {
	info, ag, err := StateDictGraph(spec)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(filepath.Base(spec), filepath.Ext(spec))
	g, err := LoadFiles(dev, name, ag.Param, ag.Bin)
	if err != nil {
		return nil, err
	}
	return &graphModel{g: g, arch: info}, nil
}

// runs names the architectures whose state dicts the family runs.
const runs = "vsr runs ESRGAN, SRVGGNetCompact, SPAN, Real-CUGAN and RealPLKSR state dicts (.pth or .safetensors)"

// Explain says what a state dict file is when no family takes it: one of
// no architecture vsr knows, or a PyTorch pickle (.pth) that is no state
// dict vsr can read, with why; nil for anything else.
func (family) Explain(spec string) error {
	d, err := arch.Open(spec, true)
	if err != nil {
		if errors.Is(safetensors.CheckNotPickle(spec), safetensors.ErrPickle) {
			return fmt.Errorf("%w; %s", err, runs)
		}
		return nil
	}
	if _, err := arch.Detect(d); errors.Is(err, arch.ErrUnknown) {
		return fmt.Errorf("%s: %w; %s", spec, err, runs)
	}
	return nil
}

// FolderModel is a model file of the models folder, for the service's
// metadata.
type FolderModel struct {
	File string `json:"file"`
	// Architecture is the state dict's ("ESRGAN (Real-ESRGAN keys)"), or
	// "ncnn graph" for a .param.
	Architecture string `json:"architecture,omitempty"`
	Scale        int    `json:"scale,omitempty"`
	// Runs says whether vsr runs it; Why says why not.
	Runs bool   `json:"runs"`
	Why  string `json:"why,omitempty"`
	// Error is why a model file could not be read (one line), or why a
	// state dict with an architecture's keys is not one of it; the file
	// has no Architecture then.
	Error string `json:"error,omitempty"`
}

// Folder lists the models in dir (not its subfolders): ncnn .param files
// and state dicts of the architectures package arch recognises, read
// from their headers only (the names, shapes and types of the tensors:
// no tensor data is read or inflated), and, with their errors, the model
// files that cannot be read (a PyTorch pickle, or a file named .pth, .pt,
// .ckpt or .safetensors). Other files and state dicts of no architecture
// arch knows (another family's, as a CDA-VSR checkpoint) are left out. A
// folder that does not exist has none.
func Folder(dir string) ([]FolderModel, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []FolderModel{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []FolderModel{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if strings.HasSuffix(e.Name(), ".param") {
			out = append(out, FolderModel{File: e.Name(), Architecture: "ncnn graph", Runs: true})
			continue
		}
		if m, ok := folderModel(dir, e.Name()); ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// folderModel is Folder's entry for the file name in dir, if it lists it.
func folderModel(dir, name string) (FolderModel, bool) {
	path := filepath.Join(dir, name)
	d, err := arch.Open(path, true)
	if err != nil {
		return FolderModel{File: name, Error: err.Error()}, isModelFile(path)
	}
	info, err := arch.Detect(d)
	if errors.Is(err, arch.ErrUnknown) {
		return FolderModel{}, false
	}
	if err != nil {
		return FolderModel{File: name, Error: fmt.Sprintf("%s: %v", path, err)}, true
	}
	arch.Name(info, path)
	m := FolderModel{File: name, Architecture: info.Title(), Scale: info.Scale, Runs: info.Check() == nil}
	if !m.Runs {
		m.Why = info.Check().Error()
	}
	return m, true
}

// modelExts are the names of state dict files, whatever their content
// (an ncnn .bin is not one).
var modelExts = []string{".pth", ".pt", ".ckpt", ".safetensors"}

// isModelFile reports whether the file at path is meant as a state dict:
// a PyTorch pickle, or named as one.
func isModelFile(path string) bool {
	if errors.Is(safetensors.CheckNotPickle(path), safetensors.ErrPickle) {
		return true
	}
	return slices.Contains(modelExts, strings.ToLower(filepath.Ext(path)))
}
