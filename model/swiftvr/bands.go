package swiftvr

import (
	"context"
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/parallel"
)

// halo makes a ReAE view compute one height band of every frame, as rank
// Me of a group whose ranks hold the bands in order from the top. Before
// each convolution wider than 1x1 a band takes the rows its kernel reads
// beyond the band from the ranks above and below (zero rows at the
// frame's own top and bottom, the convolution's padding), so each rank computes
// exactly its rows of what one rank computes on whole frames. Every other
// layer works pixel by pixel (nearest upsampling and the pixel
// (un)shuffles keep bands of whole 16-row multiples apart), and a
// MemBlock's causal state is its band's rows of the previous frame, so
// the state stays per band.
type halo struct {
	parallel.Group
	ctx  context.Context
	sent int // exchanges so far, naming each in its tag
}

// bandRows splits n rows into p bands as equal as can be: band i is rows
// [at[i], at[i+1]).
func bandRows(n, p int) []int {
	at := make([]int, p+1)
	for i := range at {
		at[i] = i * n / p
	}
	return at
}

// conv2d runs the convolution c on x, adding res (when non-nil) in its
// pass; on a band, after taking the halo rows from the neighbours.
func (r *ReAE) conv2d(x backend.Tensor, c conv, act backend.Activation, res backend.Tensor) (backend.Tensor, error) {
	p := c.p
	if r.halo != nil && c.kSize > 1 {
		ext, q, err := r.halo.extend(r.b, x, p)
		if err != nil {
			return nil, err
		}
		defer ext.Free()
		x, p = ext, q
	}
	if res != nil {
		return r.b.Conv2DAdd(x, c.w, p, act, res)
	}
	return r.b.Conv2D(x, c.w, p, act)
}

// extend returns x with the rows the convolution p reads above and below
// it, taken from the neighbouring bands (zeros past the frame's edges),
// and p without padding along the height. A band of whole strides reads
// p.PadT rows above it and KH-StrideH-PadT below (none for the stride-2
// convolutions).
func (h *halo) extend(b backend.Backend, x backend.Tensor, p backend.ConvParams) (backend.Tensor, backend.ConvParams, error) {
	s := x.Shape()
	top, bottom := p.PadT, max(0, p.KH-p.StrideH-p.PadT)
	if s.H%p.StrideH != 0 || s.H < max(top, bottom) {
		return nil, p, fmt.Errorf("reae band of %d rows for a convolution of stride %d reading %d rows around it", s.H, p.StrideH, max(top, bottom))
	}
	p.PadT, p.PadB = 0, 0
	h.sent++
	up, down := fmt.Sprintf("halo up %d", h.sent), fmt.Sprintf("halo down %d", h.sent)
	first, last := h.Me == 0, h.Me == h.Size()-1
	send := func(to, y0, n int, tag string) error {
		rows, err := b.Band(x, y0, n)
		if err != nil {
			return err
		}
		defer rows.Free()
		return h.Tr.Send(h.ctx, h.Ranks[h.Me], h.Ranks[to], tag, rows)
	}
	// Hand this band's edge rows to the neighbours that read them first,
	// then take theirs.
	if !first && bottom > 0 {
		if err := send(h.Me-1, 0, bottom, up); err != nil {
			return nil, p, err
		}
	}
	if !last && top > 0 {
		if err := send(h.Me+1, s.H-top, top, down); err != nil {
			return nil, p, err
		}
	}
	rows := func(n, edge, from int, tag string) (backend.Tensor, error) {
		if from < 0 || from >= h.Size() { // the frame's edge: the convolution's zero padding
			return b.Band(x, edge, n)
		}
		return h.Tr.Recv(h.ctx, h.Ranks[h.Me], h.Ranks[from], tag)
	}
	var above, below backend.Tensor
	defer func() { freeAll([]backend.Tensor{above, below}) }()
	parts := []backend.Tensor{x}
	var err error
	if top > 0 {
		if above, err = rows(top, -top, h.Me-1, down); err != nil {
			return nil, p, err
		}
		parts = append([]backend.Tensor{above}, parts...)
	}
	if bottom > 0 {
		if below, err = rows(bottom, s.H, h.Me+1, up); err != nil {
			return nil, p, err
		}
		parts = append(parts, below)
	}
	ext, err := stackRows(b, parts)
	return ext, p, err
}

