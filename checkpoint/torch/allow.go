package torch

import (
	"errors"
	"fmt"
	"strconv"
)

// Callable allow-listed globals.
var (
	orderedDict        = global{"collections", "OrderedDict"}
	rebuildTensorV2    = global{"torch._utils", "_rebuild_tensor_v2"}
	rebuildTensorV3    = global{"torch._utils", "_rebuild_tensor_v3"}
	rebuildTensor      = global{"torch._utils", "_rebuild_tensor"}
	rebuildParam       = global{"torch._utils", "_rebuild_parameter"}
	rebuildParamState  = global{"torch._utils", "_rebuild_parameter_with_state"}
	torchSize          = global{"torch", "Size"}
	codecsEncode       = global{"_codecs", "encode"}
	bytesType          = global{"builtins", "bytes"}
	bytesType2         = global{"__builtin__", "bytes"} // as protocols 0-2 spell it
	untypedStorage     = global{"torch", "UntypedStorage"}
	untypedStorageFull = global{"torch.storage", "UntypedStorage"}
)

// lookup resolves a global the pickle names, or refuses it. The refusal
// happens here, when the global is named, before any call could use it.
func lookup(module, name string) (any, error) {
	g := global{module, name}
	switch g {
	case orderedDict, rebuildTensorV2, rebuildTensorV3, rebuildTensor, rebuildParam, rebuildParamState,
		torchSize, codecsEncode, bytesType, bytesType2, untypedStorage, untypedStorageFull:
		return g, nil
	}
	if module == "torch" || module == "torch.cuda" {
		if _, ok := storageTypes[name]; ok {
			return g, nil
		}
	}
	if module == "torch" {
		if d, ok := dtypeNames[name]; ok {
			return d, nil
		}
	}
	return nil, fmt.Errorf("refusing %s.%s: %w", printable(module), printable(name), ErrRefused)
}

// printable is a name from a pickle, quoted if it is not a plain Python
// dotted name, and shortened.
func printable(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	for _, c := range s {
		if !(c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// storageDType is the element type of a storage class global.
func storageDType(v any) (DType, bool) {
	g, ok := v.(global)
	if !ok {
		return "", false
	}
	if g == untypedStorage || g == untypedStorageFull {
		return U8, true // as torch's _load: an untyped storage holds bytes
	}
	if g.module != "torch" && g.module != "torch.cuda" {
		return "", false
	}
	d, ok := storageTypes[g.name]
	return d, ok
}

// callOp runs the opcodes that name globals, call them, set state or load
// persistent ids.
func (u *unpickler) callOp(op byte) error {
	switch op {
	case 'c', 'i': // GLOBAL, INST
		module, err := u.line()
		if err != nil {
			return err
		}
		name, err := u.line()
		if err != nil {
			return err
		}
		g, err := lookup(string(module), string(name))
		if err != nil {
			return err
		}
		if op == 'c' {
			return u.push(g)
		}
		args, err := u.popMark()
		if err != nil {
			return err
		}
		return u.callPush(g, Tuple(args))
	case 0x93: // STACK_GLOBAL
		name, err := u.pop()
		if err != nil {
			return err
		}
		module, err := u.pop()
		if err != nil {
			return err
		}
		m, ok1 := module.(string)
		n, ok2 := name.(string)
		if !ok1 || !ok2 {
			return errors.New("STACK_GLOBAL needs two strings")
		}
		g, err := lookup(m, n)
		if err != nil {
			return err
		}
		return u.push(g)
	case 'o': // OBJ
		items, err := u.popMark()
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return errors.New("OBJ without a class (corrupt pickle)")
		}
		return u.callPush(items[0], Tuple(items[1:]))
	case 'b': // BUILD
		return u.build()
	case 'P', 'Q': // PERSID, BINPERSID
		return u.persistent(op)
	}
	return u.reduce(op) // REDUCE, NEWOBJ, NEWOBJ_EX
}

// reduce runs REDUCE, NEWOBJ and NEWOBJ_EX.
func (u *unpickler) reduce(op byte) error {
	if op == 0x92 {
		kw, err := u.pop()
		if err != nil {
			return err
		}
		if d, ok := kw.(*Dict); !ok || d.Len() != 0 {
			return errors.New("keyword arguments are not supported")
		}
	}
	args, err := u.pop()
	if err != nil {
		return err
	}
	fn, err := u.pop()
	if err != nil {
		return err
	}
	t, ok := args.(Tuple)
	if !ok {
		return fmt.Errorf("the arguments of a call are a %s, not a tuple", typeName(args))
	}
	return u.callPush(fn, t)
}

// callPush calls an allow-listed callable and pushes its result.
func (u *unpickler) callPush(fn any, args Tuple) error {
	v, err := u.call(fn, args)
	if err != nil {
		return err
	}
	return u.push(v)
}

// call is the only place a pickle's calls reach: each allow-listed callable
// is implemented here in Go, on checked arguments.
func (u *unpickler) call(fn any, a Tuple) (any, error) {
	g, ok := fn.(global)
	if !ok {
		return nil, fmt.Errorf("refusing to call a %s: %w", typeName(fn), ErrRefused)
	}
	switch g {
	case orderedDict:
		if len(a) != 0 {
			return nil, errors.New("collections.OrderedDict is called with arguments; torch.save never does that")
		}
		return &Dict{Ordered: true}, nil
	case rebuildTensorV2, rebuildTensorV3, rebuildTensor:
		return u.rebuildTensor(g, a)
	case rebuildParam, rebuildParamState:
		n := 3
		if g == rebuildParamState {
			n = 4
		}
		if len(a) != n {
			return nil, fmt.Errorf("%s takes %d arguments, not %d", g, n, len(a))
		}
		t, ok := a[0].(*Tensor)
		if !ok {
			return nil, fmt.Errorf("%s of a %s, not a tensor", g, typeName(a[0]))
		}
		return t, nil
	case torchSize:
		if len(a) != 1 {
			return nil, fmt.Errorf("torch.Size takes 1 argument, not %d", len(a))
		}
		dims, err := ints(a[0], "torch.Size")
		if err != nil {
			return nil, err
		}
		if err := u.charge(len(dims)); err != nil {
			return nil, err
		}
		t := make(Tuple, len(dims))
		for i, d := range dims {
			t[i] = d
		}
		return t, nil
	case codecsEncode:
		if s, ok := a[0].(string); ok && len(a) == 2 {
			if err := u.charge(len(s)); err != nil {
				return nil, err
			}
		}
		return encodeLatin1(a)
	case bytesType, bytesType2:
		if len(a) != 0 {
			return nil, errors.New("bytes is called with arguments; pickle only calls bytes() for b\"\"")
		}
		return []byte{}, nil
	}
	return nil, fmt.Errorf("refusing to call %s: %w", g, ErrRefused)
}

// encodeLatin1 is _codecs.encode(s, "latin1"), how protocol 2 writes bytes.
func encodeLatin1(a Tuple) (any, error) {
	if len(a) != 2 {
		return nil, fmt.Errorf("_codecs.encode takes 2 arguments here, not %d", len(a))
	}
	s, ok1 := a[0].(string)
	enc, ok2 := a[1].(string)
	if !ok1 || !ok2 || (enc != "latin1" && enc != "latin-1") {
		return nil, errors.New(`only _codecs.encode(str, "latin1") is supported`)
	}
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return nil, errors.New("_codecs.encode: a character is not Latin-1")
		}
		b = append(b, byte(r))
	}
	return b, nil
}

