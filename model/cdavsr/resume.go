package cdavsr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// A CDA-VSR run resumes where the recurrence restarts for certain: before
// a forced reset (the first frame, every --reset-every frames, a key frame
// of a stream with inter frames, or a frame of --side-data's resets.txt),
// where Plan cuts a batch. That frame takes the I path from itself alone,
// with no history and no motion search against the frame before, so a new
// session that knows only the frame number and the counters restores the
// rest bit for bit. A scene cut is no such point: whether a frame is one
// is decided from its residual against the frame before, and where it is
// not, the next frame needs the recurrent state (128 float32 channels a
// pixel). A run without forced resets after its first frame (--reset-every
// 0 on a stream without key frames) has no point to resume at.

// Checkpoint is yes where batch i+1 of Plan(total) starts on a forced
// reset (see above); never after the last batch, which leaves nothing to
// resume. out is the input frames of batches 0..i: CDA-VSR outputs one
// frame per input frame.
func (s *session) Checkpoint(total, i int) (out int, ok bool) {
	plan, ends := s.plan(total)
	if i < 0 || i >= len(plan) {
		return 0, false
	}
	return ends[i], i+1 < len(plan) && s.forced(ends[i])
}

// SaveState writes the frame restored next, the Resets counter and, with
// --dump-side-data, the frames listed in the dump's resets.txt, with the
// session's size and parameters, and no tensor (the format is stateHeader).
// It refuses where the next frame is not a forced reset. The state is
// known on the host as soon as Start returns: it waits for nothing.
func (s *session) SaveState(w io.Writer) error {
	if !s.forced(s.frame) {
		return fmt.Errorf("cdavsr: no state to save before frame %d: the recurrence is not sure to restart there (save only where Checkpoint says so)", s.frame)
	}
	var buf bytes.Buffer
	h := stateHeader{Magic: stateMagic, Version: stateVersion, Params: s.stateParams(),
		Frame: uint64(s.frame), Resets: uint64(s.Resets), Dumped: uint64(len(s.dumped))}
	binary.Write(&buf, binary.LittleEndian, h)
	for _, f := range s.dumped {
		binary.Write(&buf, binary.LittleEndian, uint64(f))
	}
	binary.Write(&buf, binary.LittleEndian, crc32.ChecksumIEEE(buf.Bytes()))
	_, err := w.Write(buf.Bytes())
	return err
}

// LoadState reads a state SaveState wrote into a session that has not
// started. It refuses, saying what differs, a state of another version,
// size or parameters, one whose frame is not a forced reset of this
// session (another video's key frames or resets.txt), a damaged one, and
// with --dump-side-data one whose dump lacks a frame restored before the
// state was saved.
func (s *session) LoadState(r io.Reader) error {
	if s.frame != 0 || s.Resets != 0 {
		return errors.New("cdavsr: a state loads into a new session, before its first Start")
	}
	d, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("cdavsr: reading the saved state: %w", err)
	}
	var h stateHeader
	n := binary.Size(h)
	if len(d) < len(stateMagic) || !bytes.Equal(d[:len(stateMagic)], stateMagic[:]) {
		return errors.New("cdavsr: the saved state is not a CDA-VSR session's; start over")
	}
	if len(d) < n+4 || crc32.ChecksumIEEE(d[:len(d)-4]) != binary.LittleEndian.Uint32(d[len(d)-4:]) {
		return errors.New("cdavsr: the saved state is damaged (its checksum does not match); start over")
	}
	binary.Read(bytes.NewReader(d), binary.LittleEndian, &h)
	if h.Version != stateVersion {
		return fmt.Errorf("cdavsr: the saved state is of version %d; this build reads version %d: start over", h.Version, stateVersion)
	}
	if p := s.stateParams(); h.Params != p {
		return fmt.Errorf("cdavsr: the saved state is of a session of %v; this one is of %v: start over", h.Params, p)
	}
	if dumps := h.Params.Side == sideDumped; (dumps && h.Dumped != h.Resets) || (!dumps && h.Dumped != 0) ||
		h.Dumped > uint64(len(d)-n-4)/8 || len(d) != n+8*int(h.Dumped)+4 {
		return errors.New("cdavsr: the saved state is damaged (its length does not match); start over")
	}
	frame := int(h.Frame)
	if h.Frame > 1<<40 || !s.forced(frame) || h.Resets > h.Frame || (frame > 0) != (h.Resets > 0) {
		return fmt.Errorf("cdavsr: the saved state resumes at frame %d with %d resets, which is no forced reset of this session (another video's key frames or resets.txt?): start over", h.Frame, h.Resets)
	}
	dumped := make([]int, h.Dumped)
	for i := range dumped {
		f := binary.LittleEndian.Uint64(d[n+8*i:])
		if f >= h.Frame || (i > 0 && f <= uint64(dumped[i-1])) {
			return errors.New("cdavsr: the saved state lists the dump's resets out of order; start over")
		}
		dumped[i] = int(f)
	}
	if err := s.checkDump(frame, dumped); err != nil {
		return err
	}
	s.frame, s.Resets, s.dumped = frame, int(h.Resets), dumped
	return nil
}