// stackRows returns the frames of parts stacked from the top (parts of the
// same frames, width and channels).
func stackRows(b backend.Backend, parts []backend.Tensor) (backend.Tensor, error) {
	s := parts[0].Shape()
	s.H = 0
	for _, t := range parts {
		s.H += t.Shape().H
	}
	out, err := b.Empty(s)
	if err != nil {
		return nil, err
	}
	y := 0
	for _, t := range parts {
		if err := b.CopyBand(out, y, t); err != nil {
			out.Free()
			return nil, err
		}
		y += t.Shape().H
	}
	return out, nil
}

// reach returns how many latent rows above and below a band the
// encoder's latents and the decoder's frames of the band depend on: the
// convolutions' reach, walked back from the output through the strides
// and upsamplings, in whole latent rows.
func (r *ReAE) reach() (enc, dec int) {
	h := 0 // rows at the resolution of the layer's output
	for i := len(r.enc) - 1; i >= 0; i-- {
		l := r.enc[i]
		switch l.kind {
		case lConv:
			h = h*l.conv.p.StrideH + l.conv.kSize/2
		case lMem:
			for _, c := range l.mem {
				h += c.kSize / 2
			}
		}
	}
	enc = (2*h + 15) / 16 // pixel unshuffle by 2, 16 input rows a latent row
	h = 0                 // the decoder's output rows at half resolution (before the pixel shuffle)
	for i := len(r.dec) - 1; i >= 0; i-- {
		l := r.dec[i]
		switch l.kind {
		case lConv:
			h += l.conv.kSize / 2
		case lMem:
			for _, c := range l.mem {
				h += c.kSize / 2
			}
		case lUp:
			h = (h + 1) / 2
		}
	}
	return enc, h
}

// The ReAE of a Session in height bands run one after another
// (Options.Bands, --reae-bands), for frames whose autoencoder does not fit
// the device at once: each band runs the whole encoder or decoder on its
// latent rows and the rows within reach around them, with its own causal
// state, and keeps its own rows. The rows around a band are computed with
// the band's edge as the frame's edge, which changes them but, beyond the
// reach, nothing a band keeps: the result is exactly the whole frame's,
// and the working set is a band's.

// encodeBands encodes the chunk's frames in band by band and returns the
// whole latents.
func (e *Session) encodeBands(in backend.Tensor) (backend.Tensor, error) {
	reach, _ := e.r.reach()
	return e.eachBand(reach, 1, func(i, a, z int) (backend.Tensor, error) {
		return e.r.EncodeFrom(in, e.bandSt[i], func(x backend.Tensor) (backend.Tensor, error) {
			p, err := e.prepare(x)
			if err != nil {
				return nil, err
			}
			defer p.Free()
			return e.r.b.Band(p, 16*a, 16*(z-a))
		})
	})
}

// decodeBands decodes the output frames [from, from+n) of the latents z
// band by band and returns them whole.
func (e *Session) decodeBands(z backend.Tensor, from, n int) (backend.Tensor, error) {
	_, reach := e.r.reach()
	return e.eachBand(reach, 16, func(i, a, b int) (backend.Tensor, error) {
		zb, err := e.r.b.Band(z, a, b-a)
		if err != nil {
			return nil, err
		}
		defer zb.Free()
		return e.r.DecodeFrames(zb, e.bandSt[i], from, n)
	})
}

// eachBand runs f on each band i over the latent rows [a, b): its own and
// those within reach around it. f's result has scale rows a latent row;
// eachBand keeps each band's own rows of it and returns them stacked.
func (e *Session) eachBand(reach, scale int, f func(i, a, b int) (backend.Tensor, error)) (backend.Tensor, error) {
	rows := e.bands[len(e.bands)-1]
	var parts []backend.Tensor
	defer func() { freeAll(parts) }()
	for i := range len(e.bands) - 1 {
		l0, l1 := e.bands[i], e.bands[i+1]
		a := max(0, l0-reach)
		y, err := f(i, a, min(rows, l1+reach))
		if err != nil {
			return nil, err
		}
		mine, err := e.r.b.Band(y, scale*(l0-a), scale*(l1-l0))
		y.Free()
		if err != nil {
			return nil, err
		}
		parts = append(parts, mine)
	}
	return stackRows(e.r.b, parts)
}
