package torch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"
)

// ErrRefused is wrapped by the error for a pickle that names a global, or
// uses an opcode, outside the allow-list (see the package doc).
var ErrRefused = errors.New("a .pth may only hold tensors and plain containers")

// Bounds on the interpreter's state; a torch.save state dict of thousands
// of tensors stays far below them.
const (
	maxStack   = 1 << 20 // values on the stack, and open MARKs
	maxMemo    = 1 << 22 // memo entries
	maxIntText = 1 << 10 // bytes of one integer (LONG1, LONG4, INT, LONG)
)

// global is an allow-listed global a pickle named.
type global struct{ module, name string }

func (g global) String() string { return g.module + "." + g.name }

// unpickler interprets one pickle of data starting at pos. Nothing it runs
// is Python: opcodes build Go values, and calls reach only the allow-listed
// globals of call.
type unpickler struct {
	data  []byte
	pos   int
	stack []any
	marks []int // stack lengths at each open MARK
	memo  map[int64]any
	// storage returns the storage a persistent id names (key, dtype and
	// element count as declared); it checks them against the file.
	storage func(key string, dtype DType, numel int64) (*storage, error)
	// legacy is true for the legacy format, whose persistent ids have a
	// sixth field (a storage view, always None since PyTorch 0.4).
	legacy bool
	// tensors are the tensors built so far, to read once the storages are.
	tensors []*Tensor
	// built counts what calls have allocated (elements, bytes, a fixed
	// cost a tensor), bounded by callBudget: the memo lets a few bytes of
	// pickle repeat a call on one large argument any number of times.
	built int64
}

// callBudget bounds what calls may allocate for a pickle of n bytes: a
// few times what the pickle itself holds.
func callBudget(n int) int64 { return 4*int64(n) + 1<<16 }

// charge counts n more units allocated by a call against the budget.
func (u *unpickler) charge(n int) error {
	u.built += int64(n)
	if u.built > callBudget(len(u.data)) {
		return fmt.Errorf("the pickle's calls build more than %d values, more than a %d-byte pickle can describe", callBudget(len(u.data)), len(u.data))
	}
	return nil
}

// argBytes is the size of the fixed-size argument (an integer or a length)
// of the opcodes that have one.
var argBytes = [256]int{
	'K': 1, 'M': 2, 'J': 4, 0x8a: 1, 0x8b: 4, // BININT1, BININT2, BININT, LONG1, LONG4
	'h': 1, 'q': 1, 'j': 4, 'r': 4, // BINGET, BINPUT, LONG_BINGET, LONG_BINPUT
	'B': 4, 'C': 1, 0x8e: 8, 0x96: 8, // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
	'T': 4, 'X': 4, 'U': 1, 0x8c: 1, 0x8d: 8, // BINSTRING, BINUNICODE, SHORT_BINSTRING, SHORT_BINUNICODE, BINUNICODE8
	0x82: 1, 0x83: 2, 0x84: 4, // EXT1, EXT2, EXT4
}

// errTruncated is returned for a pickle that ends inside an opcode.
var errTruncated = errors.New("the pickle ends early (truncated file?)")

// load runs the pickle from u.pos to its STOP and returns its value; u.pos
// is then the byte after STOP.
func (u *unpickler) load() (any, error) {
	u.stack, u.marks = u.stack[:0], u.marks[:0]
	if u.memo == nil {
		u.memo = map[int64]any{}
	}
	clear(u.memo)
	for {
		at := u.pos
		if at >= len(u.data) {
			return nil, errTruncated
		}
		op := u.data[at]
		u.pos++
		v, done, err := u.step(op)
		if err != nil {
			if errors.Is(err, ErrRefused) || errors.Is(err, errTruncated) {
				return nil, err
			}
			return nil, fmt.Errorf("pickle byte %d (opcode %s): %w", at, opName(op), err)
		}
		if done {
			return v, nil
		}
	}
}

// opName is an opcode as pickletools names the common ones, or its value.
func opName(op byte) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("0x%02x", op)
}

var opNames = map[byte]string{
	'R': "REDUCE", 'b': "BUILD", 'c': "GLOBAL", 0x93: "STACK_GLOBAL", 'i': "INST", 'o': "OBJ",
	0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 'Q': "BINPERSID",
	'P': "PERSID", 's': "SETITEM", 'u': "SETITEMS", 'a': "APPEND", 'e': "APPENDS", '.': "STOP",
}

// step runs one opcode; done is true at STOP, with the pickle's value.
func (u *unpickler) step(op byte) (v any, done bool, err error) {
	switch op {
	case 0x80: // PROTO
		b, err := u.read(1)
		if err != nil {
			return nil, false, err
		}
		if b[0] > 5 {
			return nil, false, fmt.Errorf("pickle protocol %d is newer than 5", b[0])
		}
	case 0x95: // FRAME: the data is all in memory; only check the length
		n, err := u.uint(8)
		if err != nil {
			return nil, false, err
		}
		if n > uint64(len(u.data)-u.pos) {
			return nil, false, errTruncated
		}
	case '.': // STOP
		v, err := u.pop()
		return v, err == nil, err
	case '(': // MARK
		if len(u.marks) >= maxStack {
			return nil, false, errors.New("too many open MARKs")
		}
		u.marks = append(u.marks, len(u.stack))
	case '0': // POP
		if len(u.stack) > u.frame() {
			u.stack = u.stack[:len(u.stack)-1]
		} else {
			_, err = u.popMark()
		}
	case '1': // POP_MARK
		_, err = u.popMark()
	case '2': // DUP
		var top any
		if top, err = u.top(); err == nil {
			err = u.push(top)
		}
	default:
		return nil, false, u.stepValue(op)
	}
	return nil, false, err
}