// checkDump checks, with --dump-side-data, that the dump holds the side
// data of every frame before frame that is not in resets (written by the
// run being resumed).
func (s *session) checkDump(frame int, resets []int) error {
	if s.dumpDir == "" {
		return nil
	}
	for f, j := 0, 0; f < frame; f++ {
		if j < len(resets) && resets[j] == f {
			j++
			continue
		}
		for _, name := range []string{mvName(f), resName(f)} {
			if _, err := os.Stat(filepath.Join(s.dumpDir, name)); err != nil {
				return fmt.Errorf("cdavsr: --dump-side-data %s lacks %s of the run being resumed: start over (--no-resume) to dump every frame", s.dumpDir, name)
			}
		}
	}
	return nil
}

// stateMagic begins a saved session state; stateVersion is its layout,
// raised at any change.
var stateMagic = [8]byte{'v', 's', 'r', 'c', 'd', 'a', 's', 't'}

const stateVersion = 1

// stateHeader is the fixed part of a saved state, little-endian. After it
// come the frames of the dump's resets.txt (Dumped uint64s), then the
// CRC-32 (IEEE) of everything before it.
type stateHeader struct {
	Magic   [8]byte
	Version uint32
	Params  stateParams
	// Frame is the frame restored next; Resets the frames restored on
	// the I path before it.
	Frame, Resets uint64
	Dumped        uint64
}

// stateParams are what a state must match in the session that loads it.
type stateParams struct {
	Width, Height, Scale uint64
	ResetEvery, Range    uint64
	Side                 uint64 // sideComputed, sideRead or sideDumped
}

// How a session gets its side data.
const (
	sideComputed = iota
	sideRead     // --side-data
	sideDumped   // --dump-side-data
)

func (s *session) stateParams() stateParams {
	side := sideComputed
	switch {
	case s.sideDir != "":
		side = sideRead
	case s.dumpDir != "":
		side = sideDumped
	}
	return stateParams{Width: uint64(s.w), Height: uint64(s.h), Scale: uint64(s.m.net.Scale),
		ResetEvery: uint64(s.every), Range: uint64(s.rng), Side: uint64(side)}
}

func (p stateParams) String() string {
	side := [...]string{sideComputed: "side data computed", sideRead: "side data read (--side-data)",
		sideDumped: "side data computed and dumped (--dump-side-data)"}
	how := "unknown side data"
	if p.Side < uint64(len(side)) {
		how = side[p.Side]
	}
	return fmt.Sprintf("%dx%d at x%d, reset-every %d, mv-range %d, %s", p.Width, p.Height, p.Scale, p.ResetEvery, p.Range, how)
}
