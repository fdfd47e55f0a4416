package cdavsr

import "github.com/vsr-dev/vsr/backend"

// Side data is what the network reads besides the frame: for each pixel p
// a motion vector mv (in low-resolution pixels, x then y) such that p came
// from p + mv in the previous frame, and the luma residual
// (Y_t(p) - Y_{t-1}(p + mv)) divided by the luma range. Codecs carry both,
// but the ffmpeg executable exports neither, so vsr estimates them from the
// decoded frames on the model's device: full-range luma (BT.601 weights,
// 0..255) by a 1x1 convolution, then block matching with quarter-pel
// refinement (backend.Motion.MatchBlocks).

// LumaRange is the black-to-white range of the luma vsr computes.
const LumaRange = 255

// Block is the motion search's block size, as a codec's 8x8 blocks.
const Block = 8

// lumaWeights are the BT.601 weights of R, G and B, in luma levels.
var lumaWeights = [3]float32{0.299 * LumaRange, 0.587 * LumaRange, 0.114 * LumaRange}

// lumaConv prepares the 1x1 convolution from RGB in [0,1] to full-range
// luma.
func lumaConv(b backend.Backend) (conv, error) {
	w, err := b.PrepareConv(1, 3, 1, 1, lumaWeights[:], nil)
	return conv{w: w, p: backend.ConvParams{KH: 1, KW: 1, StrideH: 1, StrideW: 1, DilH: 1, DilW: 1}}, err
}

// sideData computes the luma of frame x and, against the previous luma,
// the motion field and the residual, all of x's type.
func (n *Net) sideData(x, prev backend.Tensor, rng int) (luma, mv, res backend.Tensor, err error) {
	if n.wide != nil {
		luma, err = n.luma32(x)
	} else {
		luma, err = n.b.Conv2D(x, n.luma.w, n.luma.p, linear)
	}
	if err != nil || prev == nil {
		return luma, nil, nil, err
	}
	mv, res, err = n.b.(backend.Motion).MatchBlocks(luma, prev, Block, rng, 1.0/LumaRange)
	if err != nil {
		luma.Free()
		return nil, nil, nil, err
	}
	return luma, mv, res, nil
}

// luma32 is the luma of a float32 frame in float32 (see Net.wide): the
// weighted sum of its channels, where a half-precision convolution would
// round a luma of 200 to an eighth of a level.
func (n *Net) luma32(x backend.Tensor) (backend.Tensor, error) {
	var sum backend.Tensor
	for c, w := range lumaWeights {
		ch, err := n.b.Channels(x, c, 1)
		if err != nil {
			if sum != nil {
				sum.Free()
			}
			return nil, err
		}
		if sum == nil {
			sum, err = n.b.AddScaled(ch, w, ch, 0)
		} else {
			var s backend.Tensor
			s, err = n.b.AddScaled(sum, 1, ch, w)
			sum.Free()
			sum = s
		}
		ch.Free()
		if err != nil {
			return nil, err
		}
	}
	return sum, nil
}
