package compact

import (
	"context"
	"fmt"
	"math"

	"github.com/vsr-dev/vsr/backend"
)

// region is the part of the input image one forward pass sees, in whole
// image coordinates: rows [y0,y1) and columns [x0,x1) of an h x w image.
type region struct{ y0, y1, x0, x1, h, w int }

// span returns where a blob of the given scale starts and ends along one
// axis for input span [a,b) of an n-long axis whose blob is full long.
func span(s rat, a, b, n, full int) (int, int) {
	start, _ := s.at(a)
	if b == n {
		return start, full
	}
	end, _ := s.at(b)
	return start, end
}

// forward runs the graph on x, which holds region rg of the input.
// It frees every intermediate tensor and returns the output blob.
func (m *Graph) forward(x backend.Tensor, rg region, fh, fw []int) (backend.Tensor, error) {
	vals := make([]backend.Tensor, m.nblobs)
	left := append([]int(nil), m.uses...)
	vals[m.input] = x
	defer func() {
		for i, t := range vals {
			if t != nil && i != m.input && i != m.output {
				t.Free()
			}
		}
	}()
	for _, o := range m.ops {
		in := vals[o.in[0]]
		var y backend.Tensor
		var err error
		switch o.kind {
		case opConv:
			switch {
			case o.into != nil: // into a dense block's buffer, perhaps from a prefix of it
				err = m.b.(backend.SliceConver).SliceConv(in, o.w, o.conv, o.act, vals[o.into.buf], o.into.at)
			case len(o.in) > 1:
				y, err = m.b.Conv2DAdd(in, o.w, o.conv, o.act, vals[o.in[1]])
			default:
				y, err = m.b.Conv2D(in, o.w, o.conv, o.act)
			}
		case opAct:
			y, err = m.b.Activate(in, o.act)
		case opShuffle:
			y, err = m.b.PixelShuffle(in, o.r, o.order)
		case opBinary:
			y, err = m.b.Binary(o.binop, in, vals[o.in[1]])
		case opShuffleAdd:
			y, err = m.b.(backend.ShuffleAdder).ShuffleAddNearest(in, vals[o.in[1]], o.r, o.order)
		case opConcat, opBuffer:
			y, err = m.concat(o, vals)
		case opPatch: // in[0]'s tensor, patched, becomes the output: in[0] has no later reader
			if err = m.b.CopyChannels(in, o.at, vals[o.in[1]]); err == nil {
				y, vals[o.in[0]] = in, nil
			}
		case opEltwise:
			y, err = m.eltwise(o, vals)
		case opPad:
			// fullSizes made the output's size: the bottom and right
			// take what the top and left leave.
			ih, iw, oh, ow := fh[o.in[0]], fw[o.in[0]], fh[o.out], fw[o.out]
			y, err = m.b.(backend.UNet).Pad(in, o.pad[0], oh-ih-o.pad[0], o.pad[2], ow-iw-o.pad[2], o.padMode)
		case opMean:
			y, err = m.b.(backend.UNet).ChannelMean(in)
		case opScaleCh:
			y, err = m.b.(backend.UNet).ScaleChannels(in, vals[o.in[1]])
		case opChannels:
			y, err = m.b.Channels(in, o.at, o.n)
		case opNorm:
			if o.groups > 0 {
				var res backend.Tensor
				if len(o.in) > 1 {
					res = vals[o.in[1]]
				}
				y, err = m.b.(backend.Norm).GroupNorm(in, o.groups, o.scale, o.shift, o.eps, res)
			} else {
				y, err = m.b.(backend.Norm).ChannelNorm(in, o.scale, o.shift, o.eps)
			}
		case opResize:
			i, out := o.in[0], o.out
			sy0, _ := span(m.scaleH[i], rg.y0, rg.y1, rg.h, fh[i])
			sx0, _ := span(m.scaleW[i], rg.x0, rg.x1, rg.w, fw[i])
			dy0, dy1 := span(m.scaleH[out], rg.y0, rg.y1, rg.h, fh[out])
			dx0, dx1 := span(m.scaleW[out], rg.x0, rg.x1, rg.w, fw[out])
			src := backend.Tile{FullH: fh[i], FullW: fw[i], Y: sy0, X: sx0}
			dst := backend.Tile{FullH: fh[out], FullW: fw[out], Y: dy0, X: dx0}
			y, err = m.b.Resize(in, o.mode, dy1-dy0, dx1-dx0, src, dst)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.layer, err)
		}
		vals[o.out] = y
		for _, i := range o.reads() {
			if left[i]--; left[i] == 0 && i != m.input && vals[i] != nil {
				vals[i].Free()
				vals[i] = nil
			}
		}
	}
	out := vals[m.output]
	vals[m.output] = nil
	return out, nil
}

