package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// metadataKey is the reserved header key holding string metadata.
const metadataKey = "__metadata__"

// header is a parsed, not yet range-checked, safetensors header.
type header struct {
	tensors  []*TensorInfo
	metadata map[string]string
}

// jsonTokens walks a JSON document token by token, so that duplicate keys and
// wrong types are seen rather than silently merged or coerced.
type jsonTokens struct {
	dec *json.Decoder
}

func newJSONTokens(b []byte) *jsonTokens {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return &jsonTokens{dec: dec}
}

// next returns the next token, turning syntax errors into one-line messages.
func (j *jsonTokens) next() (json.Token, error) {
	tok, err := j.dec.Token()
	if err == nil {
		return tok, nil
	}
	if err == io.EOF {
		return nil, errors.New("not valid JSON: unexpected end of input")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("not valid JSON at byte %d: %s", se.Offset, oneLine(se.Error()))
	}
	if err == io.ErrUnexpectedEOF {
		return nil, errors.New("not valid JSON: unexpected end of input")
	}
	return nil, fmt.Errorf("not valid JSON: %s", oneLine(err.Error()))
}

// end checks that nothing but whitespace follows the top-level value.
func (j *jsonTokens) end() error {
	tok, err := j.dec.Token()
	switch {
	case err == io.EOF:
		return nil
	case err != nil:
		return errors.New("not valid JSON: trailing data after the top-level object")
	}
	return fmt.Errorf("not valid JSON: %s follows the top-level object", describeToken(tok))
}

// describeToken names a token's JSON type for error messages.
func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", string(t))
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// skipValue consumes the rest of a value whose first token was tok.
func (j *jsonTokens) skipValue(tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return nil
	}
	depth := 1
	for depth > 0 {
		t, err := j.next()
		if err != nil {
			return err
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// oneLine flattens a message onto one line.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// parseHeader parses and type-checks a header. Sizes and offsets are checked
// against each other here; against the data section by the caller.
func parseHeader(b []byte) (*header, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("header is not valid UTF-8")
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, fmt.Errorf("header is not a JSON object: it must start with '{'")
	}
	j := newJSONTokens(b)
	tok, err := j.next()
	if err != nil {
		return nil, fmt.Errorf("header is %w", err)
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("header is not a JSON object")
	}
	h := &header{}
	seen := map[string]bool{}
	for j.dec.More() {
		tok, err := j.next()
		if err != nil {
			return nil, fmt.Errorf("header is %w", err)
		}
		key, ok := tok.(string)
		if !ok { // cannot happen: object keys are strings
			return nil, fmt.Errorf("header is not valid JSON: object key is %s", describeToken(tok))
		}
		if seen[key] {
			if key == metadataKey {
				return nil, fmt.Errorf("header has %q twice", key)
			}
			return nil, fmt.Errorf("header has tensor %q twice", key)
		}
		seen[key] = true
		if key == metadataKey {
			if h.metadata, err = j.parseMetadata(); err != nil {
				return nil, err
			}
			continue
		}
		t, err := j.parseTensor(key)
		if err != nil {
			return nil, err
		}
		h.tensors = append(h.tensors, t)
	}
	if _, err := j.next(); err != nil { // the closing '}'
		return nil, fmt.Errorf("header is %w", err)
	}
	if err := j.end(); err != nil {
		return nil, fmt.Errorf("header is %w", err)
	}
	return h, nil
}

// parseMetadata reads the __metadata__ object: string keys to string values.
// null is taken as no metadata.
func (j *jsonTokens) parseMetadata() (map[string]string, error) {
	tok, err := j.next()
	if err != nil {
		return nil, fmt.Errorf("header is %w", err)
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("%q is %s, not an object of strings", metadataKey, describeToken(tok))
	}
	m := map[string]string{}
	for j.dec.More() {
		tok, err := j.next()
		if err != nil {
			return nil, fmt.Errorf("header is %w", err)
		}
		k, _ := tok.(string)
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%q has key %q twice", metadataKey, k)
		}
		tok, err = j.next()
		if err != nil {
			return nil, fmt.Errorf("header is %w", err)
		}
		v, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%q value for %q is %s; metadata values must be strings", metadataKey, k, describeToken(tok))
		}
		m[k] = v
	}
	if _, err := j.next(); err != nil {
		return nil, fmt.Errorf("header is %w", err)
	}
	return m, nil
}

