package app

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/video"
)

// Image is one still image to restore: its probe, where its result goes
// and how it is written (see ImageEncode).
type Image struct {
	Info   *video.Info
	Output string
	Encode video.EncodeOptions
	// Warn, if set, is told what the output cannot keep (see
	// PrepareImage).
	Warn func(string)
}

// RunImages restores images, those of one size and depth together: their frames go
// through the model in batches of batch (0 = BatchSize's choice), while
// the results of the last batch are written, each to its own file (one
// frame, atomically, as a restore), each prepared by PrepareImage (alpha,
// orientation, ICC profile). A model that reads frames as a video
// (SwiftVR's causal chunks) restores each image alone instead. It returns
// for each image its result, or its error (nil for those written, whose
// result's Seconds is the time from the read of its batch to its file
// written); progress, if set, is called after each image written.
func (l *Loaded) RunImages(ctx context.Context, imgs []Image, params model.Values, batch int, progress func(done, total int)) ([]*pipeline.Result, []error) {
	errs := make([]error, len(imgs))
	res := make([]*pipeline.Result, len(imgs))
	bySize := map[[3]int][]int{}
	var sizes [][3]int
	imgs = slices.Clone(imgs)
	for i, im := range imgs {
		ext := filepath.Ext(im.Output)
		info, enc, notes, err := PrepareImage(ctx, im.Info, ext, deepImage(ext, im.Encode, im.Info))
		if err != nil {
			errs[i] = err
			continue
		}
		for _, n := range notes {
			if im.Warn != nil {
				im.Warn(n)
			}
		}
		imgs[i].Info, imgs[i].Encode = info, enc
		k := [3]int{info.Width, info.Height, pipeline.InputDepth(info)}
		if bySize[k] == nil {
			sizes = append(sizes, k)
		}
		bySize[k] = append(bySize[k], i)
	}
	var mu sync.Mutex
	done := 0
	report := func() { // from the writers' goroutines too
		mu.Lock()
		defer mu.Unlock()
		done++
		if progress != nil {
			progress(done, len(imgs))
		}
	}
	for _, k := range sizes {
		group := bySize[k]
		if err := l.runSize(ctx, imgs, group, params, BatchSize(batch, l.Dev), res, errs, report); err != nil {
			for _, i := range group {
				if errs[i] == nil {
					errs[i] = err
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	for i := range res {
		if errs[i] != nil {
			res[i] = nil
		}
	}
	return res, errs
}

// runSize restores the images of group (all of one size), setting res of
// those written and errs of those that fail on their own; it returns an
// error that fails the rest.
func (l *Loaded) runSize(ctx context.Context, imgs []Image, group []int, params model.Values, batch int, res []*pipeline.Result, errs []error, report func()) error {
	first := imgs[group[0]].Info
	s, err := l.Session(ctx, first, len(group), params)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, causal := s.(model.Planner); causal || pipeline.InputDepth(first) > 8 {
		// One by one: a causal model reads frames as a video; a deep image
		// goes through the model at 16 bits (the batches here are 8-bit).
		for _, i := range group {
			res[i], errs[i] = l.Run(ctx, Job{Input: imgs[i].Info.Path, Output: imgs[i].Output, Info: imgs[i].Info, Params: params, MaxFrames: 1, Encode: imgs[i].Encode, prepared: true})
			report()
		}
		return nil
	}
	w, h := first.Width, first.Height
	ow, oh := s.OutputSize(w, h)
	n := min(batch, len(group))
	b, err := s.NewBatch(n, w, h, backend.RGB24, backend.RGB24)
	if err != nil {
		return err
	}
	defer b.Free()
	in, frame, oframe := b.In(), w*h*3, ow*oh*3
	var writes sync.WaitGroup
	defer writes.Wait()
	for at := 0; at < len(group); at += n {
		if err := ctx.Err(); err != nil {
			return err
		}
		part := group[at:min(at+n, len(group))]
		began := time.Now()
		// Frames of the images that decode; the others fail alone.
		var ok []int
		for _, i := range part {
			if err := readImage(ctx, imgs[i].Info, in[len(ok)*frame:][:frame]); err != nil {
				errs[i] = err
				report()
				continue
			}
			ok = append(ok, i)
		}
		if len(ok) == 0 {
			continue
		}
		writes.Wait() // the last batch's results are out of b
		if err := s.Start(ctx, b, len(ok)); err != nil {
			return err
		}
		if err := b.Wait(); err != nil {
			return err
		}
		out := append([]byte(nil), b.Out()[:len(ok)*oframe]...)
		for j, i := range ok {
			writes.Add(1)
			go func() {
				defer writes.Done()
				errs[i] = writeImage(ctx, imgs[i], ow, oh, out[j*oframe:][:oframe])
				sec := time.Since(began).Seconds()
				res[i] = &pipeline.Result{Frames: 1, FPS: 1 / sec, Seconds: sec, Width: ow, Height: oh, Output: imgs[i].Output}
				report()
			}()
		}
	}
	return nil
}

// readImage decodes the one frame of an image into dst (RGB24).
func readImage(ctx context.Context, info *video.Info, dst []byte) error {
	d, err := video.NewDecoder(ctx, info, video.DecodeOptions{MaxFrames: 1})
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Read(dst)
}

// writeImage encodes one RGB24 frame of w x h into im.Output.
func writeImage(ctx context.Context, im Image, w, h int, frame []byte) error {
	e := im.Encode
	e.Width, e.Height, e.FPS, e.InputPixFmt, e.ExpectFrames = w, h, im.Info.FPS, "rgb24", 1
	enc, err := video.NewEncoder(ctx, im.Output, e)
	if err != nil {
		return err
	}
	if err := enc.Write(frame); err != nil {
		enc.Abort()
		return err
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("%s: %w", im.Output, err)
	}
	return nil
}
