package pipeline

import (
	"context"
	"sync"

	"github.com/vsr-dev/vsr/video"
)

// pieceFrames is the length of the pieces a pieceSink encodes in parallel.
const pieceFrames = 24

// pieceSink encodes the output of a causal engine in parallel. Such an
// engine cannot start in the middle of the video, so its input cannot be
// cut into segments, but its output can: the sink cuts the frames, in
// order, into pieces of pieceFrames, encodes up to workers pieces at once
// (each by its own encoder, into a temporary file beside the output), and
// at Close joins them losslessly into the output with the source's audio.
// Write blocks while every worker is busy, which bounds the frames held in
// memory to workers+1 pieces.
type pieceSink struct {
	ctx    context.Context
	cancel context.CancelFunc
	out    string
	enc    video.EncodeOptions
	concat video.ConcatOptions
	fs     int // frame bytes

	buf    []byte
	frames int
	files  []string
	sem    chan struct{}
	wg     sync.WaitGroup

	mu  sync.Mutex
	err error
}

func newPieceSink(ctx context.Context, out string, enc video.EncodeOptions, concat video.ConcatOptions, frameBytes, workers int) *pieceSink {
	ctx, cancel := context.WithCancel(ctx)
	return &pieceSink{ctx: ctx, cancel: cancel, out: out, enc: enc, concat: concat, fs: frameBytes, sem: make(chan struct{}, workers)}
}

func (p *pieceSink) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Write adds a frame, handing the piece to a worker when it is full.
func (p *pieceSink) Write(frame []byte) error {
	if err := p.failed(); err != nil {
		return err
	}
	if p.buf == nil {
		p.buf = make([]byte, 0, pieceFrames*p.fs)
	}
	p.buf = append(p.buf, frame...)
	if p.frames++; p.frames == pieceFrames {
		return p.flush()
	}
	return nil
}

// flush starts encoding the frames held so far as the next piece.
func (p *pieceSink) flush() error {
	if p.frames == 0 {
		return nil
	}
	buf, n := p.buf, p.frames
	p.buf, p.frames = nil, 0
	path := segmentPath(p.out, len(p.files))
	p.files = append(p.files, path)
	select {
	case p.sem <- struct{}{}:
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
	p.wg.Add(1)
	go func() {
		defer func() { <-p.sem; p.wg.Done() }()
		e := p.enc
		e.ExpectFrames = n
		sink, err := video.NewEncoder(p.ctx, path, e)
		for i := 0; err == nil && i < n; i++ {
			err = sink.Write(buf[i*p.fs : (i+1)*p.fs])
		}
		switch {
		case sink == nil:
		case err == nil:
			err = sink.Close()
		default:
			sink.Abort()
		}
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
				p.cancel() // stop the other pieces
			}
			p.mu.Unlock()
		}
	}()
	return nil
}

// Close encodes the last piece, waits for every piece and joins them.
func (p *pieceSink) Close() error {
	defer p.cancel()
	err := p.flush()
	p.wg.Wait()
	if err == nil {
		err = p.failed()
	}
	if err == nil {
		err = video.Concat(p.ctx, p.files, p.out, p.concat)
	}
	removeAll(p.files)
	return err
}

// Abort stops the encoders and removes the pieces.
func (p *pieceSink) Abort() {
	p.cancel()
	p.wg.Wait()
	removeAll(p.files)
}
