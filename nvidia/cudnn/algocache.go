package cudnn

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// The timed rankings are also kept on disk, so that every process on a
// machine runs each shape with the algorithm the first one chose.
// cuDNN's algorithms round differently, and a ranking timed while other
// work shares the GPU (several ranks on one device) can come out
// differently from one timed alone: with the file, a video restored twice,
// or on one rank and then on several, gives the same bytes. The file is
// $VSR_CUDNN_CACHE, else vsr/cudnn-algos.json in the user's cache
// directory; VSR_CUDNN_CACHE=off keeps the rankings in memory only.
// Entries are keyed by the GPU's name, cuDNN's version and the shape; a
// file that does not parse is ignored (and replaced by the next search).

var disk struct {
	once sync.Once
	path string
	m    map[string][]AlgoPerf
}

func diskPath() string {
	if p := os.Getenv("VSR_CUDNN_CACHE"); p != "" {
		if p == "off" {
			return ""
		}
		return p
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "vsr", "cudnn-algos.json")
}

// diskKey names a search in the file.
func diskKey(h *Handle, k foundKey) string {
	gpu := fmt.Sprint("device ", k.dev)
	if h.ctx != nil {
		if n, err := h.ctx.Device().Name(); err == nil {
			gpu = n
		}
	}
	v, _ := Version()
	return fmt.Sprintf("%s|cudnn %d|%+v|limit %d|conversion %v", gpu, v, k.shape, k.limit, k.conv)
}

// diskLoad returns the ranking stored for key. Called with findMu held.
func diskLoad(key string) ([]AlgoPerf, bool) {
	disk.once.Do(func() {
		disk.path, disk.m = diskPath(), map[string][]AlgoPerf{}
		if disk.path == "" {
			return
		}
		if b, err := os.ReadFile(disk.path); err == nil {
			if json.Unmarshal(b, &disk.m) != nil {
				disk.m = map[string][]AlgoPerf{}
			}
		}
	})
	p, ok := disk.m[key]
	return p, ok && len(p) > 0
}

// diskStore adds a ranking and rewrites the file (a temporary renamed over
// it). Called with findMu held; failures only cost a search next time.
func diskStore(key string, p []AlgoPerf) {
	if disk.path == "" {
		return
	}
	disk.m[key] = p
	b, err := json.Marshal(disk.m)
	if err != nil || os.MkdirAll(filepath.Dir(disk.path), 0o755) != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(disk.path), ".cudnn-algos-*.json")
	if err != nil {
		return
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil && cerr == nil && os.Rename(tmp.Name(), disk.path) == nil {
		return
	}
	os.Remove(tmp.Name())
}
