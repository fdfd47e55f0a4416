package backend

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
)

// PixelFormat is the layout, depth and colour of frames entering or
// leaving a backend. It is comparable: use the values below, YUV16 and
// ParsePixelFormat's.
//
// Frames enter a model (Slot.Input, FromFrames) as RGB24, RGB48 or planar
// YCbCr of 10, 12 or 16 bits (YUV16 and ParseInput's formats: 4:4:4, 4:2:2
// or 4:2:0, as the decoder makes them; subsampled chroma is upsampled and
// all converted to RGB with the matrix and range where the model runs: see
// Inverse and Siting) and leave it (Slot.Put, ToFrames) in any format
// ParsePixelFormat accepts:
//
//	name          layout     bytes a frame (w x h)     samples
//	rgb24         PackedRGB  3wh                       8-bit R,G,B
//	rgb48le       PackedRGB  6wh                       16-bit little-endian R,G,B
//	yuv420p       YUV420     wh + 2(w/2)(h/2)          8-bit planes Y, Cb, Cr; w, h even
//	yuv420pNNle   YUV420     2(wh + 2(w/2)(h/2))       NN = 10, 12, 16: little-endian 16-bit words
//	yuv444pNNle   YUV444     6wh                       NN = 10, 12, 16
//	yuv422pNNle   YUV422     2(wh + 2(w/2)h)           input only: NN = 10, 12, 16
//
// (w/2 and h/2 round up: an input of odd size has a chroma sample more.)
//
// (8-bit yuv444p is left to ffmpeg, from rgb24, as before.)
//
// YCbCr values follow ITU-T H.273 for the format's Matrix and Range:
// limited range Y = (16 + 219 E'y) 2^(D-8), C = (128 + 224 E'c) 2^(D-8);
// full range Y = (2^D - 1) E'y, C = 2^(D-1) + (2^D - 1) E'c, for depth D.
// The model's RGB in [0,1] is first rounded to 8 bits (8-bit formats) or
// 16 bits (the others), as the RGB formats hold it; each YCbCr value is then
// rounded to nearest and clamped. Subsampled chroma is the mean of each
// 2x2 block's rounded RGB. The zero YCbCr, BT.601 limited range, keeps the
// exact float32 arithmetic of the original fixed conversion (ffmpeg's
// swscale rgb24 -> yuv420p without flags), so 8-bit outputs of untagged
// inputs stay bit for bit what they were.
type PixelFormat struct {
	Layout Layout
	// Depth is the bits per sample: 8 or 16 for RGB, 8 (yuv420p only),
	// 10, 12 or 16 for YUV; 0 in the zero PixelFormat, which is no format
	// (named "PixelFormat(0,0)"; no backend takes it).
	Depth int
	// YCbCr is the conversion of the YUV layouts; zero for RGB.
	YCbCr YCbCr
	// Siting is where the chroma samples of a subsampled input sit; zero
	// (SitingLeft) for the others.
	Siting Siting
	// Source is the depth of the samples of an input widened to Depth
	// (shifted left by Depth - Source, as a 10-bit input decoded as
	// yuv444p16le), which sets full range's scale (see Inverse); 0 is
	// Depth.
	Source int
}

// Layout is how a frame's samples are arranged.
type Layout uint8

const (
	// PackedRGB is R, G, B per pixel.
	PackedRGB Layout = iota
	// YUV420 is planar Y, Cb, Cr with 2x2 chroma subsampling.
	YUV420
	// YUV444 is planar Y, Cb, Cr without subsampling.
	YUV444
	// YUV422 is planar Y, Cb, Cr with 2x1 chroma subsampling (input only).
	YUV422
)

// Siting is where a subsampled input's chroma samples sit among the luma
// samples (H.273 chroma_sample_loc_type; ffmpeg's chroma_location names),
// horizontally co-sited with the left luma sample of their pair or centred
// between the two, and vertically (4:2:0 only) co-sited with the top row,
// centred between the two rows, or co-sited with the bottom row. A model
// gets the chroma of every pixel by bilinear interpolation between the
// nearest chroma samples at those positions, the edge samples repeated
// (see Inverse).
type Siting uint8

