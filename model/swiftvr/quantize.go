package swiftvr

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/tensor/half"
)

// scaleSuffix names the per-output-channel scale of an fp8 weight W: the
// tensor W + scaleSuffix (LightX2V's layout: "....weight_scale", float32
// [out, 1]).
const scaleSuffix = "_scale"

// fp8Quantized reports whether a DiT tensor is quantized to fp8 by
// Quantize: the weight matrices of the blocks' linear layers (attention
// projections and the feed-forward network), which hold the DiT's GEMMs.
func fp8Quantized(name string, shape []int) bool {
	return strings.HasPrefix(name, "blocks.") && strings.HasSuffix(name, ".weight") && len(shape) == 2
}

// dequantize turns the raw e4m3 values of an [out, in] weight into its
// values: each output channel's row times its scale.
func dequantize(v []float32, shape []int, scale []float32) ([]float32, error) {
	if len(shape) != 2 || len(scale) != shape[0] || len(v) != shape[0]*shape[1] {
		return nil, fmt.Errorf("an fp8 weight of shape %v with %d scales (want one per output channel)", shape, len(scale))
	}
	for o, s := range scale {
		if !(s > 0) || math.IsInf(float64(s), 0) {
			return nil, fmt.Errorf("output channel %d has scale %v (want a positive finite number)", o, s)
		}
		row := v[o*shape[1] : (o+1)*shape[1]]
		for i := range row {
			row[i] *= s
		}
	}
	return v, nil
}

// quantizeRows quantizes an [out, in] float32 weight to e4m3 with one scale
// per output channel: the row's largest magnitude maps to 448 (a row of
// zeros gets the scale 1e-5/448, as LightX2V's converter).
func quantizeRows(w []float32, out, in int) (q []byte, scale []float32) {
	q, scale = make([]byte, len(w)), make([]float32, out)
	for o := range out {
		row := w[o*in : (o+1)*in]
		m := float32(1e-5)
		for _, x := range row {
			m = max(m, float32(math.Abs(float64(x))))
		}
		s := m / half.E4M3Max
		scale[o] = s
		for i, x := range row {
			q[o*in+i] = half.ToE4M3(x / s)
		}
	}
	return q, scale
}

// Quantize writes to the new directory out a copy of the SwiftVR
// checkpoint in, with the DiT's linear weights (fp8Quantized) in float8
// e4m3 with a float32 scale per output channel (LightX2V's fp8 layout) and
// every other file and tensor as it was. A checkpoint so written loads as
// it is; the values are dequantized at load.
func Quantize(in, out string) error {
	ck, err := Open(in)
	if err != nil {
		return err
	}
	defer ck.Close()
	for _, n := range ck.DiT.Names() {
		if info, _ := ck.DiT.Info(n); info.DType == safetensors.F8E4M3 {
			return fmt.Errorf("%s: its DiT is already in fp8 (%s)", in, n)
		}
	}
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("%s exists: give a new directory", out)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(out)), "."+filepath.Base(out)+".vsr-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var scales []string // the scale tensors written
	err = filepath.WalkDir(in, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(in, path)
		dst := filepath.Join(tmp, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", path)
		case filepath.Dir(rel) == TransformerDir && strings.HasSuffix(rel, ".safetensors"):
			added, err := quantizeFile(path, dst)
			scales = append(scales, added...)
			return err
		case filepath.ToSlash(rel) == DiTIndexFile:
			return nil // written below, with the scales
		}
		return copyFile(path, dst)
	})
	if _, serr := os.Stat(filepath.Join(in, DiTIndexFile)); err == nil && serr == nil {
		err = quantizeIndex(filepath.Join(in, DiTIndexFile), filepath.Join(tmp, DiTIndexFile), scales)
	}
	if err != nil {
		return fmt.Errorf("quantize %s: %w", in, err)
	}
	if _, err := Open(tmp); err != nil { // what was written loads
		return fmt.Errorf("quantize %s: the result does not load: %w", in, err)
	}
	return os.Rename(tmp, out)
}

// quantizeFile rewrites one safetensors file of the DiT and returns the
// names of the scales it added.
func quantizeFile(src, dst string) (scales []string, err error) {
	f, err := safetensors.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ts []safetensors.WriteTensor
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		if !fp8Quantized(n, info.Shape) {
			b, err := f.Bytes(n)
			if err != nil {
				return nil, err
			}
			ts = append(ts, safetensors.WriteTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: b})
			continue
		}
		w, err := f.Float32(n)
		if err != nil {
			return nil, err
		}
		scales = append(scales, n+scaleSuffix)
		q, scale := quantizeRows(w, info.Shape[0], info.Shape[1])
		ts = append(ts,
			safetensors.WriteTensor{Name: n, DType: safetensors.F8E4M3, Shape: info.Shape, Data: q},
			safetensors.WriteTensor{Name: n + scaleSuffix, DType: safetensors.F32, Shape: []int{info.Shape[0], 1}, Data: safetensors.Float32Bytes(scale)})
	}
	md := f.Metadata()
	if md == nil {
		md = map[string]string{}
	}
	md["vsr.quantization"] = "fp8 e4m3fn weights of the blocks' linear layers, float32 scale per output channel (NAME.weight_scale)"
	return scales, safetensors.Write(dst, ts, md)
}

// quantizeIndex adds the scales to a sharded DiT's index, each in its
// weight's shard.
func quantizeIndex(src, dst string, scales []string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var idx map[string]json.RawMessage
	if err := json.Unmarshal(b, &idx); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	var wm map[string]string
	if err := json.Unmarshal(idx["weight_map"], &wm); err != nil {
		return fmt.Errorf("%s: weight_map: %w", src, err)
	}
	for _, sc := range scales {
		wm[sc] = wm[strings.TrimSuffix(sc, scaleSuffix)]
	}
	if idx["weight_map"], err = json.Marshal(wm); err != nil {
		return err
	}
	delete(idx, "metadata") // its total_size no longer holds
	out, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(dst, append(out, '\n'), 0o644)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return errors.Join(out.Sync(), out.Close())
}
