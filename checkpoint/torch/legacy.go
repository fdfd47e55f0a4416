package torch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
)

// legacyMagic is the number the legacy format's first pickle holds.
var legacyMagic, _ = new(big.Int).SetString("1950a86a20f9469cfc6c", 16)

// legacyProtocol is the version its second pickle holds.
const legacyProtocol = 1001

// readLegacy reads torch.save's legacy format: the magic number, protocol
// version, sys_info and object pickles, the pickled list of storage keys,
// then each storage as an 8-byte little-endian element count and its
// little-endian elements (torch/serialization.py, _legacy_save). The file
// is read whole (its storages are its own bytes; nothing is inflated).
func (o Options) readLegacy(r io.ReaderAt, size int64) (any, error) {
	if size > math.MaxInt {
		return nil, fmt.Errorf("file of %d bytes is too large for this platform", size)
	}
	data := make([]byte, size)
	if _, err := r.ReadAt(data, 0); err != nil && err != io.EOF {
		return nil, err
	}
	u := &unpickler{data: data, legacy: true, storage: func(string, DType, int64) (*storage, error) {
		return nil, errors.New("a storage outside the saved object")
	}}
	magic, err := u.load()
	if errors.Is(err, errTruncated) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("not a torch.save file: %w", err)
	}
	if m, ok := magic.(*big.Int); !ok || m.Cmp(legacyMagic) != 0 {
		return nil, errors.New("not a torch.save file: a pickle without torch's magic number")
	}
	if p, err := u.load(); err != nil || p != int64(legacyProtocol) {
		return nil, fmt.Errorf("legacy protocol version %v, not %d (corrupt file?): %v", p, legacyProtocol, err)
	}
	if info, err := u.load(); err != nil {
		return nil, fmt.Errorf("sys_info pickle: %w", err)
	} else if _, ok := info.(*Dict); !ok {
		return nil, fmt.Errorf("sys_info is a %s, not a dict (corrupt file?)", typeName(info))
	}
	storages := map[string]*storage{}
	u.storage = func(key string, dtype DType, numel int64) (*storage, error) {
		if st := storages[key]; st != nil {
			return st, nil
		}
		if numel > size/int64(dtype.Size()) {
			return nil, fmt.Errorf("storage %q declares %d elements of %s, more than the file holds", printable(key), numel, dtype)
		}
		st := &storage{key: key, dtype: dtype, numel: numel}
		storages[key] = st
		return st, nil
	}
	obj, err := u.load()
	if err != nil {
		return nil, fmt.Errorf("object pickle: %w", err)
	}
	if err := readLegacyStorages(u, storages); err != nil {
		return nil, err
	}
	return o.finish(obj, u.tensors, 2*size, nil)
}

// readLegacyStorages reads the storage key list and the storages after it.
func readLegacyStorages(u *unpickler, storages map[string]*storage) error {
	u.storage = func(string, DType, int64) (*storage, error) {
		return nil, errors.New("a storage outside the saved object")
	}
	keys, err := u.load()
	if err != nil {
		return fmt.Errorf("storage key list: %w", err)
	}
	list, ok := keys.(*List)
	if !ok {
		return fmt.Errorf("the storage key list is a %s, not a list (corrupt file?)", typeName(keys))
	}
	pos := int64(u.pos)
	data := u.data
	for _, k := range list.Items {
		key, ok := k.(string)
		st := storages[key]
		if !ok || st == nil {
			return fmt.Errorf("storage key %s is not used by the saved object (corrupt file?)", describe(k))
		}
		if st.data != nil {
			return fmt.Errorf("storage %q is listed twice (corrupt file?)", printable(key))
		}
		if int64(len(data))-pos < 8 {
			return fmt.Errorf("storage %q: the file ends early (truncated?)", printable(key))
		}
		n := int64(binary.LittleEndian.Uint64(data[pos:]))
		pos += 8
		if n != st.numel {
			return fmt.Errorf("storage %q holds %d elements but the pickle declares %d (corrupt file?)", printable(key), n, st.numel)
		}
		nbytes := n * int64(st.dtype.Size())
		if nbytes > int64(len(data))-pos {
			return fmt.Errorf("storage %q: the file ends early (truncated?)", printable(key))
		}
		st.data = data[pos : pos+nbytes : pos+nbytes]
		pos += nbytes
	}
	return nil
}
