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

// readZip reads torch.save's zip format.
func readZip(r io.ReaderAt, size int64) (any, error) {
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
		b, err := readRecord(f, size, numel*e)
		if err != nil {
			return nil, err
		}
		if big {
			byteswap(b, int(e))
		}
		st := &storage{key: key, dtype: dtype, numel: numel, data: b}
		storages[key] = st
		return st, nil
	}}
	v, err := u.load()
	if err != nil {
		return nil, fmt.Errorf("%sdata.pkl: %w", prefix, err)
	}
	return finish(v, u.tensors, 2*size)
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

// readRecord reads a zip record of at most limit bytes, checking its sizes
// against the file before allocating and its CRC after reading.
func readRecord(f *zip.File, fileSize, limit int64) ([]byte, error) {
	off, err := f.DataOffset()
	if err != nil {
		return nil, fmt.Errorf("record %s: %v", printable(f.Name), err)
	}
	n, c := f.UncompressedSize64, f.CompressedSize64
	switch {
	case uint64(off) > uint64(fileSize) || c > uint64(fileSize-off):
		return nil, fmt.Errorf("record %s runs past the end of the file (truncated?)", printable(f.Name))
	case n > uint64(limit):
		return nil, fmt.Errorf("record %s is %d bytes, more than the %d expected", printable(f.Name), n, limit)
	case f.Method == zip.Store && n != c:
		return nil, fmt.Errorf("record %s: stored sizes %d and %d differ (corrupt archive)", printable(f.Name), n, c)
	case f.Method == zip.Deflate && n > maxDeflateRatio*c+64:
		return nil, fmt.Errorf("record %s claims %d bytes from %d compressed (corrupt archive)", printable(f.Name), n, c)
	case f.Method != zip.Store && f.Method != zip.Deflate:
		return nil, fmt.Errorf("record %s uses compression method %d; torch.save stores records uncompressed", printable(f.Name), f.Method)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("record %s: %v", printable(f.Name), err)
	}
	defer rc.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, fmt.Errorf("record %s: %v (truncated or corrupt archive)", printable(f.Name), err)
	}
	// Reading past the end checks the record's size and CRC.
	if k, err := rc.Read(make([]byte, 1)); k != 0 || err != io.EOF {
		if err == nil || err == io.EOF {
			err = errors.New("longer than its declared size")
		}
		return nil, fmt.Errorf("record %s: %v (corrupt archive)", printable(f.Name), err)
	}
	return b, nil
}