// stepValue runs an opcode that pushes or changes a value.
func (u *unpickler) stepValue(op byte) error {
	switch op {
	case 'N':
		return u.push(nil)
	case 0x88:
		return u.push(true)
	case 0x89:
		return u.push(false)
	case 'I', 'L', 'J', 'K', 'M', 0x8a, 0x8b:
		return u.pushInt(op)
	case 'F': // FLOAT
		line, err := u.line()
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(string(line), 64)
		if err != nil {
			return fmt.Errorf("bad float %q", clip(line))
		}
		return u.push(f)
	case 'G': // BINFLOAT
		b, err := u.read(8)
		if err != nil {
			return err
		}
		return u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case 'S', 'T', 'U', 'V', 'X', 0x8c, 0x8d:
		return u.pushString(op)
	case 'B', 'C', 0x8e, 0x96:
		return u.pushBytes(op)
	case ')', 't', 0x85, 0x86, 0x87, ']', 'l', '}', 'd', 'a', 'e', 's', 'u':
		return u.container(op)
	case 'g', 'h', 'j', 'p', 'q', 'r', 0x94:
		return u.memoOp(op)
	case 'c', 0x93, 'R', 0x81, 0x92, 'o', 'i', 'b', 'P', 'Q':
		return u.callOp(op)
	case 0x82, 0x83, 0x84: // EXT1, EXT2, EXT4
		n := argBytes[op]
		code, err := u.uint(n)
		if err != nil {
			return err
		}
		return fmt.Errorf("refusing extension-registry code %d (%s): %w", code, opName(op), ErrRefused)
	case 0x8f, 0x90, 0x91: // EMPTY_SET, ADDITEMS, FROZENSET
		return errors.New("sets are not supported in a state dict")
	case 0x97, 0x98: // NEXT_BUFFER, READONLY_BUFFER
		return errors.New("out-of-band buffers are not supported")
	}
	return fmt.Errorf("unknown opcode 0x%02x (not a pickle, or a corrupt one)", op)
}

// read returns the next n bytes of the pickle.
func (u *unpickler) read(n int) ([]byte, error) {
	if n < 0 || n > len(u.data)-u.pos {
		return nil, errTruncated
	}
	b := u.data[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

// uint reads an n-byte little-endian unsigned integer.
func (u *unpickler) uint(n int) (uint64, error) {
	b, err := u.read(n)
	if err != nil {
		return 0, err
	}
	var x uint64
	for i := n - 1; i >= 0; i-- {
		x = x<<8 | uint64(b[i])
	}
	return x, nil
}

// length reads an n-byte length and checks that many bytes remain.
func (u *unpickler) length(n int) (int, error) {
	x, err := u.uint(n)
	if err != nil {
		return 0, err
	}
	if x > uint64(len(u.data)-u.pos) {
		return 0, errTruncated
	}
	return int(x), nil
}

// line reads up to the next newline, which it drops.
func (u *unpickler) line() ([]byte, error) {
	i := bytes.IndexByte(u.data[u.pos:], '\n')
	if i < 0 {
		return nil, errTruncated
	}
	b := u.data[u.pos : u.pos+i]
	u.pos += i + 1
	return bytes.TrimSuffix(b, []byte("\r")), nil
}

// frame is the stack length at the innermost open MARK.
func (u *unpickler) frame() int {
	if len(u.marks) == 0 {
		return 0
	}
	return u.marks[len(u.marks)-1]
}

func (u *unpickler) push(v any) error {
	if len(u.stack) >= maxStack {
		return fmt.Errorf("the pickle's stack grows past %d values", maxStack)
	}
	u.stack = append(u.stack, v)
	return nil
}

func (u *unpickler) pop() (any, error) {
	if len(u.stack) <= u.frame() {
		return nil, errors.New("stack underflow (corrupt pickle)")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) <= u.frame() {
		return nil, errors.New("stack underflow (corrupt pickle)")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark pops the values above the innermost MARK, and the MARK.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no MARK on the stack (corrupt pickle)")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

// pushInt runs the integer opcodes.
func (u *unpickler) pushInt(op byte) error {
	switch op {
	case 'J': // BININT
		x, err := u.uint(4)
		if err != nil {
			return err
		}
		return u.push(int64(int32(uint32(x))))
	case 'K', 'M': // BININT1, BININT2
		x, err := u.uint(argBytes[op])
		if err != nil {
			return err
		}
		return u.push(int64(x))
	case 0x8a, 0x8b: // LONG1, LONG4
		n, err := u.length(argBytes[op])
		if err != nil {
			return err
		}
		if n > maxIntText {
			return fmt.Errorf("an integer of %d bytes is too large", n)
		}
		b, _ := u.read(n)
		return u.push(decodeLong(b))
	}
	line, err := u.line() // INT, LONG
	if err != nil {
		return err
	}
	if op == 'I' && (string(line) == "00" || string(line) == "01") {
		return u.push(line[1] == '1')
	}
	x, err := parseInt(bytes.TrimSuffix(line, []byte("L")))
	if err != nil {
		return err
	}
	return u.push(x)
}

// parseInt parses a decimal integer of a text opcode.
func parseInt(b []byte) (any, error) {
	if len(b) > maxIntText {
		return nil, fmt.Errorf("an integer of %d digits is too large", len(b))
	}
	if x, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		return x, nil
	}
	x, ok := new(big.Int).SetString(string(b), 10)
	if !ok {
		return nil, fmt.Errorf("bad integer %q", clip(b))
	}
	return x, nil
}

// decodeLong decodes a little-endian two's complement integer, as an int64
// when it fits.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var x uint64
		for i := len(b) - 1; i >= 0; i-- {
			x = x<<8 | uint64(b[i])
		}
		shift := 64 - 8*uint(len(b))
		return int64(x<<shift) >> shift
	}
	be := make([]byte, len(b))
	for i, c := range b {
		be[len(b)-1-i] = c
	}
	x := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), 8*uint(len(b))))
	}
	if x.IsInt64() {
		return x.Int64()
	}
	return x
}

