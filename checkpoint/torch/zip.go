package torch

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strings"
)

// maxPickle bounds the size of data.pkl (a state dict's pickle is a few
// hundred bytes per tensor).
const maxPickle = 256 << 20

// maxDeflateRatio is the most deflate can expand its input.
const maxDeflateRatio = 1032

// readZip reads torch.save's zip format: data.pkl whole, then of each
// storage record only the bytes its tensors reach (see [Options.finish]).
func (o Options) readZip(r io.ReaderAt, size int64) (any, error) {
	zr, err := zip.NewReader(io.NewSectionReader(r, 0, size), size)
	if zr == nil || err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fmt.Errorf("not a readable zip archive (truncated or corrupt?): %v", err)
	}
	prefix, err := findDataPkl(zr.File)
	if err != nil {
		return nil, err
	}
	records := map[string]*zip.File{}
	for _, f := range zr.File {
		if strings.HasPrefix(f.Name, prefix) {
			records[strings.TrimPrefix(f.Name, prefix)] = f
		}
	}
	if records["constants.pkl"] != nil {
		return nil, errors.New("a TorchScript archive (torch.jit.save), not a torch.save file: save the model's state_dict() with torch.save instead")
	}
	big := false
	if f := records["byteorder"]; f != nil {
		b, err := readRecord(f, size, 16)
		if err != nil {
			return nil, err
		}
		switch string(b) {
		case "little":
		case "big":
			big = true
		default:
			return nil, fmt.Errorf("%sbyteorder is %q, not \"little\" or \"big\"", prefix, printable(string(b)))
		}
	}
	pkl, err := readRecord(records["data.pkl"], size, maxPickle)
	if err != nil {
		return nil, err
	}
	storages := map[string]*storage{}
	u := &unpickler{data: pkl, storage: func(key string, dtype DType, numel int64) (*storage, error) {
		if st := storages[key]; st != nil {
			return st, nil // as torch: the first storage type given for a key wins
		}
		f := records["data/"+key]
		if f == nil {
			return nil, fmt.Errorf("storage %q is missing: the archive has no %sdata/%s", printable(key), prefix, printable(key))
		}
		e := int64(dtype.Size())
		if numel > math.MaxInt64/e || uint64(numel*e) != f.UncompressedSize64 {
			return nil, fmt.Errorf("storage %q declares %d elements of %s but %s holds %d bytes", printable(key), numel, dtype, f.Name, f.UncompressedSize64)
		}
		st := &storage{key: key, dtype: dtype, numel: numel}
		storages[key] = st
		return st, nil
	}}
	v, err := u.load()
	if err != nil {
		return nil, fmt.Errorf("%sdata.pkl: %w", prefix, err)
	}
	return o.finish(v, u.tensors, 2*size, func(st *storage) error {
		f := records["data/"+st.key]
		if o.Header {
			return checkRecord(f, size, st.need)
		}
		b, err := readPrefix(f, size, st.need)
		if err != nil {
			return err
		}
		if big {
			byteswap(b, st.dtype.Size())
		}
		st.data = b
		return nil
	})
}

// findDataPkl returns the folder, with its slash, of the archive's one
// data.pkl: at the top or one folder down, as torch.save writes it.
func findDataPkl(files []*zip.File) (string, error) {
	found := []string{}
	for _, f := range files {
		if path.Base(f.Name) != "data.pkl" {
			continue
		}
		if dir := path.Dir(f.Name); dir == "." || !strings.Contains(dir, "/") {
			found = append(found, f.Name)
		}
	}
	switch len(found) {
	case 0:
		return "", errors.New("a zip archive without data.pkl: not a torch.save file")
	case 1:
		return strings.TrimSuffix(found[0], "data.pkl"), nil
	}
	return "", fmt.Errorf("a zip archive with %d data.pkl records (%s, %s): not a torch.save file", len(found), printable(found[0]), printable(found[1]))
}

