package app

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vsr-dev/vsr/assets"
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/serve"
)

var _ serve.ModelHasher = (*Runner)(nil)

// ModelHash returns the SHA-256 of the files of the served model name
// (serve.ModelHasher): the bundled files for the bundled model, the .param
// and .bin of an ncnn graph (a fetched one's too), every file of a
// checkpoint directory, each with its name and size. Workers run a task
// only when their hash is the API's. The files are read once, at start.
func (s *Runner) ModelHash(name string) (string, error) {
	for _, l := range s.models {
		if l.Model.Name() == name {
			return specHash(l.Spec)
		}
	}
	return "", fmt.Errorf("no model %q is served", name)
}

// specHash hashes the files of model spec (see ModelHash).
func specHash(spec string) (string, error) {
	h := sha256.New()
	var err error
	switch {
	case compact.IsBundledName(spec):
		err = hashFS(h, assets.FS)
	default:
		path := spec
		if f, ok := compact.FindFetchable(spec); ok {
			dir, derr := compact.ModelsDir()
			if derr != nil {
				return "", derr
			}
			path = f.Param(dir)
		}
		var st os.FileInfo
		if st, err = os.Stat(path); err != nil {
			break
		}
		if st.IsDir() {
			err = hashFS(h, os.DirFS(path))
			break
		}
		dir, names := os.DirFS(filepath.Dir(path)), []string{filepath.Base(path)}
		if strings.HasSuffix(path, ".param") {
			names = append(names, strings.TrimSuffix(names[0], ".param")+".bin")
		}
		for _, n := range names {
			if err = hashFile(h, dir, n); err != nil {
				break
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("--model %s: hashing its files: %w", spec, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFS hashes each regular file of fsys (hashFile), in lexical order.
func hashFS(h hash.Hash, fsys fs.FS) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		return hashFile(h, fsys, p)
	})
}

// hashFile writes to h the name, size and content of file p of fsys.
func hashFile(h hash.Hash, fsys fs.FS, p string) error {
	f, err := fsys.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00%d\x00", p, st.Size())
	_, err = io.Copy(h, f)
	return err
}
