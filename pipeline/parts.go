package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
)

// Parts and segments (issue 38). The output of a file restore is made of
// parts, each an encoder's file, joined losslessly at the end; the parts
// are spread over segments, each encoding its contiguous run of parts one
// after the other (one encoder open per segment at a time). Without a
// journal there is one part per segment. A resumable run cuts the output
// into parts of about Request.CheckpointEvery seconds, so that a run
// stopped anywhere loses at most about that much work: each part is
// recorded in the journal once closed, and a rerun restores only the parts
// after the last recorded one. A causal engine (a model.Resumer) has its
// part boundaries where its state is saved (its checkpoints), and may have
// more where the segments need them.

// DefaultCheckpointEvery is the seconds of video per part of a resumable
// run when Request.CheckpointEvery is 0.
const DefaultCheckpointEvery = 60.0

// partFrames is the frames of about sec seconds of video at fps (sec not
// a positive finite number: DefaultCheckpointEvery), at least 1.
func partFrames(sec float64, fps float64) int {
	if !(sec > 0) || math.IsInf(sec, 0) {
		sec = DefaultCheckpointEvery
	}
	if !(fps > 0) || math.IsInf(fps, 0) {
		fps = 25
	}
	return int(min(max(math.Round(sec*fps), 1), math.MaxInt32))
}

// checkpoint is a batch of a causal engine's plan after which its state is
// saved: in input frames are read and out output frames written by batches
// 0..batch.
type checkpoint struct{ batch, in, out int }

// checkpoints chooses the batches of plan, for a video of total frames,
// after which r's state is saved: about every frames input frames, among
// those r.Checkpoint allows, each giving more output frames than the one
// before and fewer than total.
func checkpoints(r model.Resumer, plan []int, total, every int) []checkpoint {
	var cps []checkpoint
	in, last, lastOut := 0, 0, 0
	for i, n := range plan {
		in += n
		if in-last < every {
			continue
		}
		out, ok := r.Checkpoint(total, i)
		if !ok || out <= lastOut || out >= total {
			continue
		}
		cps = append(cps, checkpoint{batch: i, in: in, out: out})
		last, lastOut = in, out
	}
	return cps
}

// resumableParts are the parts of a resumable run of total frames in
// nseg segments, of about every frames each; for a causal engine r with
// the batches plan, with the checkpoints where they end.
func resumableParts(total, nseg, every int, plan []int, r model.Resumer) ([]part, []checkpoint) {
	var at []int
	var cps []checkpoint
	if plan != nil {
		cps = checkpoints(r, plan, total, every)
		for _, c := range cps {
			at = append(at, c.out)
		}
	} else {
		for i, n := 1, (total+every-1)/every; i < n; i++ {
			at = append(at, total*i/n)
		}
	}
	return partsAt(total, nseg, at), cps
}

// partsAt cuts total frames into parts at the boundaries at (each in
// (0, total)), and where fewer than nseg parts result, also at the
// boundaries of nseg segments, so that every segment has a part.
func partsAt(total, nseg int, at []int) []part {
	cuts := slices.Clone(at)
	if len(cuts)+1 < nseg {
		for _, p := range segmentRanges(total, nseg)[1:] {
			cuts = append(cuts, p.start)
		}
	}
	cuts = append(cuts, 0, total)
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	ps := make([]part, len(cuts)-1)
	for i := range ps {
		ps[i] = part{cuts[i], cuts[i+1] - cuts[i]}
	}
	return ps
}

// group spreads parts (contiguous, in order) over at most nseg segments of
// contiguous parts and about equal frames, each with one part at least: it
// returns each segment's first part index, then len(parts).
func group(parts []part, nseg int) []int {
	n := min(nseg, len(parts))
	if n == 0 {
		return []int{0}
	}
	start, end := parts[0].start, parts[len(parts)-1].start+parts[len(parts)-1].count
	bounds := []int{0}
	k := 0
	for s := 1; s < n; s++ {
		target := start + (end-start)*s/n
		for k < len(parts) && parts[k].start < target {
			k++
		}
		k = min(max(k, bounds[s-1]+1), len(parts)-(n-s))
		bounds = append(bounds, k)
	}
	return append(bounds, len(parts))
}

// partSink is the Sink of one segment: it writes the frames of its parts
// (parts[first:first+n]) in order, each part to an encoder of its own,
// opened (open) when its first frame comes, the segment's first at once,
// and closed, then reported (done, if set), after its last frame.
type partSink struct {
	parts       []part
	first, next int  // the segment's first part; the part being written
	cur         Sink // its encoder, nil between parts
	written     int  // frames written to cur
	open        func(i int) (Sink, error)
	done        func(i int) error
}

// newPartSink opens the first of parts[first:last] and returns their
// sink.
func newPartSink(parts []part, first, last int, open func(i int) (Sink, error), done func(i int) error) (*partSink, error) {
	s := &partSink{parts: parts[:last], first: first, next: first, open: open, done: done}
	var err error
	s.cur, err = open(first)
	return s, err
}

func (s *partSink) Write(frame []byte) error {
	if s.cur == nil {
		if s.next == len(s.parts) {
			return fmt.Errorf("more frames than the segment's %d parts hold", len(s.parts)-s.first)
		}
		var err error
		if s.cur, err = s.open(s.next); err != nil {
			return err
		}
	}
	if err := s.cur.Write(frame); err != nil {
		return err
	}
	if s.written++; s.written < s.parts[s.next].count {
		return nil
	}
	err := s.cur.Close()
	s.cur, s.written = nil, 0
	if err != nil {
		return err
	}
	s.next++
	if s.done != nil {
		return s.done(s.next - 1)
	}
	return nil
}

// Close closes the part being written, if any; it fails if parts are
// missing.
func (s *partSink) Close() error {
	if s.cur != nil {
		err := s.cur.Close()
		s.cur = nil
		if err != nil {
			return err
		}
		return fmt.Errorf("part %d closed after %d of its %d frames", s.next, s.written, s.parts[s.next].count)
	}
	if s.next < len(s.parts) {
		return fmt.Errorf("the segment ended at part %d of %d", s.next, len(s.parts))
	}
	return nil
}

// Abort discards the part being written; those closed stay (in the
// journal, or in the work directory the caller removes).
func (s *partSink) Abort() {
	if s.cur != nil {
		s.cur.Abort()
		s.cur = nil
	}
}

// saver is a causal engine whose state is saved after each checkpoint
// batch, right after its Start (model.Resumer's contract), and handed to
// save with the checkpoint.
type saver struct {
	Engine
	r     model.Resumer
	next  int                // the plan's index of the next batch started
	at    map[int]checkpoint // by batch
	save  func(cp checkpoint, state []byte) error
	saved int           // bytes of the last state, for the next buffer's size
	spent time.Duration // in SaveState
}

func (s *saver) Start(ctx context.Context, b backend.Batch, k int) error {
	if err := s.Engine.Start(ctx, b, k); err != nil {
		return err
	}
	i := s.next
	s.next++
	cp, ok := s.at[i]
	if !ok {
		return nil
	}
	t := time.Now()
	var buf bytes.Buffer
	buf.Grow(s.saved)
	if err := s.r.SaveState(&buf); err != nil {
		return fmt.Errorf("saving the model's state after batch %d: %w", i, err)
	}
	s.saved = buf.Len()
	s.spent += time.Since(t)
	return s.save(cp, buf.Bytes())
}