const (
	// SitingLeft: left, vertically centred; MPEG-2, H.264 and HEVC's
	// default for 4:2:0, and the default here.
	SitingLeft Siting = iota
	// SitingCenter: centred both ways (JPEG, MPEG-1).
	SitingCenter
	// SitingTopLeft: co-sited with the top left luma sample (BT.2020's
	// 4:2:0, and every 4:2:2).
	SitingTopLeft
	// SitingTop: horizontally centred, co-sited with the top row.
	SitingTop
	// SitingBottomLeft: left, co-sited with the bottom row.
	SitingBottomLeft
	// SitingBottom: horizontally centred, co-sited with the bottom row.
	SitingBottom
)

// ParseSiting maps ffmpeg's chroma_location name to a Siting: "center",
// "topleft", "top", "bottomleft", "bottom"; anything else (left,
// unspecified) SitingLeft.
func ParseSiting(loc string) Siting {
	for i, name := range []string{"left", "center", "topleft", "top", "bottomleft", "bottom"} {
		if loc == name {
			return Siting(i)
		}
	}
	return SitingLeft
}

// Offsets is where chroma sample (0, 0) sits in luma samples from the
// centre of luma sample (0, 0): x 0 (left) or 0.5 (centred); y 0 (top),
// 0.5 (centred) or 1 (bottom). Sample (i, j) of a 4:2:0 plane sits at
// (2i + x, 2j + y); of a 4:2:2 one at (2i + x, j).
func (s Siting) Offsets() (x, y float32) {
	switch s {
	case SitingCenter:
		return 0.5, 0.5
	case SitingTopLeft:
		return 0, 0
	case SitingTop:
		return 0.5, 0
	case SitingBottomLeft:
		return 0, 1
	case SitingBottom:
		return 0.5, 1
	}
	return 0, 0.5
}

// YCbCrMatrix is a YCbCr matrix (H.273 MatrixCoefficients).
type YCbCrMatrix uint8

const (
	// BT601 is ITU-R BT.601 (ffmpeg's bt470bg and smpte170m), the
	// default of untagged video.
	BT601 YCbCrMatrix = iota
	// BT709 is ITU-R BT.709.
	BT709
	// BT2020NC is ITU-R BT.2020 non-constant luminance.
	BT2020NC
)

// YCbCr is the matrix and range of a YCbCr format. The zero value is
// BT.601 limited range.
type YCbCr struct {
	Matrix YCbCrMatrix
	// Full is full ("pc", "jpeg") range; otherwise limited ("tv").
	Full bool
}

// The formats of 8-bit and 16-bit RGB and of 8-bit BT.601 limited-range
// yuv420p, the common cases.
var (
	RGB24   = PixelFormat{Layout: PackedRGB, Depth: 8}
	RGB48   = PixelFormat{Layout: PackedRGB, Depth: 16}
	YUV420P = PixelFormat{Layout: YUV420, Depth: 8}
)

// ParseYCbCr maps ffmpeg's colour names (colorspace and color_range, as
// ffprobe reports them) to a YCbCr, and reports whether the backends
// convert that matrix: bt709, bt2020nc (and bt2020c, which is converted as
// bt2020nc, as swscale does), BT.601 for bt470bg, smpte170m and an
// unspecified one ("", "unknown"); any other (smpte240m, fcc, ycgco, ...)
// gives BT.601 and false. Range "pc" or "jpeg" is full, anything else
// limited.
func ParseYCbCr(matrix, rng string) (YCbCr, bool) {
	var c YCbCr
	known := true
	switch matrix {
	case "bt709":
		c.Matrix = BT709
	case "bt2020nc", "bt2020c", "bt2020_ncl", "bt2020_cl":
		c.Matrix = BT2020NC
	case "", "unknown", "bt470bg", "smpte170m":
	default:
		known = false
	}
	c.Full = rng == "pc" || rng == "jpeg"
	return c, known
}