// parseTensor reads one tensor entry: {"dtype": s, "shape": [n...],
// "data_offsets": [begin, end]}, each field exactly once and nothing else.
func (j *jsonTokens) parseTensor(name string) (*TensorInfo, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("tensor %q: %s", name, fmt.Sprintf(format, args...))
	}
	if name == "" {
		return nil, fmt.Errorf("header has a tensor with an empty name")
	}
	tok, err := j.next()
	if err != nil {
		return nil, fmt.Errorf("header is %w", err)
	}
	if tok != json.Delim('{') {
		return nil, fail("entry is %s, not an object", describeToken(tok))
	}
	t := &TensorInfo{Name: name}
	var haveDType, haveShape, haveOffsets bool
	for j.dec.More() {
		tok, err := j.next()
		if err != nil {
			return nil, fmt.Errorf("header is %w", err)
		}
		field, _ := tok.(string)
		switch field {
		case "dtype":
			if haveDType {
				return nil, fail(`has "dtype" twice`)
			}
			haveDType = true
			tok, err := j.next()
			if err != nil {
				return nil, fmt.Errorf("header is %w", err)
			}
			s, ok := tok.(string)
			if !ok {
				return nil, fail(`"dtype" is %s, not a string`, describeToken(tok))
			}
			t.DType = DType(s)
			if t.DType.Size() == 0 {
				return nil, fail("unsupported dtype %q (supported: %s)", s, dtypeNames)
			}
		case "shape":
			if haveShape {
				return nil, fail(`has "shape" twice`)
			}
			haveShape = true
			dims, err := j.intArray(fail, "shape", "dimension")
			if err != nil {
				return nil, err
			}
			t.Shape = make([]int, len(dims))
			for i, d := range dims {
				if d > math.MaxInt {
					return nil, fail("dimension %d is too large", d)
				}
				t.Shape[i] = int(d)
			}
		case "data_offsets":
			if haveOffsets {
				return nil, fail(`has "data_offsets" twice`)
			}
			haveOffsets = true
			offs, err := j.intArray(fail, "data_offsets", "offset")
			if err != nil {
				return nil, err
			}
			if len(offs) != 2 {
				return nil, fail(`"data_offsets" has %d values, want [begin, end]`, len(offs))
			}
			if offs[0] > offs[1] {
				return nil, fail(`"data_offsets" [%d, %d] ends before it begins`, offs[0], offs[1])
			}
			t.Begin, t.End = offs[0], offs[1]
		default:
			return nil, fail("unknown field %q (want dtype, shape, data_offsets)", field)
		}
	}
	if _, err := j.next(); err != nil {
		return nil, fmt.Errorf("header is %w", err)
	}
	switch {
	case !haveDType:
		return nil, fail(`missing "dtype"`)
	case !haveShape:
		return nil, fail(`missing "shape"`)
	case !haveOffsets:
		return nil, fail(`missing "data_offsets"`)
	}
	n, ok := byteSize(t.DType, t.Shape)
	if !ok {
		return nil, fail("shape %v of %s is too large", t.Shape, t.DType)
	}
	if t.End-t.Begin != n {
		return nil, fail("data_offsets [%d, %d] hold %d bytes but %s %v needs %d", t.Begin, t.End, t.End-t.Begin, t.DType, t.Shape, n)
	}
	return t, nil
}

// intArray reads an array of non-negative integers that fit in an int64.
// Its length is bounded by the header size, which the caller has checked.
func (j *jsonTokens) intArray(fail func(string, ...any) error, field, what string) ([]int64, error) {
	tok, err := j.next()
	if err != nil {
		return nil, fmt.Errorf("header is %w", err)
	}
	if tok != json.Delim('[') {
		return nil, fail("%q is %s, not an array of integers", field, describeToken(tok))
	}
	var out []int64
	for j.dec.More() {
		tok, err := j.next()
		if err != nil {
			return nil, fmt.Errorf("header is %w", err)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fail("%q has %s, not an integer", field, describeToken(tok))
		}
		s := string(num)
		if strings.ContainsAny(s, ".eE") {
			return nil, fail("%q has %s %s, not an integer", field, what, s)
		}
		v, err := strconv.ParseInt(s, 10, 64)
		switch {
		case strings.HasPrefix(s, "-") && s != "-0":
			return nil, fail("%q has negative %s %s", field, what, s)
		case err != nil:
			return nil, fail("%q has %s %s, too large", field, what, s)
		}
		out = append(out, v)
	}
	if _, err := j.next(); err != nil {
		return nil, fmt.Errorf("header is %w", err)
	}
	return out, nil
}

// byteSize is elems(shape)*d.Size(), false if that overflows an int64 or the
// element count overflows an int. A zero dimension makes the tensor empty,
// but the other dimensions' product must still not overflow.
func byteSize(d DType, shape []int) (int64, bool) {
	if d.Size() == 0 {
		return 0, false
	}
	prod, zero := int64(1), false
	for _, s := range shape {
		if s == 0 {
			zero = true
			continue
		}
		if s < 0 || prod > math.MaxInt64/int64(s) {
			return 0, false
		}
		prod *= int64(s)
	}
	if prod > int64(math.MaxInt) || prod > math.MaxInt64/int64(d.Size()) {
		return 0, false
	}
	if zero {
		return 0, true
	}
	return prod * int64(d.Size()), true
}
