package safetensors

import (
	"encoding/binary"
	"os"
	"testing"
)

// FuzzOpen feeds arbitrary headers (or, with raw set, arbitrary whole files)
// to Open. It must never panic, and a File it returns must keep every tensor
// inside the data section, sized by its dtype and shape, without overlaps.
func FuzzOpen(f *testing.F) {
	seeds := []string{
		`{}`,
		`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`,
		`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[],"data_offsets":[8,10]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},"e":{"dtype":"I64","shape":[0,5],"data_offsets":[6,6]}}`,
		`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`,
		`{"w":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`,
		`{"w":{"dtype":"BOOL","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]}}`,
		`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]},"w":1}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint16(16), false)
	}
	f.Add(legacyTorch, uint16(0), true)
	f.Add([]byte("PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00archive/data.pkl"), uint16(0), true)
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"), uint16(0), true)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, header []byte, dataLen uint16, raw bool) {
		var content []byte
		if raw {
			content = header
		} else {
			content = binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
			content = append(content, header...)
			for i := range int(dataLen % 4096) {
				content = append(content, byte(i))
			}
		}
		tmp, err := os.CreateTemp(dir, "fuzz-*.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		path := tmp.Name()
		defer os.Remove(path)
		if _, err := tmp.Write(content); err != nil {
			t.Fatal(err)
		}
		tmp.Close()

		file, err := Open(path)
		if err != nil {
			if file != nil {
				t.Fatal("Open returned both a File and an error")
			}
			return
		}
		defer file.Close()
		if len(content) < 8 {
			t.Fatalf("opened a %d-byte file", len(content))
		}
		n := binary.LittleEndian.Uint64(content)
		dataSize := int64(len(content)) - 8 - int64(n)
		type span struct{ b, e int64 }
		var spans []span
		for _, name := range file.Names() {
			info, ok := file.Info(name)
			if !ok {
				t.Fatalf("listed %q has no Info", name)
			}
			if info.Begin < 0 || info.Begin > info.End || info.End > dataSize {
				t.Fatalf("%q: [%d, %d] outside the %d-byte data section", name, info.Begin, info.End, dataSize)
			}
			if want := int64(info.Elems()) * int64(info.DType.Size()); info.End-info.Begin != want || info.DType.Size() == 0 {
				t.Fatalf("%q: %d bytes for %s %v", name, info.End-info.Begin, info.DType, info.Shape)
			}
			for _, d := range info.Shape {
				if d < 0 {
					t.Fatalf("%q: shape %v", name, info.Shape)
				}
			}
			b, err := file.Bytes(name)
			if err != nil || int64(len(b)) != info.End-info.Begin {
				t.Fatalf("%q: Bytes %d, %v", name, len(b), err)
			}
			if len(b) > 0 && &b[0] != &file.data[file.dataOff+info.Begin] {
				t.Fatalf("%q: Bytes is not the view at its offset", name)
			}
			if v, err := file.Float32(name); err == nil && len(v) != info.Elems() {
				t.Fatalf("%q: Float32 gave %d values for %d elements", name, len(v), info.Elems())
			}
			if info.End > info.Begin {
				for _, s := range spans {
					if info.Begin < s.e && s.b < info.End {
						t.Fatalf("%q [%d, %d] overlaps [%d, %d]", name, info.Begin, info.End, s.b, s.e)
					}
				}
				spans = append(spans, span{info.Begin, info.End})
			}
		}
		_ = file.Metadata()
		if err := file.Close(); err != nil {
			t.Fatal(err)
		}
		if err := file.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