// rebuildArgs are the fewest and most arguments of each rebuild function.
var rebuildArgs = map[global][2]int{rebuildTensor: {4, 4}, rebuildTensorV2: {6, 7}, rebuildTensorV3: {7, 8}}

// rebuildTensor is torch._utils._rebuild_tensor_v2(storage, storage_offset,
// size, stride, requires_grad, backward_hooks[, metadata]), the older
// _rebuild_tensor(storage, storage_offset, size, stride), and
// _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad,
// backward_hooks, dtype[, metadata]), which torch writes for element types
// without a typed storage class: an untyped (byte) storage viewed as dtype.
// The view is checked against the storage's declared size here; its data
// is read later.
func (u *unpickler) rebuildTensor(g global, a Tuple) (any, error) {
	nargs := rebuildArgs[g]
	if len(a) < nargs[0] || len(a) > nargs[1] {
		return nil, fmt.Errorf("%s with %d arguments", g, len(a))
	}
	st, ok := a[0].(*storage)
	if !ok {
		return nil, fmt.Errorf("%s of a %s, not a storage", g, typeName(a[0]))
	}
	offset, ok := a[1].(int64)
	if !ok {
		return nil, fmt.Errorf("%s: the storage offset is a %s, not an int", g, typeName(a[1]))
	}
	size, err := ints(a[2], "tensor size")
	if err != nil {
		return nil, err
	}
	stride, err := ints(a[3], "tensor stride")
	if err != nil {
		return nil, err
	}
	if len(size) > maxRank {
		return nil, fmt.Errorf("%s: a tensor of %d dimensions (at most %d)", g, len(size), maxRank)
	}
	if err := u.charge(tensorCost + len(size) + len(stride)); err != nil {
		return nil, err
	}
	dtype, numel := st.dtype, st.numel
	if g != rebuildTensor {
		if _, ok := a[4].(bool); !ok {
			return nil, fmt.Errorf("%s: requires_grad is a %s, not a bool", g, typeName(a[4]))
		}
		if _, ok := a[5].(*Dict); !ok {
			return nil, fmt.Errorf("%s: backward_hooks is a %s, not an OrderedDict", g, typeName(a[5]))
		}
		if g == rebuildTensorV3 {
			if dtype, ok = a[6].(DType); !ok {
				return nil, fmt.Errorf("%s: dtype is a %s, not a torch.dtype", g, typeName(a[6]))
			}
			numel = st.numel * int64(st.dtype.Size()) / int64(dtype.Size())
		}
		if len(a) == nargs[1] {
			if err := plainMetadata(a[nargs[1]-1]); err != nil {
				return nil, err
			}
		}
	}
	v, err := newView(st, numel, offset, size, stride)
	if err != nil {
		return nil, err
	}
	t := &Tensor{DType: dtype, view: v}
	u.tensors = append(u.tensors, t)
	return t, nil
}

