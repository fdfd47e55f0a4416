// Package ncnn reads ncnn model files: the text .param graph and the .bin
// weight blob, the format Real-ESRGAN and video2x distribute their models in.
//
// It only parses; it never interprets a layer. Model packages decide which
// layer types they support and read each layer's weights in order with a
// WeightReader.
package ncnn

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Magic is the first line of every text .param file.
const Magic = 7767517

// Limits that keep a malicious file from asking for absurd allocations.
const (
	maxLayers    = 1 << 16
	maxBlobs     = 1 << 17
	maxLineBytes = 1 << 20
	maxArrayLen  = 1 << 16
)

// Param is one "key=value" entry of a layer line: a scalar or an array.
type Param struct {
	Ints    []int     // the value as integers (floats truncated)
	Floats  []float32 // the value as floats
	IsArray bool
}

// Layer is one line of a .param file.
type Layer struct {
	Line    int // 1-based line number in the .param file
	Type    string
	Name    string
	Bottoms []string
	Tops    []string
	Params  map[int]Param
}

// Net is a parsed .param graph.
type Net struct {
	Layers    []*Layer
	BlobCount int
}

func (l *Layer) String() string { return fmt.Sprintf("layer %s (%s)", l.Name, l.Type) }

// Int returns scalar parameter id as an integer, or def when absent.
func (l *Layer) Int(id, def int) int {
	p, ok := l.Params[id]
	if !ok || p.IsArray || len(p.Ints) == 0 {
		return def
	}
	return p.Ints[0]
}

// Float returns scalar parameter id as a float, or def when absent.
func (l *Layer) Float(id int, def float32) float32 {
	p, ok := l.Params[id]
	if !ok || p.IsArray || len(p.Floats) == 0 {
		return def
	}
	return p.Floats[0]
}

// Has reports whether parameter id is present.
func (l *Layer) Has(id int) bool {
	_, ok := l.Params[id]
	return ok
}

// ParseParam parses a text .param file. Every problem is reported with the
// line and, once known, the layer it concerns.
func ParseParam(r io.Reader) (*Net, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLineBytes)
	line := 0
	next := func() ([]string, error) {
		for sc.Scan() {
			line++
			f := strings.Fields(sc.Text())
			if len(f) > 0 {
				return f, nil
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("line %d: %w", line+1, err)
		}
		return nil, io.EOF
	}
	f, err := next()
	if err != nil {
		return nil, fmt.Errorf("empty .param file: %w", err)
	}
	if len(f) != 1 || f[0] != strconv.Itoa(Magic) {
		if bytes.HasPrefix([]byte(f[0]), []byte{0xdd, 0xcc}) || !isPrintable(f[0]) {
			return nil, fmt.Errorf("not a text ncnn .param file (binary .param.bin files are not supported)")
		}
		return nil, fmt.Errorf("line %d: not an ncnn .param file: first line is %q, want magic %d", line, strings.Join(f, " "), Magic)
	}
	f, err = next()
	if err != nil {
		return nil, fmt.Errorf("line 2: missing layer and blob counts")
	}
	if len(f) != 2 {
		return nil, fmt.Errorf("line %d: want \"layer_count blob_count\", got %q", line, strings.Join(f, " "))
	}
	nLayers, err1 := strconv.Atoi(f[0])
	nBlobs, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || nLayers <= 0 || nBlobs <= 0 || nLayers > maxLayers || nBlobs > maxBlobs {
		return nil, fmt.Errorf("line %d: bad layer/blob counts %q", line, strings.Join(f, " "))
	}
	net := &Net{BlobCount: nBlobs}
	names := map[string]bool{}
	for i := 0; i < nLayers; i++ {
		f, err := next()
		if err == io.EOF {
			return nil, fmt.Errorf("file ends after %d layers, header says %d", i, nLayers)
		}
		if err != nil {
			return nil, err
		}
		l, err := parseLayer(f, line)
		if err != nil {
			return nil, err
		}
		if names[l.Name] {
			return nil, fmt.Errorf("line %d: %s: duplicate layer name", line, l)
		}
		names[l.Name] = true
		net.Layers = append(net.Layers, l)
	}
	if f, err := next(); err == nil {
		return nil, fmt.Errorf("line %d: unexpected content after %d layers: %q", line, nLayers, strings.Join(f, " "))
	}
	return net, nil
}

func parseLayer(f []string, line int) (*Layer, error) {
	if len(f) < 4 {
		return nil, fmt.Errorf("line %d: layer line needs \"type name bottoms tops ...\", got %q", line, strings.Join(f, " "))
	}
	l := &Layer{Line: line, Type: f[0], Name: f[1], Params: map[int]Param{}}
	nb, err1 := strconv.Atoi(f[2])
	nt, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || nb < 0 || nt < 0 || nb > maxBlobs || nt > maxBlobs {
		return nil, fmt.Errorf("line %d: %s: bad bottom/top counts %q %q", line, l, f[2], f[3])
	}
	rest := f[4:]
	if len(rest) < nb+nt {
		return nil, fmt.Errorf("line %d: %s: declares %d inputs and %d outputs but names %d blobs", line, l, nb, nt, len(rest))
	}
	l.Bottoms = append([]string(nil), rest[:nb]...)
	l.Tops = append([]string(nil), rest[nb:nb+nt]...)
	for _, kv := range rest[nb+nt:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %s: parameter %q is not key=value", line, l, kv)
		}
		id, err := strconv.Atoi(k)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: bad parameter key %q", line, l, k)
		}
		var p Param
		if id <= -23300 {
			id = -id - 23300
			p, err = parseArray(v)
		} else {
			p, err = parseScalar(v)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: parameter %s: %v", line, l, k, err)
		}
		if _, dup := l.Params[id]; dup {
			return nil, fmt.Errorf("line %d: %s: parameter %d given twice", line, l, id)
		}
		l.Params[id] = p
	}
	return l, nil
}

func parseScalar(v string) (Param, error) {
	if strings.ContainsAny(v, ".eE") {
		x, err := strconv.ParseFloat(v, 32)
		if err != nil {
			return Param{}, fmt.Errorf("bad float %q", v)
		}
		return Param{Ints: []int{int(x)}, Floats: []float32{float32(x)}}, nil
	}
	x, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return Param{}, fmt.Errorf("bad integer %q", v)
	}
	return Param{Ints: []int{int(x)}, Floats: []float32{float32(x)}}, nil
}

func parseArray(v string) (Param, error) {
	parts := strings.Split(v, ",")
	n, err := strconv.Atoi(parts[0])
	if err != nil || n < 0 || n > maxArrayLen {
		return Param{}, fmt.Errorf("bad array length %q", parts[0])
	}
	if len(parts)-1 != n {
		return Param{}, fmt.Errorf("array says %d values but has %d", n, len(parts)-1)
	}
	p := Param{IsArray: true, Ints: make([]int, n), Floats: make([]float32, n)}
	for i, s := range parts[1:] {
		q, err := parseScalar(s)
		if err != nil {
			return Param{}, err
		}
		p.Ints[i], p.Floats[i] = q.Ints[0], q.Floats[0]
	}
	return p, nil
}

func isPrintable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return false
		}
	}
	return true
}