// concat stacks o's inputs along channels into a tensor of o's output
// channels: as many as the inputs' for a Concat, more for a dense block's
// buffer (opBuffer), whose other channels its convolutions write.
func (m *Graph) concat(o *op, vals []backend.Tensor) (backend.Tensor, error) {
	s := vals[o.in[0]].Shape()
	s.C = m.chans[o.out]
	y, err := m.b.Empty(s)
	if err != nil {
		return nil, err
	}
	at := 0
	for _, i := range o.in {
		if err := m.b.CopyChannels(y, at, vals[i]); err != nil {
			y.Free()
			return nil, err
		}
		at += m.chans[i]
	}
	return y, nil
}

// eltwise computes the sum with coefficients, or the product, of o's
// inputs.
func (m *Graph) eltwise(o *op, vals []backend.Tensor) (backend.Tensor, error) {
	coef := func(k int) float32 {
		if o.coef == nil {
			return 1
		}
		return o.coef[k]
	}
	y := vals[o.in[0]]
	for k := 1; k < len(o.in); k++ {
		var next backend.Tensor
		var err error
		switch {
		case o.binop == backend.OpMul:
			next, err = m.b.Binary(backend.OpMul, y, vals[o.in[k]])
		case k == 1:
			next, err = m.b.AddScaled(y, coef(0), vals[o.in[k]], coef(k))
		default:
			next, err = m.b.AddScaled(y, 1, vals[o.in[k]], coef(k))
		}
		if k > 1 {
			y.Free()
		}
		if err != nil {
			return nil, err
		}
		y = next
	}
	return y, nil
}

// AutoTile picks a tile size (in input pixels) that keeps the working set
// of a frame of w x h under about budget bytes, or 0 when the whole frame
// fits or the model cannot be tiled.
func (m *Graph) AutoTile(w, h int, budget int64) int {
	if !m.tileOK {
		return 0
	}
	perPx := 0.0 // float32 bytes per input pixel of the widest blob
	for i := range m.chans {
		s := float64(m.scaleH[i].num*m.scaleW[i].num) / float64(m.scaleH[i].den*m.scaleW[i].den)
		perPx = math.Max(perPx, 4*float64(m.chans[i])*s)
	}
	const live = 3 // a layer's input, its output and one skip connection
	if float64(w*h)*perPx*live <= float64(budget) {
		return 0
	}
	// Tiles much smaller than their halo mostly compute the halo: a deep
	// model (realesrgan-x4plus's halo is 353 pixels) gets tiles of at
	// least twice its halo, or the whole frame.
	t := int(math.Sqrt(float64(budget)/(perPx*live))) - 2*m.halo
	t = max(t, 64, 2*m.halo) / m.align * m.align
	if t >= w && t >= h {
		return 0
	}
	return max(t, m.align)
}

// Halo is the context in input pixels a tile reads beyond its edges.
func (m *Graph) Halo() int { return m.halo }

// Untiled says why the model runs whole frames only (an op that pads,
// crops or pools the whole image), or "" when tiles are exact.
func (m *Graph) Untiled() string {
	if m.tileOK {
		return ""
	}
	return m.why
}

// TileCost is how many times the pixels of a w x h frame the model
// computes in tiles of tile pixels, halos included (1 without tiles).
func (m *Graph) TileCost(w, h, tile int) float64 {
	if tile <= 0 || !m.tileOK || (tile >= w && tile >= h) {
		return 1
	}
	tile = max(tile/m.align*m.align, m.align)
	area := 0
	for ty := 0; ty < h; ty += tile {
		for tx := 0; tx < w; tx += tile {
			rh := min(ty+tile+m.halo, h) - max(ty-m.halo, 0)
			rw := min(tx+tile+m.halo, w) - max(tx-m.halo, 0)
			area += rh * rw
		}
	}
	return float64(area) / float64(w*h)
}