// pushString runs the string opcodes: STRING (a quoted Python 2 str)
// and UNICODE (raw-unicode-escape) lines, and the length-prefixed ones.
func (u *unpickler) pushString(op byte) error {
	var decode func([]byte) (string, error)
	switch op {
	case 'S':
		decode = unquote
	case 'V':
		decode = rawUnicodeEscape
	default:
		b, err := u.lengthBytes(argBytes[op])
		if err != nil {
			return err
		}
		return u.push(string(b))
	}
	line, err := u.line()
	if err != nil {
		return err
	}
	s, err := decode(line)
	if err != nil {
		return err
	}
	return u.push(s)
}

// pushBytes runs the bytes opcodes.
func (u *unpickler) pushBytes(op byte) error {
	n := argBytes[op]
	b, err := u.lengthBytes(n)
	if err != nil {
		return err
	}
	return u.push(bytes.Clone(b))
}

// lengthBytes reads an n-byte length and that many bytes.
func (u *unpickler) lengthBytes(n int) ([]byte, error) {
	l, err := u.length(n)
	if err != nil {
		return nil, err
	}
	return u.read(l)
}

// unquote decodes the repr of a Python 2 str, as protocol 0 writes it.
func unquote(line []byte) (string, error) {
	if len(line) < 2 || (line[0] != '\'' && line[0] != '"') || line[len(line)-1] != line[0] {
		return "", fmt.Errorf("the STRING opcode's argument %q is not quoted", clip(line))
	}
	s := line[1 : len(line)-1]
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			out = append(out, c)
			continue
		}
		i++
		switch c = s[i]; c {
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'a':
			out = append(out, '\a')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'v':
			out = append(out, '\v')
		case 'x':
			if i+2 >= len(s) {
				return "", fmt.Errorf("bad \\x escape in %q", clip(line))
			}
			x, err := strconv.ParseUint(string(s[i+1:i+3]), 16, 8)
			if err != nil {
				return "", fmt.Errorf("bad \\x escape in %q", clip(line))
			}
			out = append(out, byte(x))
			i += 2
		case '0', '1', '2', '3', '4', '5', '6', '7':
			x, j := 0, i
			for ; j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7'; j++ {
				x = x*8 + int(s[j]-'0')
			}
			out = append(out, byte(x))
			i = j - 1
		default: // \\, \', \" and unknown escapes, which Python keeps
			if c != '\\' && c != '\'' && c != '"' {
				out = append(out, '\\')
			}
			out = append(out, c)
		}
	}
	return string(out), nil
}

// rawUnicodeEscape decodes Python's raw-unicode-escape: \uXXXX and
// \UXXXXXXXX escapes, every other byte a Latin-1 character.
func rawUnicodeEscape(b []byte) (string, error) {
	var out []rune
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) && (b[i+1] == 'u' || b[i+1] == 'U') {
			n := 4
			if b[i+1] == 'U' {
				n = 8
			}
			if i+2+n > len(b) {
				return "", fmt.Errorf("bad \\%c escape in %q", b[i+1], clip(b))
			}
			x, err := strconv.ParseUint(string(b[i+2:i+2+n]), 16, 32)
			if err != nil || x > utf8.MaxRune {
				return "", fmt.Errorf("bad \\%c escape in %q", b[i+1], clip(b))
			}
			out = append(out, rune(x))
			i += 1 + n
			continue
		}
		out = append(out, rune(b[i]))
	}
	return string(out), nil
}

// clip shortens a pickle's text for an error message.
func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "..."
	}
	return string(b)
}
