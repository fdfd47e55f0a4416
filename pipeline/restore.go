// Package pipeline runs one restore request as a stream: a reader goroutine
// decodes frames into batches, the model upscales each batch, and a writer
// goroutine encodes the results, with bounded queues between the stages so
// memory stays flat however long the video is.
//
// The output file appears only when everything succeeded: the encoder writes
// a temporary file beside it and renames it at the end; on any error or
// cancellation the temporary file is removed.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// Upscaler is what the pipeline needs of a model.
type Upscaler interface {
	// OutputSize returns the output frame size for an input of w x h
	// (0, 0 if the input is too small for the model).
	OutputSize(w, h int) (int, int)
	// Upscale turns n packed RGB24 frames of w x h into n frames of
	// OutputSize(w, h).
	Upscale(ctx context.Context, in []byte, n, w, h int, out []byte) error
}

// Request is one restore job.
type Request struct {
	Input  string
	Output string
	Model  Upscaler
	// Batch is the number of frames handed to the model at once (default 1).
	Batch int
	// MaxFrames limits the job to the first MaxFrames frames (0 = all).
	MaxFrames int
	// Encode sets the codec, quality and pixel format; size, fps, audio and
	// frame count are filled in from the input.
	Encode video.EncodeOptions
	// Progress, if set, is called after each batch is written, from the
	// writer goroutine.
	Progress func(done, total int)
	// Info is the input's probe, if the caller already has it.
	Info *video.Info
}

// Result summarises a finished job.
type Result struct {
	Frames  int     `json:"frames"`
	FPS     float64 `json:"fps"`
	Seconds float64 `json:"seconds"`
	Width   int     `json:"width"`
	Height  int     `json:"height"`
	Output  string  `json:"output"`
}

// batch is a group of consecutive frames travelling through the stages.
type batch struct {
	n   int
	in  []byte
	out []byte
}

// Restore runs req to completion or to the first error. The input is
// probed (unless req.Info is set), decoded, upscaled and encoded; audio is
// carried over; the output keeps the input's fps and frame count.
func Restore(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	info := req.Info
	if info == nil {
		var err error
		if info, err = video.Probe(ctx, req.Input); err != nil {
			return nil, err
		}
	}
	total := info.Frames
	if req.MaxFrames > 0 && req.MaxFrames < total {
		total = req.MaxFrames
	}
	w, h := info.Width, info.Height
	ow, oh := req.Model.OutputSize(w, h)
	if ow <= 0 || oh <= 0 {
		return nil, fmt.Errorf("%s: a %dx%d video is too small for this model", req.Input, w, h)
	}
	bs := max(req.Batch, 1)

	enc := req.Encode
	enc.Width, enc.Height, enc.FPS = ow, oh, info.FPS
	enc.InputPixFmt = "rgb24"
	enc.ExpectFrames = total
	if info.HasAudio && enc.AudioFrom == "" {
		enc.AudioFrom = req.Input
	}
	// Start the encoder first: it checks the output directory before any
	// work is done.
	encoder, err := video.NewEncoder(ctx, req.Output, enc)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			encoder.Abort()
		}
	}()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	decoder, err := video.NewDecoder(ctx, info, video.DecodeOptions{MaxFrames: total})
	if err != nil {
		return nil, err
	}
	defer decoder.Close()
	const depth = 2 // batches in flight per queue
	free := make(chan *batch, depth+2)
	for range depth + 2 {
		free <- &batch{in: make([]byte, bs*w*h*3), out: make([]byte, bs*ow*oh*3)}
	}
	decoded := make(chan *batch, depth)
	upscaled := make(chan *batch, depth)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // reader
		defer wg.Done()
		defer close(decoded)
		fs := w * h * 3
		for read := 0; read < total; {
			var b *batch
			select {
			case b = <-free:
			case <-ctx.Done():
				return
			}
			b.n = 0
			for b.n < bs && read < total {
				if err := decoder.Read(b.in[b.n*fs : (b.n+1)*fs]); err != nil {
					if errors.Is(err, io.EOF) {
						err = fmt.Errorf("%s: decoded only %d of %d frames", req.Input, read, total)
					}
					cancel(err)
					return
				}
				b.n++
				read++
			}
			select {
			case decoded <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	written := 0
	go func() { // writer
		defer wg.Done()
		fs := ow * oh * 3
		for b := range upscaled {
			for i := 0; i < b.n; i++ {
				if err := encoder.Write(b.out[i*fs : (i+1)*fs]); err != nil {
					cancel(err)
					return
				}
			}
			written += b.n
			if req.Progress != nil {
				req.Progress(written, total)
			}
			free <- b
		}
	}()
	// The model runs on this goroutine.
	func() {
		defer close(upscaled)
		for b := range decoded {
			if err := req.Model.Upscale(ctx, b.in[:b.n*w*h*3], b.n, w, h, b.out[:b.n*ow*oh*3]); err != nil {
				cancel(err)
				return
			}
			select {
			case upscaled <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if written != total {
		return nil, fmt.Errorf("wrote %d of %d frames", written, total)
	}
	if err := encoder.Close(); err != nil {
		return nil, err
	}
	ok = true
	sec := time.Since(start).Seconds()
	return &Result{Frames: total, FPS: float64(total) / sec, Seconds: sec, Width: ow, Height: oh, Output: req.Output}, nil
}