// ParsePixelFormat returns the format of ffmpeg pixel format name with
// conversion c (ignored for RGB), and whether a backend writes it (the
// names in PixelFormat's table).
func ParsePixelFormat(name string, c YCbCr) (PixelFormat, bool) {
	for _, f := range []PixelFormat{RGB24, RGB48} {
		if f.Name() == name {
			return f, true
		}
	}
	for _, d := range []int{8, 10, 12, 16} {
		for _, l := range []Layout{YUV420, YUV444} {
			if f := (PixelFormat{Layout: l, Depth: d, YCbCr: c}); f.Name() == name && (d > 8 || l == YUV420) {
				return f, true
			}
		}
	}
	return PixelFormat{}, false
}

// Wide reports whether samples take two bytes (little-endian).
func (f PixelFormat) Wide() bool { return f.Depth > 8 }

// Name is f's ffmpeg pixel format name.
func (f PixelFormat) Name() string {
	d := f.Depth
	switch {
	case d == 0:
	case f.Layout == PackedRGB:
		if d == 8 {
			return "rgb24"
		}
		return fmt.Sprintf("rgb%dle", 3*d)
	case f.Layout == YUV420, f.Layout == YUV422, f.Layout == YUV444:
		name := [...]string{YUV420: "yuv420p", YUV422: "yuv422p", YUV444: "yuv444p"}[f.Layout]
		if d == 8 {
			return name
		}
		return fmt.Sprintf("%s%dle", name, d)
	}
	return fmt.Sprintf("PixelFormat(%d,%d)", f.Layout, d)
}

func (f PixelFormat) String() string {
	if f.Layout == PackedRGB || f.YCbCr == (YCbCr{}) {
		return f.Name()
	}
	rng := "tv"
	if f.YCbCr.Full {
		rng = "pc"
	}
	return fmt.Sprintf("%s (%s, %s)", f.Name(), [...]string{"bt601", "bt709", "bt2020nc"}[min(int(f.YCbCr.Matrix), 2)], rng)
}

// FrameBytes is the size of one w x h frame in format f.
func (f PixelFormat) FrameBytes(w, h int) int {
	s := 1
	if f.Wide() {
		s = 2
	}
	cw, ch := f.chromaSize(w, h)
	return s * (w*h + 2*cw*ch)
}

// Subsampling is f's chroma subsampling, horizontal and vertical: 2, 2
// for YUV420, 2, 1 for YUV422, else 1, 1.
func (f PixelFormat) Subsampling() (sx, sy int) {
	switch f.Layout {
	case YUV420:
		return 2, 2
	case YUV422:
		return 2, 1
	}
	return 1, 1
}

// chromaSize is the size of a chroma plane of w x h frames of f (its
// subsampling, rounded up).
func (f PixelFormat) chromaSize(w, h int) (int, int) {
	sx, sy := f.Subsampling()
	return (w + sx - 1) / sx, (h + sy - 1) / sy
}

// CheckSize says why f cannot hold w x h frames (yuv420 needs an even
// size), or nil.
func (f PixelFormat) CheckSize(w, h int) error {
	if f.Layout == YUV420 && (w%2 != 0 || h%2 != 0) {
		return fmt.Errorf("%s needs an even size, not %dx%d", f.Name(), w, h)
	}
	return nil
}

// YUV16 is the input format yuv444p16le with conversion c.
func YUV16(c YCbCr) PixelFormat { return PixelFormat{Layout: YUV444, Depth: 16, YCbCr: c} }

// ParseInput returns the input format of ffmpeg pixel format name, one of
// yuv420p, yuv422p and yuv444p at 10, 12 or 16 bits, little-endian (e.g.
// "yuv420p10le"), with conversion c and chroma siting s (kept for the
// subsampled layouts only), and whether name is one of them: frames a
// decoder yields in the input's own layout, without conversion.
func ParseInput(name string, c YCbCr, s Siting) (PixelFormat, bool) {
	for _, l := range []Layout{YUV420, YUV422, YUV444} {
		for _, d := range []int{10, 12, 16} {
			if f := (PixelFormat{Layout: l, Depth: d, YCbCr: c}); f.Name() == name {
				if l != YUV444 {
					f.Siting = s
				}
				return f, true
			}
		}
	}
	return PixelFormat{}, false
}