// Upscale runs n packed RGB24 frames of w x h through the model and writes
// the RGB24 result to out (n frames of OutputSize). With tile > 0 and a
// tileable model, frames are processed in tiles of about tile x tile input
// pixels; the result is bitwise the same as with tile = 0.
func (m *Graph) Upscale(ctx context.Context, in []byte, n, w, h int, out []byte, tile int) error {
	return m.UpscaleFormat(ctx, backend.RGB24, in, n, w, h, out, tile)
}

// UpscaleFormat is Upscale for frames in and out in format f, RGB24 or
// RGB48.
func (m *Graph) UpscaleFormat(ctx context.Context, f backend.PixelFormat, in []byte, n, w, h int, out []byte, tile int) error {
	if f != backend.RGB24 && f != backend.RGB48 { // the tiling copies packed RGB
		return fmt.Errorf("upscale: frames in %s cannot enter a model: use rgb24 or rgb48le", f.Name())
	}
	fh, fw, err := m.fullSizes(h, w)
	if err != nil {
		return err
	}
	ow, oh := fw[m.output], fh[m.output]
	px := f.FrameBytes(1, 1) // bytes a pixel
	if len(in) != n*w*h*px || len(out) != n*ow*oh*px {
		return fmt.Errorf("upscale: buffers of %d and %d bytes for %d frames %dx%d -> %dx%d", len(in), len(out), n, w, h, ow, oh)
	}
	if m.chans[m.output] != 3 {
		return fmt.Errorf("model %s produces %d channels, not RGB", m.Name, m.chans[m.output])
	}
	if tile <= 0 || !m.tileOK || (tile >= w && tile >= h) {
		return m.run(f, in, n, region{0, h, 0, w, h, w}, fh, fw, out)
	}
	tile = max(tile/m.align*m.align, m.align)
	sh, sw := m.scaleH[m.output], m.scaleW[m.output]
	var tileIn, tileOut []byte
	for ty := 0; ty < h; ty += tile {
		for tx := 0; tx < w; tx += tile {
			if err := ctx.Err(); err != nil {
				return err
			}
			// The tile proper, and the region with its halo.
			t := region{ty, min(ty+tile, h), tx, min(tx+tile, w), h, w}
			r := region{max(ty-m.halo, 0), min(t.y1+m.halo, h), max(tx-m.halo, 0), min(t.x1+m.halo, w), h, w}
			rw, rh := r.x1-r.x0, r.y1-r.y0
			tileIn = grow(tileIn, n*rw*rh*px)
			for fr := 0; fr < n; fr++ {
				for y := 0; y < rh; y++ {
					src := in[((fr*h+r.y0+y)*w+r.x0)*px:][:rw*px]
					copy(tileIn[((fr*rh)+y)*rw*px:], src)
				}
			}
			ry0, ry1 := span(sh, r.y0, r.y1, h, oh)
			rx0, rx1 := span(sw, r.x0, r.x1, w, ow)
			orw, orh := rx1-rx0, ry1-ry0
			tileOut = grow(tileOut, n*orw*orh*px)
			if err := m.run(f, tileIn, n, r, fh, fw, tileOut); err != nil {
				return err
			}
			// Copy the tile proper out of the result.
			ty0, ty1 := span(sh, t.y0, t.y1, h, oh)
			tx0, tx1 := span(sw, t.x0, t.x1, w, ow)
			for fr := 0; fr < n; fr++ {
				for y := ty0; y < ty1; y++ {
					src := tileOut[((fr*orh+y-ry0)*orw+tx0-rx0)*px:][:(tx1-tx0)*px]
					copy(out[((fr*oh+y)*ow+tx0)*px:], src)
				}
			}
		}
	}
	return nil
}

func (m *Graph) run(f backend.PixelFormat, in []byte, n int, rg region, fh, fw []int, out []byte) error {
	x, err := backend.FromFrames(m.b, in, f, n, rg.y1-rg.y0, rg.x1-rg.x0)
	if err != nil {
		return err
	}
	defer x.Free()
	y, err := m.forward(x, rg, fh, fw)
	if err != nil {
		return err
	}
	defer y.Free()
	return backend.ToFrames(m.b, y, f, out)
}

// Forward runs whole frames already on the backend (n h w 3 in [0,1]) and
// returns the output tensor, which the caller frees.
func (m *Graph) Forward(x backend.Tensor) (backend.Tensor, error) {
	s := x.Shape()
	fh, fw, err := m.fullSizes(s.H, s.W)
	if err != nil {
		return nil, err
	}
	return m.forward(x, region{0, s.H, 0, s.W, s.H, s.W}, fh, fw)
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
