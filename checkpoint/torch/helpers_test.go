package torch

import (
	"encoding/hex"
	"math/big"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/internal/pthtest"
)

// fixture is a file of testdata/pth, made by scripts/handmade_pth.py.
func fixture(t testing.TB, name string) string {
	p, err := filepath.Abs(filepath.Join("..", "..", "testdata", "pth", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loads runs one pickle whose persistent ids get zero-filled storages of
// the declared size (up to 1 MiB), and reads its tensors.
func loads(data []byte) (any, error) {
	u := &unpickler{data: data, storage: func(key string, dtype DType, numel int64) (*storage, error) {
		if numel > 1<<20 {
			return nil, strconv.ErrRange
		}
		return &storage{key: key, dtype: dtype, numel: numel, data: make([]byte, numel*int64(dtype.Size()))}, nil
	}}
	v, err := u.load()
	if err != nil {
		return nil, err
	}
	return Options{}.finish(v, u.tensors, 1<<20, nil)
}

// Short names for the pickle builders.
var (
	uni   = pthtest.Uni
	glob  = pthtest.Glob
	intOp = pthtest.Int
)

// pid is a persistent id for a float storage of numel elements.
func pid(key string, numel int) string { return pthtest.Pid("FloatStorage", key, numel) }

// tensorOp is a float tensor of storage key (numel elements).
func tensorOp(key string, numel, offset int, size, stride []int) string {
	return pthtest.Tensor("FloatStorage", key, numel, offset, size, stride)
}

// canon renders a loaded value as scripts/handmade_pth.py's canon renders
// the Python value (decoded from JSON, so it compares with that).
func canon(v any) any {
	m := func(k string, x any) map[string]any { return map[string]any{k: x} }
	list := func(items []any) []any {
		out := []any{}
		for _, x := range items {
			out = append(out, canon(x))
		}
		return out
	}
	switch v := v.(type) {
	case nil:
		return m("none", true)
	case bool:
		return m("bool", v)
	case int64:
		return m("int", strconv.FormatInt(v, 10))
	case *big.Int:
		return m("int", v.String())
	case float64:
		return m("float", pyFloat(v))
	case string:
		return m("str", v)
	case []byte:
		return m("bytes", hex.EncodeToString(v))
	case *List:
		return m("list", list(v.Items))
	case Tuple:
		return m("tuple", list(v))
	case *Dict:
		items := []any{}
		for i := range v.Len() {
			k, x := v.Entry(i)
			items = append(items, []any{canon(k), canon(x)})
		}
		return map[string]any{"dict": items, "ordered": v.Ordered}
	}
	return m("unexpected", typeName(v))
}

// pyFloat is Python's repr of a float, for the values the fixture holds.
func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}