// CheckInput says why frames of f cannot enter a model, or nil: they can
// in RGB24, RGB48 or YCbCr of 10, 12 or 16 bits (YUV16, ParseInput's).
func (f PixelFormat) CheckInput() error {
	d := f.Depth
	if f == RGB24 || f == RGB48 || f.Layout != PackedRGB && (d == 10 || d == 12 || d == 16) && (f.Layout != YUV444 || f.Siting == SitingLeft) && (f.Source == 0 || f.Source > 8 && f.Source <= d) {
		return nil
	}
	return fmt.Errorf("frames in %s cannot enter a model: use rgb24, rgb48le, or yuv420p, yuv422p or yuv444p of 10, 12 or 16 bits", f.Name())
}

// Model is the RGB format a model's frames have for input f: RGB24 for
// 8-bit input, else RGB48.
func (f PixelFormat) Model() PixelFormat {
	if f.Wide() {
		return RGB48
	}
	return RGB24
}

// Inverse is the arithmetic of a deep YCbCr input (H.273 inverted, in
// float32 in this order): y = (Y - OY) KY, u = (Cb - OC) KC,
// v = (Cr - OC) KC; R = y + RV v, G = y + GU u + GV v, B = y + BU u, each
// clamped to [0,1]. GPU kernels take it as a struct. For a subsampled
// input, Cb and Cr at a pixel are first interpolated from the chroma
// planes (see Siting): the pixel (x, y) is at chroma coordinates
// fx = (x - ox) / sx, fy = (y - oy) / sy (Siting.Offsets, Subsampling);
// with i = floor(fx), tx = fx - i, and j, ty likewise, the rows
// a = (1 - tx) C[j][i] + tx C[j][i+1] and b, the same at row j+1, give
// (1 - ty) a + ty b, indices clamped to the plane. The weights are
// multiples of 1/4, so the interpolated value is exact in float32
// whatever the order of operations.
type Inverse struct {
	KY, OY, KC, OC, RV, GU, GV, BU float32
}

// Inverse returns the conversion of YCbCr frames of f (of f's depth) to
// RGB. Full range's white is (2^S - 1) 2^(D-S) for f's Source depth S and
// Depth D (2^D - 1 when S is D).
func (f PixelFormat) Inverse() Inverse {
	kr, kb := 0.299, 0.114
	switch f.YCbCr.Matrix {
	case BT709:
		kr, kb = 0.2126, 0.0722
	case BT2020NC:
		kr, kb = 0.2627, 0.0593
	}
	kg := 1 - kr - kb
	d := f.Depth
	ky, oy, kc, oc := 1/(219*math.Ldexp(1, d-8)), 16*math.Ldexp(1, d-8), 1/(224*math.Ldexp(1, d-8)), 128*math.Ldexp(1, d-8)
	if f.YCbCr.Full {
		// White is 2^S - 1 at the source depth S, shifted to depth d.
		s := cmp.Or(f.Source, d)
		top := (math.Ldexp(1, s) - 1) * math.Ldexp(1, d-s)
		ky, oy, kc, oc = 1/top, 0, 1/top, math.Ldexp(1, d-1)
	}
	return Inverse{KY: float32(ky), OY: float32(oy), KC: float32(kc), OC: float32(oc),
		RV: float32(2 * (1 - kr)), GU: float32(-2 * kb * (1 - kb) / kg), GV: float32(-2 * kr * (1 - kr) / kg), BU: float32(2 * (1 - kb))}
}

