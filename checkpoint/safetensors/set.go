package safetensors

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	pathpkg "path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// maxIndexSize bounds the .index.json file OpenSet reads.
const maxIndexSize = 100 << 20

// Set is one or more safetensors files seen as one namespace of tensors: a
// sharded checkpoint opened through its .index.json, or a single file. Like
// [File], its methods may be called concurrently, except Close.
type Set struct {
	path   string           // the index or the single file
	files  []*File          // sorted by path
	byName map[string]*File // tensor name -> file holding it
	names  []string         // sorted
}

// OpenSet opens a checkpoint. path is either a .safetensors file, or a
// sharded checkpoint's index (a name ending in .json, e.g.
// diffusion_pytorch_model.safetensors.index.json) of the form
// {"metadata": {...}, "weight_map": {"tensor name": "shard file"}}. Every
// shard the weight_map names is opened, relative to the index's directory;
// shard names must stay inside that directory ("../x" and absolute paths are
// rejected). Every name in the weight_map must be held by the shard it maps
// to, every tensor in a shard must be in the weight_map under that shard, and
// no name may appear in two shards. The index's metadata is not interpreted.
func OpenSet(path string) (*Set, error) {
	if !strings.HasSuffix(strings.ToLower(path), ".json") {
		f, err := Open(path)
		if err != nil {
			return nil, err
		}
		return newSet(path, []*File{f}), nil
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: index %q: %s", path, fmt.Sprintf(format, args...))
	}
	weightMap, err := readIndex(path)
	if err != nil {
		return nil, fail("%v", err)
	}
	dir := filepath.Dir(path)
	shards := map[string][]string{} // shard -> names the index maps to it
	for _, name := range sortedKeys(weightMap) {
		shard := pathpkg.Clean(weightMap[name])
		shards[shard] = append(shards[shard], name)
	}
	var files []*File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	owner := map[string]string{} // tensor -> shard that holds it
	for _, shard := range sortedKeys(shards) {
		f, err := Open(filepath.Join(dir, filepath.FromSlash(shard)))
		if err != nil {
			closeAll()
			return nil, err
		}
		files = append(files, f)
		for _, name := range shards[shard] {
			if _, ok := f.tensors[name]; !ok {
				closeAll()
				return nil, fail("weight_map puts tensor %q in %q, which has no such tensor", name, shard)
			}
		}
		for _, name := range f.names {
			if prev, dup := owner[name]; dup {
				closeAll()
				return nil, fail("tensor %q is in both %q and %q", name, prev, shard)
			}
			owner[name] = shard
		}
	}
	for _, name := range sortedKeys(owner) {
		if want := owner[name]; pathpkg.Clean(weightMap[name]) != want {
			closeAll()
			if _, ok := weightMap[name]; !ok {
				return nil, fail("shard %q holds tensor %q, which the weight_map does not list", want, name)
			}
			return nil, fail("weight_map puts tensor %q in %q, but %q holds it", name, weightMap[name], want)
		}
	}
	return newSet(path, files), nil
}

// readIndex reads and checks an index file's weight_map.
func readIndex(path string) (map[string]string, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	b, err := io.ReadAll(io.LimitReader(fd, maxIndexSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxIndexSize {
		return nil, fmt.Errorf("larger than %d MiB", maxIndexSize>>20)
	}
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("not valid UTF-8")
	}
	j := newJSONTokens(b)
	tok, err := j.next()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var weightMap map[string]string
	seen := map[string]bool{}
	for j.dec.More() {
		tok, err := j.next()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("has %q twice", key)
		}
		seen[key] = true
		if key != "weight_map" { // "metadata" and anything else: skipped
			tok, err := j.next()
			if err != nil {
				return nil, err
			}
			if err := j.skipValue(tok); err != nil {
				return nil, err
			}
			continue
		}
		if weightMap, err = j.parseWeightMap(); err != nil {
			return nil, err
		}
	}
	if _, err := j.next(); err != nil {
		return nil, err
	}
	if err := j.end(); err != nil {
		return nil, err
	}
	if weightMap == nil {
		return nil, fmt.Errorf(`has no "weight_map"`)
	}
	if len(weightMap) == 0 {
		return nil, fmt.Errorf(`"weight_map" is empty`)
	}
	return weightMap, nil
}

// parseWeightMap reads {"tensor": "shard", ...}.
func (j *jsonTokens) parseWeightMap() (map[string]string, error) {
	tok, err := j.next()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf(`"weight_map" is %s, not an object`, describeToken(tok))
	}
	m := map[string]string{}
	for j.dec.More() {
		tok, err := j.next()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf(`"weight_map" has tensor %q twice`, name)
		}
		tok, err = j.next()
		if err != nil {
			return nil, err
		}
		shard, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf(`"weight_map" maps tensor %q to %s, not a file name`, name, describeToken(tok))
		}
		if err := checkShardName(shard); err != nil {
			return nil, fmt.Errorf(`"weight_map" maps tensor %q to %v`, name, err)
		}
		m[name] = shard
	}
	if _, err := j.next(); err != nil {
		return nil, err
	}
	return m, nil
}

// checkShardName accepts a relative, slash-separated path that stays inside
// the index's directory.
func checkShardName(shard string) error {
	if shard == "" || strings.Contains(shard, "\\") || !filepath.IsLocal(filepath.FromSlash(shard)) || !filepath.IsLocal(shard) {
		return fmt.Errorf("shard %q, which is not a file inside the index's directory", shard)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func newSet(path string, files []*File) *Set {
	s := &Set{path: path, files: files, byName: map[string]*File{}}
	for _, f := range files {
		for _, name := range f.names {
			s.byName[name] = f
		}
	}
	s.names = sortedKeys(s.byName)
	return s
}

// Close closes every file of the set; idempotent. It returns the first error.
func (s *Set) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Names lists every tensor name of the set, sorted.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Info describes the named tensor; its offsets are relative to the data
// section of the file that holds it. The result is a copy.
func (s *Set) Info(name string) (*TensorInfo, bool) {
	f, ok := s.byName[name]
	if !ok {
		return nil, false
	}
	return f.Info(name)
}

// Bytes is the named tensor's raw data, a read-only view valid until Close;
// see [File.Bytes].
func (s *Set) Bytes(name string) ([]byte, error) {
	f, err := s.file(name)
	if err != nil {
		return nil, err
	}
	return f.Bytes(name)
}

// Float32 is the named tensor converted to float32; see [File.Float32].
func (s *Set) Float32(name string) ([]float32, error) {
	f, err := s.file(name)
	if err != nil {
		return nil, err
	}
	return f.Float32(name)
}

// Files lists the paths of the set's files, sorted.
func (s *Set) Files() []string {
	out := make([]string, len(s.files))
	for i, f := range s.files {
		out[i] = f.path
	}
	return out
}

func (s *Set) file(name string) (*File, error) {
	f, ok := s.byName[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: checkpoint %q: no tensor %q", s.path, name)
	}
	return f, nil
}
