package safetensors

import (
	"encoding/binary"
	"github.com/vsr-dev/vsr/internal/pthtest"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestValidationErrors(t *testing.T) {
	lenOnly := func(n uint64, rest int) []byte {
		b := make([]byte, 8+rest)
		binary.LittleEndian.PutUint64(b, n)
		return b
	}
	const okEntry = `{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	cases := []struct {
		name   string
		raw    []byte // the whole file, if set
		header string
		data   int // zero bytes of data
		want   []string
		only64 bool // dims beyond a 32-bit int fail earlier there, as "dimension ... is too large"
	}{
		{name: "short", raw: []byte("abcde"), want: []string{"file is 5 bytes, shorter than the 8-byte header length"}},
		{name: "empty file", raw: []byte{}, want: []string{"file is 0 bytes"}},
		{name: "length 0", raw: lenOnly(0, 16), want: []string{"header length is 0"}},
		{name: "length past file", raw: lenOnly(1000, 16), want: []string{"header length 1000 is larger than the 16 bytes after it"}},
		{name: "length over limit", raw: lenOnly(200<<20, 16), want: []string{"header length 209715200 exceeds the 100 MiB limit"}},
		{name: "bad json", header: `{"a":`, want: []string{"header is not valid JSON"}},
		{name: "bad json 2", header: `{"a" 1}`, want: []string{"header is not valid JSON"}},
		{name: "trailing", header: `{} {}`, want: []string{"header is not valid JSON: an object follows the top-level object"}},
		{name: "trailing junk", header: `{}x`, want: []string{"header is not valid JSON: trailing data after the top-level object"}},
		{name: "array", header: `[1, 2]`, want: []string{"header is not a JSON object"}},
		{name: "string", header: `"x"`, want: []string{"header is not a JSON object"}},
		{name: "leading space", header: ` {}`, want: []string{"header is not a JSON object"}},
		{name: "utf8", header: "{\"a\xff\":" + okEntry + "}", data: 8, want: []string{"header is not valid UTF-8"}},
		{name: "entry not object", header: `{"w":5}`, want: []string{`tensor "w": entry is a number, not an object`}},
		{name: "entry null", header: `{"w":null}`, want: []string{`tensor "w": entry is null, not an object`}},
		{name: "empty name", header: `{"":` + okEntry + `}`, data: 8, want: []string{"empty name"}},
		{name: "no dtype", header: `{"w":{"shape":[2],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": missing "dtype"`}},
		{name: "no shape", header: `{"w":{"dtype":"F32","data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": missing "shape"`}},
		{name: "no offsets", header: `{"w":{"dtype":"F32","shape":[2]}}`, data: 8, want: []string{`tensor "w": missing "data_offsets"`}},
		{name: "unknown field", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, data: 8, want: []string{`tensor "w": unknown field "x"`}},
		{name: "dtype type", header: `{"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": "dtype" is a number, not a string`}},
		{name: "shape type", header: `{"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": "shape" is a string, not an array of integers`}},
		{name: "shape elem type", header: `{"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": "shape" has a string, not an integer`}},
		{name: "shape nested", header: `{"w":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": "shape" has an array, not an integer`}},
		{name: "offsets type", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":{"a":0}}}`, data: 8, want: []string{`tensor "w": "data_offsets" is an object`}},
		{name: "offsets null", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,null]}}`, data: 8, want: []string{`tensor "w": "data_offsets" has null, not an integer`}},
		{name: "unknown dtype", header: `{"w":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}}`, data: 8, want: []string{`tensor "w": unsupported dtype "F8_E5M2"`}},
		{name: "lowercase dtype", header: `{"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": unsupported dtype "f32"`}},
		{name: "negative dim", header: `{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": "shape" has negative dimension -2`}},
		{name: "fraction dim", header: `{"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": "shape" has dimension 2.0, not an integer`}},
		{name: "exponent dim", header: `{"w":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": "shape" has dimension 2e0, not an integer`}},
		{name: "huge dim", header: `{"w":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": "shape" has dimension 99999999999999999999, too large`}},
		{name: "offsets one", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[8]}}`, data: 8, want: []string{`tensor "w": "data_offsets" has 1 values, want [begin, end]`}},
		{name: "offsets three", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}`, data: 8, want: []string{`tensor "w": "data_offsets" has 3 values`}},
		{name: "offsets reversed", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, data: 8, want: []string{`tensor "w": "data_offsets" [8, 0] ends before it begins`}},
		{name: "offsets negative", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}`, data: 8, want: []string{`tensor "w": "data_offsets" has negative offset -8`}},
		{name: "offset fraction", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8.5]}}`, data: 8, want: []string{`tensor "w": "data_offsets" has offset 8.5, not an integer`}},
		{name: "size mismatch", header: `{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,8]}}`, data: 24, want: []string{`tensor "w": data_offsets [0, 8] hold 8 bytes but F32 [2 3] needs 24`}},
		{name: "empty with bytes", header: `{"w":{"dtype":"F32","shape":[0],"data_offsets":[0,4]}}`, data: 4, want: []string{`tensor "w": data_offsets [0, 4] hold 4 bytes but F32 [0] needs 0`}},
		{name: "overflow", only64: true, header: `{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, want: []string{`tensor "w": shape [4294967296 4294967296] of F32 is too large`}},
		{name: "overflow bytes", only64: true, header: `{"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}}`, want: []string{`tensor "w": shape [2305843009213693952] of F64 is too large`}},
		{name: "overflow before zero", only64: true, header: `{"w":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`, want: []string{`tensor "w": shape [4294967296 4294967296 0] of U8 is too large`}},
		{name: "past end", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, data: 8, want: []string{`tensor "w": data_offsets [4, 12] run past the end of the 8-byte data section`}},
		{name: "past end huge", only64: true, header: `{"w":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]}}`, data: 8, want: []string{`tensor "w": data_offsets [0, 9223372036854775807] run past the end`}},
		{name: "empty past end", header: `{"w":{"dtype":"F32","shape":[0],"data_offsets":[9,9]}}`, data: 8, want: []string{`tensor "w": data_offsets [9, 9] run past the end`}},
		{name: "overlap", header: `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data: 8, want: []string{`tensors "a" [0, 8] and "b" [4, 8] overlap`}},
		{name: "same range", header: `{"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensors "a" [0, 8] and "b" [0, 8] overlap`}},
		{name: "dup tensor", header: `{"w":` + okEntry + `,"w":` + okEntry + `}`, data: 8, want: []string{`header has tensor "w" twice`}},
		{name: "dup escaped", header: `{"w":` + okEntry + `,"\u0077":` + okEntry + `}`, data: 8, want: []string{`header has tensor "w" twice`}},
		{name: "dup field", header: `{"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": has "dtype" twice`}},
		{name: "dup shape", header: `{"w":{"dtype":"F32","shape":[2],"shape":[2],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": has "shape" twice`}},
		{name: "dup offsets", header: `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"data_offsets":[0,8]}}`, data: 8, want: []string{`tensor "w": has "data_offsets" twice`}},
		{name: "dup metadata", header: `{"__metadata__":{},"__metadata__":{}}`, want: []string{`header has "__metadata__" twice`}},
		{name: "dup metadata key", header: `{"__metadata__":{"k":"a","k":"b"}}`, want: []string{`"__metadata__" has key "k" twice`}},
		{name: "metadata number", header: `{"__metadata__":{"total_size":12}}`, want: []string{`"__metadata__" value for "total_size" is a number; metadata values must be strings`}},
		{name: "metadata object", header: `{"__metadata__":{"k":{}}}`, want: []string{`value for "k" is an object`}},
		{name: "metadata array", header: `{"__metadata__":["a"]}`, want: []string{`"__metadata__" is an array, not an object of strings`}},
		{name: "metadata string", header: `{"__metadata__":"x"}`, want: []string{`"__metadata__" is a string, not an object of strings`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.only64 && strconv.IntSize < 64 {
				t.Skip("64-bit ints only")
			}
			var p string
			if c.raw != nil {
				p = bytesFile(t, "model.safetensors", c.raw)
			} else {
				p = rawFile(t, c.header, make([]byte, c.data))
			}
			f, err := Open(p)
			if err == nil {
				f.Close()
			}
			pthtest.CheckOneLine(t, err, p, c.want...)
			if !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestValidationAccepts(t *testing.T) {
	cases := []struct {
		name   string
		header string
		data   int
		names  []string
		meta   map[string]string
	}{
		{name: "no tensors", header: `{}`},
		{name: "padded", header: `{}      `},
		{name: "whitespace", header: "{ \"w\" :\n\t{\"shape\": [ 2 ], \"data_offsets\": [0, 8], \"dtype\": \"F32\"} }\r\n", data: 8, names: []string{"w"}},
		{name: "gap and trailing bytes", header: `{"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},"b":{"dtype":"U8","shape":[1],"data_offsets":[10,11]}}`, data: 20, names: []string{"a", "b"}},
		{name: "empty tensors anywhere", header: `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},"f":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},"g":{"dtype":"BOOL","shape":[0],"data_offsets":[8,8]}}`, data: 8, names: []string{"a", "e", "f", "g"}},
		{name: "scalar", header: `{"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}`, data: 8, names: []string{"s"}},
		{name: "negative zero dim", header: `{"s":{"dtype":"I64","shape":[-0],"data_offsets":[0,0]}}`, names: []string{"s"}},
		{name: "metadata null", header: `{"__metadata__":null}`},
		{name: "metadata", header: `{"__metadata__":{"format":"pt","é":"\u00e9\n"}}`, meta: map[string]string{"format": "pt", "é": "é\n"}},
		{name: "escaped name", header: `{"a\u002eb":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, data: 1, names: []string{"a.b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := rawFile(t, c.header, make([]byte, c.data))
			f := mustOpen(t, p)
			if !slices.Equal(f.Names(), c.names) && len(f.Names())+len(c.names) > 0 {
				t.Errorf("names %q, want %q", f.Names(), c.names)
			}
			if c.meta != nil && len(f.Metadata()) != len(c.meta) {
				t.Errorf("metadata %q, want %q", f.Metadata(), c.meta)
			}
			for k, v := range c.meta {
				if f.Metadata()[k] != v {
					t.Errorf("metadata %q, want %q", f.Metadata(), c.meta)
				}
			}
			for _, n := range f.Names() {
				info, _ := f.Info(n)
				b, err := f.Bytes(n)
				if err != nil || int64(len(b)) != info.End-info.Begin {
					t.Errorf("%q: %d bytes, %v", n, len(b), err)
				}
			}
		})
	}
}

func TestOpenNotRegular(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	pthtest.CheckOneLine(t, err, dir, "not a regular file")
	_, err = Open(dir + "/missing.safetensors")
	pthtest.CheckOneLine(t, err, "", "missing.safetensors", "no such file")
}