// Raw is c's bytes as a kernel's struct parameter.
func (c Inverse) Raw() []byte {
	var b []byte
	for _, v := range []float32{c.KY, c.OY, c.KC, c.OC, c.RV, c.GU, c.GV, c.BU} {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// yuvToFloats converts n frames of w x h in deep YCbCr input format f to
// RGB values (n h w 3) by f.Inverse, upsampling subsampled chroma.
func yuvToFloats(src []byte, f PixelFormat, n, w, h int) []float32 {
	c := f.Inverse()
	out := make([]float32, n*h*w*3)
	plane := w * h
	cw, ch := f.chromaSize(w, h)
	sx, sy := f.Subsampling()
	ox, oy := f.Siting.Offsets()
	// Each pixel column's (and row's) two chroma indices and weight.
	type tap struct {
		i0, i1 int
		t      float32
	}
	taps := func(n, cn, s int, o float32) []tap {
		ts := make([]tap, n)
		for x := range ts {
			if s == 1 {
				ts[x] = tap{x, x, 0}
				continue
			}
			fx := (float32(x) - o) * 0.5
			i := int(math.Floor(float64(fx)))
			ts[x] = tap{min(max(i, 0), cn-1), min(max(i+1, 0), cn-1), fx - float32(i)}
		}
		return ts
	}
	tx, ty := taps(w, cw, sx, ox), taps(h, ch, sy, oy)
	for fr := 0; fr < n; fr++ {
		p := src[fr*f.FrameBytes(w, h):]
		at := func(pl, j, i int) float32 {
			return float32(binary.LittleEndian.Uint16(p[2*(plane+pl*cw*ch+j*cw+i):]))
		}
		chroma := func(pl int, x, y tap) float32 {
			a := (1-x.t)*at(pl, y.i0, x.i0) + x.t*at(pl, y.i0, x.i1)
			b := (1-x.t)*at(pl, y.i1, x.i0) + x.t*at(pl, y.i1, x.i1)
			return (1-y.t)*a + y.t*b
		}
		for yy := 0; yy < h; yy++ {
			for xx := 0; xx < w; xx++ {
				i := yy*w + xx
				Y := float32(binary.LittleEndian.Uint16(p[2*i:]))
				U, V := chroma(0, tx[xx], ty[yy]), chroma(1, tx[xx], ty[yy])
				y, u, v := (Y-c.OY)*c.KY, (U-c.OC)*c.KC, (V-c.OC)*c.KC
				o := out[3*(fr*plane+i):]
				o[0] = min(max(y+c.RV*v, 0), 1)
				o[1] = min(max(y+c.GU*u+c.GV*v, 0), 1)
				o[2] = min(max(y+c.BU*u, 0), 1)
			}
		}
	}
	return out
}

// Conversion is the arithmetic of a YCbCr format: a value is
// min(max(Off + (K[0] r + K[1] g + K[2] b) / Q + 0.5, 0), Max), truncated,
// with r, g, b the RGB values rounded to Q (255 or 65535) and K's rows for
// Y, Cb and Cr, in float32 in this order of operations. GPU kernels take it
// as a struct.
type Conversion struct {
	K   [9]float32
	Off [3]float32
	Q   float32
	Max float32
}

// bt601 is BT.601's matrix at 8-bit limited scale, rounded as the
// original fixed conversion (and swscale) had it.
var bt601 = [9]float64{65.481, 128.553, 24.966, -37.797, -74.203, 112.0, 112.0, -93.786, -18.214}

// Conversion returns f's YCbCr arithmetic (see Conversion).
func (f PixelFormat) Conversion() Conversion {
	k := bt601
	if f.YCbCr.Matrix != BT601 {
		kr, kb := 0.2126, 0.0722
		if f.YCbCr.Matrix == BT2020NC {
			kr, kb = 0.2627, 0.0593
		}
		kg := 1 - kr - kb
		cb, cr := 2*(1-kb), 2*(1-kr)
		k = [9]float64{219 * kr, 219 * kg, 219 * kb, -224 * kr / cb, -224 * kg / cb, 112, 112, -224 * kg / cr, -224 * kb / cr}
	}
	d := f.Depth
	top := float64(int(1)<<d - 1)
	ys, cs := float64(int(1)<<(d-8)), float64(int(1)<<(d-8))
	off := [3]float64{16 * ys, 128 * cs, 128 * cs}
	if f.YCbCr.Full {
		ys, cs = top/219, top/224
		off = [3]float64{0, float64(int(1) << (d - 1)), float64(int(1) << (d - 1))}
	}
	var c Conversion
	for i, v := range k {
		s := cs
		if i < 3 {
			s = ys
		}
		c.K[i] = float32(v * s)
	}
	for i, v := range off {
		c.Off[i] = float32(v)
	}
	c.Q, c.Max = 255, float32(top)
	if f.Wide() {
		c.Q = 65535
	}
	return c
}

// Raw is c's bytes as a kernel's struct parameter (float32s, little-endian).
func (c Conversion) Raw() []byte {
	var b []byte
	for _, v := range append(append(c.K[:], c.Off[:]...), c.Q, c.Max) {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// sample is row i of c applied to r, g, b.
func (c *Conversion) sample(i int, r, g, b float32) int {
	k := c.K[3*i:]
	return int(min(max(c.Off[i]+(k[0]*r+k[1]*g+k[2]*b)/c.Q+0.5, 0), c.Max))
}

// RGBToYUV converts n frames of w x h to the YUV format f in dst (n *
// f.FrameBytes(w, h) bytes): rgb holds them as RGB24 when f is 8-bit, else
// as RGB48. See PixelFormat for the arithmetic.
func RGBToYUV(dst, rgb []byte, f PixelFormat, n, w, h int) error {
	if f.Layout == PackedRGB || f.Depth < 8 {
		return fmt.Errorf("rgb to yuv: %s is not YUV", f.Name())
	}
	if err := f.CheckSize(w, h); err != nil {
		return err
	}
	in := f.Model()
	if len(rgb) < n*in.FrameBytes(w, h) || len(dst) < n*f.FrameBytes(w, h) {
		return fmt.Errorf("rgb to yuv: %d frames of %dx%d in buffers of %d and %d bytes", n, w, h, len(rgb), len(dst))
	}
	if f.Wide() {
		rgbToYUV[word](dst, rgb, f, n, w, h)
	} else {
		rgbToYUV[byte](dst, rgb, f, n, w, h)
	}
	return nil
}

// word is a 16-bit little-endian sample; byte an 8-bit one.
type word uint16

// rgbToYUV is RGBToYUV's loop for samples of type T: one body per depth,
// without a test per sample.
func rgbToYUV[T byte | word](dst, rgb []byte, f PixelFormat, n, w, h int) {
	sb := 1
	if f.Wide() {
		sb = 2
	}
	get := func(p []byte, i int) float32 {
		if ^T(0) == 0xff { // byte: known per instantiation
			return float32(p[i])
		}
		return float32(binary.LittleEndian.Uint16(p[2*i:]))
	}
	put := func(p []byte, i, v int) {
		if ^T(0) == 0xff {
			p[i] = byte(v)
		} else {
			binary.LittleEndian.PutUint16(p[2*i:], uint16(v))
		}
	}
	c := f.Conversion()
	in := f.Model()
	sub := 1
	if f.Layout == YUV420 {
		sub = 2
	}
	cw, ch := w/sub, h/sub
	for fr := 0; fr < n; fr++ {
		src := rgb[fr*in.FrameBytes(w, h):]
		Y := dst[fr*f.FrameBytes(w, h):]
		U := Y[sb*w*h:]
		V := U[sb*cw*ch:]
		for by := 0; by < ch; by++ {
			for bx := 0; bx < cw; bx++ {
				var sr, sg, sbl float32
				for dy := 0; dy < sub; dy++ {
					for dx := 0; dx < sub; dx++ {
						y, x := sub*by+dy, sub*bx+dx
						p := 3 * (y*w + x)
						r, g, b := get(src, p), get(src, p+1), get(src, p+2)
						put(Y, y*w+x, c.sample(0, r, g, b))
						sr += r
						sg += g
						sbl += b
					}
				}
				if sub == 2 {
					sr, sg, sbl = sr*0.25, sg*0.25, sbl*0.25
				}
				put(U, by*cw+bx, c.sample(1, sr, sg, sbl))
				put(V, by*cw+bx, c.sample(2, sr, sg, sbl))
			}
		}
	}
}

// Streaming is implemented by backends with their own memory and
// asynchronous queues (GPUs). A Slot stages one batch of frames: the
// caller fills In, Input uploads it, model ops run, Put converts the
// result and Send starts the copy back, and Wait blocks until Out holds it.
// Transfers run on a copy queue, overlapping compute on other slots.
type Streaming interface {
	Backend
	// NewSlot allocates host memory suited to fast transfers (page-locked)
	// and device memory for inBytes in and outBytes out.
	NewSlot(inBytes, outBytes int) (Slot, error)
}

// Batch is host staging for a group of frames on their way through a
// model: the caller fills In, starts the work, and reads Out after Wait.
type Batch interface {
	// In is the host input buffer.
	In() []byte
	// Out is the host output buffer, valid after Wait.
	Out() []byte
	// Wait blocks until Out holds the result of the last work started.
	Wait() error
	// Free releases the memory. Work using it must be finished.
	Free()
}

// Slot is one batch's staging buffers on a Streaming backend. Input, Put
// and Send are called from the goroutine that drives the backend; Wait may
// be called from another.
type Slot interface {
	Batch
	// Input starts copying n frames of w x h in format f (RGB24 or
	// RGB48) from In to the device and returns them as an (n h w 3) tensor
	// in [0,1], ordered after the copy.
	Input(n, h, w int, f PixelFormat) (Tensor, error)
	// Put converts t, an (n h w 3) tensor in [0,1], to frames of
	// format f at output frames [at, at+n), without copying them out:
	// results computed piece by piece go there without being held
	// together first. Wide: t may be float32.
	Put(t Tensor, f PixelFormat, at int) error
	// Send starts copying the first n output frames (w x h, format f) to
	// Out and returns the byte count.
	Send(n, w, h int, f PixelFormat) (int, error)
}

// Output converts t, an (n h w 3) tensor in [0,1], to frames of
// format f in s and starts copying them to Out. It returns the byte count.
func Output(s Slot, t Tensor, f PixelFormat) (int, error) {
	if err := s.Put(t, f, 0); err != nil {
		return 0, err
	}
	sh := t.Shape()
	return s.Send(sh.N, sh.W, sh.H, f)
}

// FromFrames converts n frames of h x w in input format f (see CheckInput)
// to an (n h w 3) tensor in [0,1] on b.
func FromFrames(b Backend, data []byte, f PixelFormat, n, h, w int) (Tensor, error) {
	switch {
	case f == RGB24:
		return b.FromRGB8(data, n, h, w)
	case f == RGB48:
		return b.FromRGB16(data, n, h, w)
	case f.CheckInput() != nil:
		return nil, f.CheckInput()
	case len(data) != n*f.FrameBytes(w, h):
		return nil, fmt.Errorf("%s frames %dx%dx%d: got %d bytes", f.Name(), n, w, h, len(data))
	}
	return b.Upload(Shape{N: n, H: h, W: w, C: 3}, yuvToFloats(data, f, n, w, h))
}

// ToFrames converts t, an (n h w 3) tensor in [0,1], to frames of format f
// in dst (exactly n * f.FrameBytes(w, h) bytes).
func ToFrames(b Backend, t Tensor, f PixelFormat, dst []byte) error {
	sh := t.Shape()
	if len(dst) != sh.N*f.FrameBytes(sh.W, sh.H) {
		return fmt.Errorf("to %s: tensor %v, buffer of %d bytes", f.Name(), sh, len(dst))
	}
	switch f {
	case RGB24:
		return b.ToRGB8(t, dst)
	case RGB48:
		return b.ToRGB16(t, dst)
	}
	if err := f.CheckSize(sh.W, sh.H); err != nil {
		return err
	}
	in := f.Model()
	rgb := make([]byte, sh.N*in.FrameBytes(sh.W, sh.H))
	if err := ToFrames(b, t, in, rgb); err != nil {
		return err
	}
	return RGBToYUV(dst, rgb, f, sh.N, sh.W, sh.H)
}

// ShuffleAdder is implemented by backends with a fused kernel for the tail
// of SRVGGNetCompact. ShuffleAddNearest(x, base, r, order), for x of
// N H W C*r*r and base of N H W C, stands for
//
//	up, _ := b.PixelShuffle(x, r, order)
//	near, _ := b.Resize(base, Nearest, H*r, W*r, Tile{}, Tile{})
//	y, _ := b.Binary(OpAdd, up, near)
//
// and its results must equal those exactly. Without it (or with the
// compact model's SeparateTail option) model/compact runs the three ops.
type ShuffleAdder interface {
	ShuffleAddNearest(x, base Tensor, r int, order ShuffleOrder) (Tensor, error)
}

// BilinearShuffleAdder is implemented by backends with a fused kernel for
// the tail of CDA-VSR. ShuffleAddBilinear(x, base, r, order), for x of
// N H W 3*r*r and base of N H W 3, stands for
//
//	up, _ := b.PixelShuffle(x, r, order)
//	bil, _ := b.Resize(base, Bilinear, H*r, W*r, Tile{}, Tile{})
//	y, _ := b.Binary(OpAdd, up, bil)
//
// with up converted to float32 first when base is a float32 tensor
// beside narrower storage (Wide); the result has base's type, and its
// values must equal those exactly. Without it CDA-VSR runs those ops.
type BilinearShuffleAdder interface {
	ShuffleAddBilinear(x, base Tensor, r int, order ShuffleOrder) (Tensor, error)
}

// NewSlot returns a Slot for b: the backend's own when it is Streaming,
// else host buffers whose Input and Put convert synchronously.
func NewSlot(b Backend, inBytes, outBytes int) (Slot, error) {
	if s, ok := b.(Streaming); ok {
		return s.NewSlot(inBytes, outBytes)
	}
	return &hostSlot{b: b, in: make([]byte, inBytes), out: make([]byte, outBytes)}, nil
}

// hostSlot is a Slot in Go memory for backends without their own queues.
type hostSlot struct {
	b       Backend
	in, out []byte
	n       int
}

func (s *hostSlot) In() []byte  { return s.in }
func (s *hostSlot) Out() []byte { return s.out[:s.n] }
func (s *hostSlot) Wait() error { return nil }
func (s *hostSlot) Free()       {}

func (s *hostSlot) Input(n, h, w int, f PixelFormat) (Tensor, error) {
	size := n * f.FrameBytes(w, h)
	if size > len(s.in) {
		return nil, fmt.Errorf("slot holds %d input bytes, %d frames of %dx%d in %s need %d", len(s.in), n, w, h, f.Name(), size)
	}
	return FromFrames(s.b, s.in[:size], f, n, h, w)
}

func (s *hostSlot) Put(t Tensor, f PixelFormat, at int) error {
	sh := t.Shape()
	fs := f.FrameBytes(sh.W, sh.H)
	if at < 0 || (at+sh.N)*fs > len(s.out) {
		return fmt.Errorf("slot holds %d output bytes, %v as %v from frame %d needs %d", len(s.out), sh, f, at, (at+sh.N)*fs)
	}
	return ToFrames(s.b, t, f, s.out[at*fs:(at+sh.N)*fs])
}

func (s *hostSlot) Send(n, w, h int, f PixelFormat) (int, error) {
	size := n * f.FrameBytes(w, h)
	if size > len(s.out) || n < 0 {
		return 0, fmt.Errorf("slot holds %d output bytes, %d frames of %dx%d as %v need %d", len(s.out), n, w, h, f, size)
	}
	s.n = size
	return size, nil
}