// maxRank bounds a tensor's dimensions; tensorCost is what a tensor counts
// against the call budget besides its size and stride.
const (
	maxRank    = 64
	tensorCost = 64
)

// plainMetadata accepts the metadata torch.save adds to a tensor only if it
// changes nothing (every flag false): a negated or conjugated view is not a
// state dict's weight.
func plainMetadata(v any) error {
	d, ok := v.(*Dict)
	if !ok {
		return fmt.Errorf("tensor metadata is a %s, not a dict", typeName(v))
	}
	for i := range d.Len() {
		k, val := d.Entry(i)
		if val != false {
			return fmt.Errorf("tensor metadata %v=%v is not supported", k, val)
		}
	}
	return nil
}

// ints reads a tuple or list of ints (a tensor's size or stride).
func ints(v any, what string) ([]int64, error) {
	var items []any
	switch v := v.(type) {
	case Tuple:
		items = v
	case *List:
		items = v.Items
	default:
		return nil, fmt.Errorf("%s is a %s, not a tuple", what, typeName(v))
	}
	out := make([]int64, len(items))
	for i, x := range items {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("%s holds a %s, not an int", what, typeName(x))
		}
		out[i] = n
	}
	return out, nil
}

// build runs BUILD, which sets an object's state. Only an OrderedDict may
// receive one (the _metadata attribute of a module's state_dict()); the
// state must be plain data and is dropped.
func (u *unpickler) build() error {
	state, err := u.pop()
	if err != nil {
		return err
	}
	inst, err := u.top()
	if err != nil {
		return err
	}
	if d, ok := inst.(*Dict); !ok || !d.Ordered {
		return fmt.Errorf("refusing to set the state of a %s: %w", typeName(inst), ErrRefused)
	}
	switch s := state.(type) {
	case nil, *Dict:
		return nil
	case Tuple:
		if len(s) == 2 {
			_, ok1 := s[0].(*Dict)
			_, ok2 := s[1].(*Dict)
			if (ok1 || s[0] == nil) && (ok2 || s[1] == nil) {
				return nil
			}
		}
	}
	return fmt.Errorf("an OrderedDict's state is a %s, not a dict", typeName(state))
}

// persistent runs PERSID and BINPERSID: torch.save's persistent ids are
// ('storage', storage_type, key, location, numel), with a sixth field, a
// storage view (always None since PyTorch 0.4), in the legacy format.
func (u *unpickler) persistent(op byte) error {
	var pid any
	var err error
	if op == 'P' {
		var line []byte
		if line, err = u.line(); err == nil {
			pid = string(line)
		}
	} else {
		pid, err = u.pop()
	}
	if err != nil {
		return err
	}
	t, ok := pid.(Tuple)
	want := 5
	if u.legacy {
		want = 6
	}
	if !ok || len(t) != want || asciiString(t[0]) != "storage" {
		return fmt.Errorf("persistent id %s is not a torch.save storage", describe(pid))
	}
	dtype, ok := storageDType(t[1])
	if !ok {
		return fmt.Errorf("persistent id's storage type is a %s, not a storage class", typeName(t[1]))
	}
	key, ok := t[2].(string)
	if !ok {
		return fmt.Errorf("persistent id's storage key is a %s, not a str", typeName(t[2]))
	}
	if _, ok := t[3].(string); !ok && asciiString(t[3]) == "" {
		return fmt.Errorf("persistent id's location is a %s, not a str", typeName(t[3]))
	}
	numel, ok := t[4].(int64)
	if !ok || numel < 0 {
		return fmt.Errorf("persistent id's element count %v is not a non-negative int", t[4])
	}
	if u.legacy && t[5] != nil {
		return errors.New("storage views (PyTorch before 0.4) are not supported; re-save the file with a newer PyTorch")
	}
	st, err := u.storage(key, dtype, numel)
	if err != nil {
		return err
	}
	return u.push(st)
}

// asciiString is a str, or bytes decoded as torch's _maybe_decode_ascii
// does; "" for anything else.
func asciiString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// describe is a short description of a value for an error message.
func describe(v any) string {
	if s, ok := v.(string); ok {
		return strconv.QuoteToASCII(printable(s))
	}
	return "of type " + typeName(v)
}
