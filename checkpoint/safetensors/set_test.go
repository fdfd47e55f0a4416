package safetensors

import (
	"encoding/json"
	"errors"
	"github.com/vsr-dev/vsr/internal/pthtest"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSetSingleFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "reae.safetensors")
	err := Write(p, []WriteTensor{
		{Name: "enc.w", DType: BF16, Shape: []int{2}, Data: Float32ToBF16([]float32{1, -0.5})},
		{Name: "enc.b", DType: F16, Shape: []int{}, Data: Float32ToF16([]float32{0.25})},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSet(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Names(), []string{"enc.b", "enc.w"}) || !slices.Equal(s.Files(), []string{p}) {
		t.Errorf("names %q files %q", s.Names(), s.Files())
	}
	if v, err := s.Float32("enc.w"); err != nil || !slices.Equal(v, []float32{1, -0.5}) {
		t.Errorf("Float32 = %v %v", v, err)
	}
	if v, err := s.Float32("enc.b"); err != nil || !slices.Equal(v, []float32{0.25}) {
		t.Errorf("Float32 = %v %v", v, err)
	}
	if info, ok := s.Info("enc.b"); !ok || info.DType != F16 || len(info.Shape) != 0 || info.Elems() != 1 {
		t.Errorf("Info = %+v %v", info, ok)
	}
	_, err = s.Bytes("missing")
	pthtest.CheckOneLine(t, err, p, `no tensor "missing"`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeShards writes a 3-shard checkpoint in dir and returns the index path
// and the weight map.
func writeShards(t *testing.T, dir string) (string, map[string]string) {
	t.Helper()
	wm := map[string]string{}
	for i, shard := range []string{
		"diffusion_pytorch_model-00001-of-00003.safetensors",
		"diffusion_pytorch_model-00002-of-00003.safetensors",
		"diffusion_pytorch_model-00003-of-00003.safetensors",
	} {
		var ts []WriteTensor
		for j := range 3 {
			name := "blocks." + string(rune('0'+i)) + ".w" + string(rune('0'+j))
			v := []float32{float32(i), float32(j), float32(i*10 + j)}
			ts = append(ts, WriteTensor{Name: name, DType: F32, Shape: []int{3}, Data: Float32Bytes(v)})
			wm[name] = shard
		}
		if err := Write(filepath.Join(dir, shard), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	idx := filepath.Join(dir, "diffusion_pytorch_model.safetensors.index.json")
	if err := WriteIndex(idx, wm, map[string]string{"total_size": "108"}); err != nil {
		t.Fatal(err)
	}
	return idx, wm
}

func TestSetSharded(t *testing.T) {
	dir := t.TempDir()
	idx, wm := writeShards(t, dir)
	raw, _ := os.ReadFile(idx)
	var parsed struct {
		Metadata  map[string]string `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &parsed); err != nil || len(parsed.WeightMap) != 9 || parsed.Metadata["total_size"] != "108" {
		t.Fatalf("index %s: %v", raw, err)
	}
	s, err := OpenSet(idx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Names()) != 9 || !slices.IsSorted(s.Names()) {
		t.Errorf("names %q", s.Names())
	}
	files := s.Files()
	if len(files) != 3 || !slices.IsSorted(files) || filepath.Dir(files[0]) != dir {
		t.Errorf("files %q", files)
	}
	for name := range wm {
		v, err := s.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		i, j := float32(name[7]-'0'), float32(name[10]-'0')
		if !slices.Equal(v, []float32{i, j, i*10 + j}) {
			t.Errorf("%s = %v", name, v)
		}
		if b, err := s.Bytes(name); err != nil || len(b) != 12 {
			t.Errorf("%s: Bytes %d %v", name, len(b), err)
		}
	}
	_, err = s.Float32("nope")
	pthtest.CheckOneLine(t, err, idx, `no tensor "nope"`)
}

func TestSetErrors(t *testing.T) {
	type tensor struct{ shard, name string }
	cases := []struct {
		name   string
		shards []tensor // what the shards hold
		index  string   // the index file's text
		want   []string
	}{
		{name: "parent", index: `{"weight_map":{"a":"../x.safetensors"}}`, want: []string{`maps tensor "a" to shard "../x.safetensors", which is not a file inside the index's directory`}},
		{name: "sneaky parent", index: `{"weight_map":{"a":"sub/../../x.safetensors"}}`, want: []string{"not a file inside the index's directory"}},
		{name: "absolute", index: `{"weight_map":{"a":"/etc/passwd"}}`, want: []string{"not a file inside the index's directory"}},
		{name: "empty shard", index: `{"weight_map":{"a":""}}`, want: []string{"not a file inside the index's directory"}},
		{name: "missing shard", index: `{"weight_map":{"a":"gone.safetensors"}}`, want: []string{"gone.safetensors", "no such file"}},
		{name: "not in shard", shards: []tensor{{"s1", "a"}}, index: `{"weight_map":{"a":"s1","b":"s1"}}`, want: []string{`weight_map puts tensor "b" in "s1", which has no such tensor`}},
		{name: "wrong shard", shards: []tensor{{"s1", "a"}, {"s2", "b"}}, index: `{"weight_map":{"a":"s2","b":"s2"}}`, want: []string{`weight_map puts tensor "a" in "s2", which has no such tensor`}},
		{name: "unlisted", shards: []tensor{{"s1", "a"}, {"s1", "b"}}, index: `{"weight_map":{"a":"s1"}}`, want: []string{`shard "s1" holds tensor "b", which the weight_map does not list`}},
		{name: "in two shards", shards: []tensor{{"s1", "a"}, {"s2", "a"}, {"s2", "b"}}, index: `{"weight_map":{"a":"s1","b":"s2"}}`, want: []string{`tensor "a" is in both "s1" and "s2"`}},
		{name: "same shard twice", shards: []tensor{{"s1", "a"}, {"s1", "b"}}, index: `{"weight_map":{"a":"s1","b":"./s1"}}`},
		{name: "dup weight", index: `{"weight_map":{"a":"s1","a":"s1"}}`, want: []string{`"weight_map" has tensor "a" twice`}},
		{name: "dup key", index: `{"weight_map":{"a":"s1"},"weight_map":{}}`, want: []string{`has "weight_map" twice`}},
		{name: "no map", index: `{"metadata":{}}`, want: []string{`has no "weight_map"`}},
		{name: "empty map", index: `{"weight_map":{}}`, want: []string{`"weight_map" is empty`}},
		{name: "map type", index: `{"weight_map":[]}`, want: []string{`"weight_map" is an array, not an object`}},
		{name: "shard type", index: `{"weight_map":{"a":1}}`, want: []string{`maps tensor "a" to a number, not a file name`}},
		{name: "not json", index: `{"weight_map":`, want: []string{"not valid JSON"}},
		{name: "not object", index: `[]`, want: []string{"not a JSON object"}},
		{name: "trailing", index: `{"weight_map":{"a":"s1"}} x`, want: []string{"not valid JSON"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			byShard := map[string][]WriteTensor{}
			for _, ts := range c.shards {
				byShard[ts.shard] = append(byShard[ts.shard], WriteTensor{Name: ts.name, DType: U8, Shape: []int{1}, Data: []byte{1}})
			}
			for shard, ts := range byShard {
				if err := Write(filepath.Join(dir, shard), ts, nil); err != nil {
					t.Fatal(err)
				}
			}
			idx := filepath.Join(dir, "model.safetensors.index.json")
			if err := os.WriteFile(idx, []byte(c.index), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := OpenSet(idx)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
			}
			path := idx
			if c.name == "missing shard" {
				path = ""
			}
			pthtest.CheckOneLine(t, err, path, c.want...)
		})
	}
}

// Metadata of any JSON type (Hugging Face writes total_size as a number) and
// unknown top-level keys are skipped.
func TestSetIndexMetadataAnyType(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "s1.safetensors"), []WriteTensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}, nil); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, "m.safetensors.index.json")
	text := `{"metadata": {"total_size": 1, "nested": {"x": [1, {"y": null}]}}, "extra": [], "weight_map": {"a": "s1.safetensors"}}`
	if err := os.WriteFile(idx, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSet(idx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !slices.Equal(s.Names(), []string{"a"}) {
		t.Errorf("names %q", s.Names())
	}
}

func TestWriteIndexErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.index.json")
	pthtest.CheckOneLine(t, WriteIndex(p, nil, nil), p, "weight_map is empty")
	pthtest.CheckOneLine(t, WriteIndex(p, map[string]string{"a": "../s"}, nil), p, `tensor "a": shard "../s", which is not a file inside`)
	pthtest.CheckOneLine(t, WriteIndex(p, map[string]string{"": "s"}, nil), p, "empty")
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed WriteIndex left a file: %v", err)
	}
}
