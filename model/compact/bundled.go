package compact

import (
	"fmt"
	"io/fs"
	"strings"

	"github.com/vsr-dev/vsr/assets"
	"github.com/vsr-dev/vsr/backend"
)

// BundledInfo describes a model embedded in the vsr binary.
type BundledInfo struct {
	Name        string `json:"name"`
	Scale       int    `json:"scale"`
	Description string `json:"description"`
	License     string `json:"license"`
}

const bundledDir = "realesr-animevideov3"

// Bundled lists the embedded models, one per supported scale.
func Bundled() []BundledInfo {
	var out []BundledInfo
	for _, s := range []int{2, 3, 4} {
		d := "Real-ESRGAN realesr-animevideov3 (SRVGGNetCompact, 64 features, 16 conv blocks)"
		if s != 4 {
			d += fmt.Sprintf(", x4 followed by bicubic x%g", float64(s)/4)
		}
		out = append(out, BundledInfo{Name: fmt.Sprintf("%s-x%d", bundledDir, s), Scale: s, Description: d, License: "BSD-3-Clause (Xintao Wang)"})
	}
	return out
}

// DefaultModel is the name of the model vsr uses when none is given.
const DefaultModel = bundledDir

// LoadBundled loads the embedded realesr-animevideov3 graph for scale 2, 3
// or 4 onto b.
func LoadBundled(b backend.Backend, scale int) (*Graph, error) {
	if scale < 2 || scale > 4 {
		return nil, fmt.Errorf("scale %d: the bundled model supports --scale 2, 3 or 4", scale)
	}
	name := fmt.Sprintf("%s-x%d", bundledDir, scale)
	param, err := fs.ReadFile(assets.FS, bundledDir+"/"+name+".param")
	if err != nil {
		return nil, err
	}
	bin, err := fs.ReadFile(assets.FS, bundledDir+"/"+bundledDir+"-x4.bin")
	if err != nil {
		return nil, err
	}
	return LoadFiles(b, name, param, bin)
}

// IsBundledName reports whether name refers to the bundled model family.
func IsBundledName(name string) bool {
	return name == "" || strings.HasPrefix(name, bundledDir)
}
