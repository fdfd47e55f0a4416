package torch

import (
	"fmt"
	"math/big"
	"strconv"
)

// The values [Load] returns are Go values of these types only:
//
//	nil         None
//	bool        bool
//	int64       int that fits 64 bits
//	*big.Int    any other int
//	float64     float
//	string      str (and Python 2 str)
//	[]byte      bytes, bytearray
//	*List       list
//	Tuple       tuple, torch.Size
//	*Dict       dict, collections.OrderedDict
//	*Tensor     torch.Tensor, torch.nn.Parameter
//	DType       a torch dtype object (torch.float32, ...)
//
// Storages and globals are internal: they never appear in a loaded value
// except as part of a tensor.

// List is a Python list.
type List struct{ Items []any }

// Tuple is a Python tuple (or torch.Size).
type Tuple []any

// Dict is a Python dict or collections.OrderedDict: keys in insertion order.
// Keys are str, bytes, int, float, bool or None; a key set twice keeps its
// first position and its last value, as in Python.
type Dict struct {
	// Ordered is true for a collections.OrderedDict.
	Ordered bool
	keys    []any
	vals    []any
	index   map[string]int
}

// Len is the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

// Entry returns the i-th key and value in insertion order.
func (d *Dict) Entry(i int) (key, value any) { return d.keys[i], d.vals[i] }

// Get returns the value under key and whether it is present.
func (d *Dict) Get(key any) (any, bool) {
	k, err := hashKey(key)
	if err != nil {
		return nil, false
	}
	i, ok := d.index[k]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// set stores value under key; keys of unhashable or unsupported types are
// errors.
func (d *Dict) set(key, value any) error {
	k, err := hashKey(key)
	if err != nil {
		return err
	}
	if d.index == nil {
		d.index = map[string]int{}
	}
	if i, ok := d.index[k]; ok {
		d.vals[i] = value
		return nil
	}
	d.index[k] = len(d.keys)
	d.keys = append(d.keys, key)
	d.vals = append(d.vals, value)
	return nil
}

// maxKeyLen bounds a str or bytes dict key, so that a pickle cannot make
// every SETITEM hash a huge string it stored once (state dict keys are short).
const maxKeyLen = 1 << 10

// hashKey is the identity of a dict key: equal for keys Python finds equal
// (1 == True, 2 == 2.0), among the key types this package accepts.
func hashKey(key any) (string, error) {
	switch k := key.(type) {
	case nil:
		return "n", nil
	case string:
		if len(k) > maxKeyLen {
			return "", fmt.Errorf("a dict key of %d bytes is longer than %d", len(k), maxKeyLen)
		}
		return "s" + k, nil
	case []byte:
		if len(k) > maxKeyLen {
			return "", fmt.Errorf("a dict key of %d bytes is longer than %d", len(k), maxKeyLen)
		}
		return "b" + string(k), nil
	case bool:
		if k {
			return "i1", nil
		}
		return "i0", nil
	case int64:
		return "i" + strconv.FormatInt(k, 10), nil
	case *big.Int:
		return "i" + k.String(), nil
	case float64:
		if k == float64(int64(k)) {
			return "i" + strconv.FormatInt(int64(k), 10), nil
		}
		return "f" + strconv.FormatFloat(k, 'g', -1, 64), nil
	}
	return "", fmt.Errorf("a dict key of type %s is not supported", typeName(key))
}

// TypeName is the Python name of the type of a value [Load] returns
// ("dict", "OrderedDict", "tensor", "int", ...), for messages.
func TypeName(v any) string { return typeName(v) }

// typeName is the Python name of a value's type, for error messages.
func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case *List:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		if v.Ordered {
			return "OrderedDict"
		}
		return "dict"
	case *Tensor:
		return "tensor"
	case DType:
		return "torch.dtype"
	case global:
		return v.String()
	case *storage:
		return "storage"
	}
	return fmt.Sprintf("%T", v)
}