// readRecord reads a whole zip record of at most limit bytes, checking its
// sizes against the file before allocating and its CRC after reading.
func readRecord(f *zip.File, fileSize, limit int64) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("record %s is %d bytes, more than the %d expected", printable(f.Name), f.UncompressedSize64, limit)
	}
	return readPrefix(f, fileSize, int64(f.UncompressedSize64))
}

// checkRecord checks a record of which keep bytes are needed against the
// file of fileSize bytes, from its header alone: where it lies, its sizes,
// its method, and that a deflated record holds no more than keep.
func checkRecord(f *zip.File, fileSize, keep int64) error {
	off, err := f.DataOffset()
	if err != nil {
		return fmt.Errorf("record %s: %v", printable(f.Name), err)
	}
	n, c := f.UncompressedSize64, f.CompressedSize64
	switch {
	case uint64(off) > uint64(fileSize) || c > uint64(fileSize-off):
		return fmt.Errorf("record %s runs past the end of the file (truncated?)", printable(f.Name))
	case f.Method == zip.Store && n != c:
		return fmt.Errorf("record %s: stored sizes %d and %d differ (corrupt archive)", printable(f.Name), n, c)
	case f.Method == zip.Deflate && n > maxDeflateRatio*c+64:
		return fmt.Errorf("record %s claims %d bytes from %d compressed (corrupt archive)", printable(f.Name), n, c)
	case f.Method == zip.Deflate && n > uint64(keep):
		// Inflating the rest only to check its CRC would let a few MB
		// of deflated zeros cost seconds each; torch never deflates.
		return fmt.Errorf("record %s holds %d bytes, more than its tensors use (%d bytes): the file is damaged or crafted (torch.save stores records uncompressed: save the state dict again with torch.save)", printable(f.Name), n, keep)
	case f.Method != zip.Store && f.Method != zip.Deflate:
		return fmt.Errorf("record %s uses compression method %d; torch.save stores records uncompressed", printable(f.Name), f.Method)
	}
	return nil
}

// readPrefix reads the first keep bytes of a record (keep at most its
// size) once checkRecord passes it, then reads on to its end to check its
// size and CRC: what is read past keep of a stored record lies in the
// file, and a deflated one is never inflated past keep. A deflated record
// is inflated twice: once to check that it inflates to its size and CRC,
// keeping nothing, then into a buffer of that size; so a record that
// claims more than it inflates to costs no memory.
func readPrefix(f *zip.File, fileSize, keep int64) ([]byte, error) {
	if err := checkRecord(f, fileSize, keep); err != nil {
		return nil, err
	}
	if f.Method == zip.Deflate {
		if _, err := readTo(f, io.Discard); err != nil {
			return nil, err
		}
	}
	b := make([]byte, keep)
	n, err := readTo(f, &prefixWriter{b: b})
	if err != nil {
		return nil, err
	}
	if n < keep {
		return nil, fmt.Errorf("record %s: %d bytes, fewer than the %d needed (corrupt archive)", printable(f.Name), n, keep)
	}
	return b, nil
}

// readTo writes the record's bytes to w, checking its size and CRC, and
// returns how many it wrote.
func readTo(f *zip.File, w io.Writer) (int64, error) {
	rc, err := f.Open()
	if err != nil {
		return 0, fmt.Errorf("record %s: %v", printable(f.Name), err)
	}
	defer rc.Close()
	n, err := io.Copy(w, rc)
	if errors.Is(err, zip.ErrFormat) {
		err = errors.New("longer than its declared size")
	}
	if err != nil {
		return n, fmt.Errorf("record %s: %v (truncated or corrupt archive)", printable(f.Name), err)
	}
	return n, nil
}

// prefixWriter keeps the first len(b) bytes written to it and drops the
// rest.
type prefixWriter struct {
	b []byte
	n int
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.n += copy(w.b[w.n:], p)
	return len(p), nil
}
