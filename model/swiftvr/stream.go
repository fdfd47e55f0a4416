package swiftvr

import "fmt"

// Chunk is one piece of the streaming protocol (LightX2V's streaming.py):
// frames [Start, Start+N) of the padded video.
type Chunk struct {
	Index, Start, N int
	Last            bool
}

// LatentCount is the number of latents the chunk encodes to.
func (c Chunk) LatentCount() int { return (c.N-1)/4 + 1 }

// OutputRange returns the output frames [from, to) the chunk writes for a
// video of frames frames: decoding lags the input by 3 frames, and the last
// chunk writes up to the end.
func (c Chunk) OutputRange(frames int) (from, to int) {
	trim := 3
	if c.Last {
		trim = 0
	}
	return max(0, c.Start-3), min(frames, c.Start+c.N-trim)
}

// PaddedFrames is the smallest 4k+1 count that holds frames frames: the
// video is padded to it by repeating its last frame.
func PaddedFrames(frames int) int { return ((frames-1+3)/4)*4 + 1 }

// PlanChunks splits a video of frames frames into chunks: one LAST chunk
// when the padded video has at most clipLen+4 frames, else a FIRST chunk
// of clipLen+4 frames, MIDDLE chunks of clipLen and a LAST chunk of the
// rest (a 4j+1 count).
func PlanChunks(frames, clipLen int) ([]Chunk, error) {
	if frames < 1 {
		return nil, fmt.Errorf("a video needs at least one frame")
	}
	if clipLen <= 0 || clipLen%4 != 0 {
		return nil, fmt.Errorf("--clip-len %d: want a positive multiple of 4", clipLen)
	}
	p := PaddedFrames(frames)
	if p <= clipLen+4 {
		return []Chunk{{Index: 0, Start: 0, N: p, Last: true}}, nil
	}
	cs := []Chunk{{Index: 0, Start: 0, N: clipLen + 4}}
	for start := clipLen + 4; start < p; {
		n := clipLen
		last := p-start <= clipLen
		if last {
			n = p - start
		}
		cs = append(cs, Chunk{Index: len(cs), Start: start, N: n, Last: last})
		start += n
	}
	return cs, nil
}

// realFrames is how many of the chunk's frames exist in the video (the rest
// repeat the last frame).
func (c Chunk) realFrames(frames int) int { return max(0, min(c.Start+c.N, frames)-c.Start) }

// OutputSize returns the restored size for an input of w x h: the input is
// first cropped to a multiple of 8; an explicit size wins, else the cropped
// size times ratio, rounded down to even numbers.
func OutputSize(w, h int, ratio float64, sizeW, sizeH int) (int, int, error) {
	w8, h8 := w&^7, h&^7
	if w8 == 0 || h8 == 0 {
		return 0, 0, fmt.Errorf("a %dx%d video is too small for SwiftVR (it needs at least 8x8)", w, h)
	}
	if sizeW > 0 || sizeH > 0 {
		if sizeW <= 0 || sizeH <= 0 || sizeW%2 != 0 || sizeH%2 != 0 || sizeW > 16384 || sizeH > 16384 {
			return 0, 0, fmt.Errorf("--size %dx%d: want even width and height", sizeW, sizeH)
		}
		return sizeW, sizeH, nil
	}
	if !(ratio > 0 && ratio <= 16) {
		return 0, 0, fmt.Errorf("--sr-ratio %g: want a number in (0, 16]", ratio)
	}
	ow, oh := int(float64(w8)*ratio)&^1, int(float64(h8)*ratio)&^1
	if ow < 2 || oh < 2 {
		return 0, 0, fmt.Errorf("--sr-ratio %g makes a %dx%d video empty", ratio, w, h)
	}
	return ow, oh, nil
}

// DiTInput says what the DiT sees for a chunk (LightX2V's
// StreamingTransformer.prepare_input): Prefix latents taken from the end of
// the previous chunk's input latents (zeros when there is no previous
// chunk) go before the chunk's own latents, the whole runs with RoPE
// temporal offset Offset (the global latent index of its first latent), and
// only the chunk's own latents are kept from the output.
type DiTInput struct {
	Prefix     int
	ZeroPrefix bool // the prefix is zeros: there was no previous chunk
	Offset     int
}

// DiTInput returns the chunk's DiT input plan for clip length clipLen and
// dit_overlap overlap. The last chunk is filled up to the usual length
// (clipLen/4 + 1 latents) with history; middle chunks get overlap history
// latents; the first chunk gets none.
func (c Chunk) DiTInput(clipLen, overlap int) DiTInput {
	offset := c.Start / 4
	clipLatents := clipLen / 4
	if c.Last {
		pad := clipLatents + 1 - c.LatentCount()
		if pad <= 0 {
			return DiTInput{Offset: offset}
		}
		return DiTInput{Prefix: pad, ZeroPrefix: c.Index == 0, Offset: max(0, offset-pad)}
	}
	if c.Index == 0 || overlap <= 0 {
		return DiTInput{Offset: offset}
	}
	// The history holds the previous chunk's latents: clipLen/4 of them
	// (plus one after the first chunk, which has an extra latent).
	prev := clipLatents
	if c.Index == 1 {
		prev++
	}
	k := min(overlap, prev)
	return DiTInput{Prefix: k, Offset: offset - k}
}

// historyTaken is how many of the previous chunk's latents chunk c's DiT
// takes with opt's settings (0: none, or zeros in their place).
func historyTaken(c Chunk, opt Options) int {
	if p := c.DiTInput(opt.ClipLen, opt.DiTOverlap); !p.ZeroPrefix {
		return p.Prefix
	}
	return 0
}
