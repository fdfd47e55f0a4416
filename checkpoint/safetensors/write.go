package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"unicode/utf8"
)

// WriteTensor is one tensor for [Write]: its raw little-endian data, which
// must be exactly elems(Shape)*DType.Size() bytes.
type WriteTensor struct {
	// Name is the tensor's key: non-empty, valid UTF-8, not "__metadata__".
	Name string
	// DType is the element type; one of the supported dtypes.
	DType DType
	// Shape is the dimensions; empty (or nil) for a 0-d scalar.
	Shape []int
	// Data is the raw little-endian bytes.
	Data []byte
}

// Write writes a safetensors file at path as the reference implementation
// does: compact JSON header with __metadata__ first (keys sorted) and then
// the tensors in the given order, padded with spaces so the data section
// starts at a multiple of 8, followed by the tensors' data back to back in
// the same order. metadata may be nil. Names must be unique and each data
// size must match its dtype and shape. The file is written to a temporary
// file beside path, synced and renamed over path, so readers see either the
// old file or the complete new one; path's directory must exist.
func Write(path string, tensors []WriteTensor, metadata map[string]string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: writing %q: %s", path, fmt.Sprintf(format, args...))
	}
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		hdr.WriteString(`"__metadata__":{`)
		for i, k := range sortedKeys(metadata) {
			v := metadata[k]
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return fail("metadata %q is not valid UTF-8", k)
			}
			if i > 0 {
				hdr.WriteByte(',')
			}
			writeJSONString(&hdr, k)
			hdr.WriteByte(':')
			writeJSONString(&hdr, v)
		}
		hdr.WriteByte('}')
		first = false
	}
	seen := make(map[string]bool, len(tensors))
	var off int64
	for _, t := range tensors {
		switch {
		case t.Name == "":
			return fail("a tensor has an empty name")
		case t.Name == metadataKey:
			return fail("a tensor cannot be named %q", metadataKey)
		case !utf8.ValidString(t.Name):
			return fail("tensor name %q is not valid UTF-8", t.Name)
		case seen[t.Name]:
			return fail("tensor %q given twice", t.Name)
		case t.DType.Size() == 0:
			return fail("tensor %q: unsupported dtype %q (supported: %s)", t.Name, t.DType, dtypeNames)
		}
		seen[t.Name] = true
		for _, d := range t.Shape {
			if d < 0 {
				return fail("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
			}
		}
		n, ok := byteSize(t.DType, t.Shape)
		if !ok {
			return fail("tensor %q: shape %v of %s is too large", t.Name, t.Shape, t.DType)
		}
		if int64(len(t.Data)) != n {
			return fail("tensor %q: %d bytes of data but %s %v needs %d", t.Name, len(t.Data), t.DType, t.Shape, n)
		}
		if !first {
			hdr.WriteByte(',')
		}
		first = false
		writeJSONString(&hdr, t.Name)
		hdr.WriteString(`:{"dtype":`)
		writeJSONString(&hdr, string(t.DType))
		hdr.WriteString(`,"shape":[`)
		for i, d := range t.Shape {
			if i > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&hdr, `],"data_offsets":[%d,%d]}`, off, off+n)
		off += n
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	if hdr.Len() > MaxHeaderSize {
		return fail("header would be %d bytes, over the %d MiB limit", hdr.Len(), MaxHeaderSize>>20)
	}
	return writeAtomic(path, func(w io.Writer) error {
		var lenBuf [8]byte
		binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
		if _, err := w.Write(lenBuf[:]); err != nil {
			return err
		}
		if _, err := w.Write(hdr.Bytes()); err != nil {
			return err
		}
		for _, t := range tensors {
			if _, err := w.Write(t.Data); err != nil {
				return err
			}
		}
		return nil
	})
}

// WriteIndex writes a sharded checkpoint's index file at path, atomically as
// [Write] does, in the layout Hugging Face tools write:
// {"metadata": {...}, "weight_map": {"tensor name": "shard file"}}, keys
// sorted, indented by two spaces. Shard names are relative to path's
// directory and must stay inside it. Metadata values are written as JSON
// strings; metadata may be nil.
func WriteIndex(path string, weightMap map[string]string, metadata map[string]string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: writing index %q: %s", path, fmt.Sprintf(format, args...))
	}
	if len(weightMap) == 0 {
		return fail("weight_map is empty")
	}
	for name, shard := range weightMap {
		if name == "" || !utf8.ValidString(name) {
			return fail("tensor name %q is empty or not valid UTF-8", name)
		}
		if !utf8.ValidString(shard) {
			return fail("tensor %q: shard %q is not valid UTF-8", name, shard)
		}
		if err := checkShardName(shard); err != nil {
			return fail("tensor %q: %v", name, err)
		}
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fail("metadata %q is not valid UTF-8", k)
		}
	}
	if metadata == nil {
		metadata = map[string]string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	index := struct {
		Metadata  map[string]string `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{metadata, weightMap}
	if err := enc.Encode(index); err != nil {
		return fail("%v", err)
	}
	return writeAtomic(path, func(w io.Writer) error {
		_, err := w.Write(buf.Bytes())
		return err
	})
}

// writeJSONString appends s as a JSON string, escaping only what JSON needs.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)           // cannot fail for a string
	b.Truncate(b.Len() - 1) // Encode's newline
}

// writeAtomic writes path through a synced temporary file in the same
// directory and a rename.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("safetensors: writing %q: %w", path, err)
	} else if !st.IsDir() {
		return fmt.Errorf("safetensors: writing %q: %q is not a directory", path, dir)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: writing %q: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("safetensors: writing %q: %w", path, err)
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
