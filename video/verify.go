package video

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Errors wrapped (see errors.Is) by Encoder.Close, Encoder.Write and
// Concat when the file ffmpeg wrote fails the checks made before it is
// renamed into view (see outputCheck): nothing is published then, and a
// file already at the output path stays as it was.
var (
	// ErrDiskFull: the output's filesystem had no room for the file
	// (ENOSPC or EDQUOT, or less free space than a join needs). The
	// message says about how much more room is needed; the same work may
	// succeed once that much is freed.
	ErrDiskFull = errors.New("no space left on the output's filesystem")
	// ErrIncomplete: ffmpeg reported an error writing the output (even
	// with an exit status of 0), or the file does not read back whole.
	ErrIncomplete = errors.New("incomplete output")
)

// diskFullLines are how ffmpeg reports a write refused for want of room.
var diskFullLines = []string{"no space left on device", "disk quota exceeded"}

// writeErrorLines are how ffmpeg's muxers and I/O layer report an output
// they could not write. ffmpeg 5.1 exits 0 after "Error writing trailer",
// so they are looked for whatever the exit status.
var writeErrorLines = []string{
	"error writing trailer", "could not write header", "av_interleaved_write_frame",
	"error muxing", "error submitting a packet to the muxer", "error closing file",
	"i/o error", "input/output error", "file too large",
}

// writeFailure returns the first line of ffmpeg's stderr tail that reports
// a failure to write its output ("" when none does), and whether one says
// the disk is full.
func writeFailure(tail *logTail) (line string, full bool) {
	for _, l := range tail.Lines() {
		low := strings.ToLower(l)
		if containsAny(low, diskFullLines) {
			return cleanLine(l), true
		}
		if line == "" && containsAny(low, writeErrorLines) {
			line = cleanLine(l)
		}
	}
	return line, false
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// isDiskFull reports whether err is the system's "no space" or "quota
// exceeded".
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// outputCheck is what is checked of a file ffmpeg has finished before it
// is renamed into view: written, then readBack.
type outputCheck struct {
	path string   // the file ffmpeg wrote
	what string   // the start of messages: `encode "out.mp4"`
	tail *logTail // ffmpeg's stderr
	sync bool     // force the file to disk
	// packets is the number of video packets (one per frame) the file
	// must hold; 0 checks only that it holds some.
	packets int
	// need, if > 0, is the bytes the whole file was expected to take;
	// else it is estimated from the file's size, scaled by wrote/muxed
	// frames when ffmpeg stopped after muxed of the wrote frames.
	need         int64
	muxed, wrote int
}

// written fails when ffmpeg's stderr reports an error writing the file,
// whatever its exit status: ErrDiskFull for a full disk, ErrIncomplete
// for any other.
func (c outputCheck) written() error {
	line, full := writeFailure(c.tail)
	switch {
	case full:
		return c.diskFull()
	case line != "":
		return kindErrorf(ErrIncomplete, "%s: ffmpeg could not write the output whole (ffmpeg: %s); the output was discarded", c.what, line)
	}
	return nil
}

// readBack checks the file itself: a non-empty regular file (forced to
// disk when c.sync) that reads back whole, as a player reads it: every
// packet of its first video stream is demuxed (not decoded) without an
// error, up to the last, and there are c.packets of them. A file whose
// index was never written (an MP4 cut short) cannot be opened; one cut
// anywhere else lacks packets or ends in a partial one.
func (c outputCheck) readBack(ctx context.Context, t tools) error {
	if err := checkFile(c.path, c.sync); err != nil {
		if isDiskFull(err) {
			return c.diskFull()
		}
		return kindErrorf(ErrIncomplete, "%s: ffmpeg left no usable output (%v); the output was discarded", c.what, err)
	}
	n, r := readPackets(ctx, c.path, t, "v:0", outputInput(c.path))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", c.what, err)
	}
	switch {
	case r.err != nil || r.tail.Count() > 0:
		return kindErrorf(ErrIncomplete, "%s: the finished file does not read back whole (%s); the output was discarded", c.what, describe(r.tail, r.err))
	case n <= 0:
		return kindErrorf(ErrIncomplete, "%s: the finished file holds no video packets; the output was discarded", c.what)
	case c.packets > 0 && n != c.packets:
		return kindErrorf(ErrIncomplete, "%s: the finished file holds %d video packets, not the %d frames written; the output was discarded", c.what, n, c.packets)
	}
	return nil
}

// outputInput is how the check opens an output vsr wrote: any demuxer
// (it is vsr's own file, in whatever container the extension chose), the
// file protocol only.
func outputInput(path string) []string {
	args := []string{"-protocol_whitelist", "file"}
	if f := imageDemuxer(path); f != "" {
		args = append(args, "-f", f)
	}
	return append(args, "-i", fileArg(path))
}

// diskFull is c's ErrDiskFull error: the room missing is the bytes the
// whole file needs, and a margin, less the room there is (the free space
// and the file's own, which its removal frees).
func (c outputCheck) diskFull() error {
	var size int64
	if st, err := os.Stat(c.path); err == nil {
		size = st.Size()
	}
	need := c.need
	if need <= 0 {
		need = size
		if c.muxed > 0 && c.muxed < c.wrote {
			need = size * int64(c.wrote) / int64(c.muxed)
		}
	}
	free, _ := freeSpace(filepath.Dir(c.path))
	return diskFullError(c.path, need+spaceMargin(need)-size-free)
}

// spaceMargin is the room a file of n bytes is given beyond them: for
// what a muxer adds (an index, the last buffers) and the streams a join
// muxes in.
func spaceMargin(n int64) int64 { return n/64 + 64<<10 }

// diskFullError says that the filesystem of the file path lacks about
// more bytes, rounded up to kB below a MB and to MB above (at least 1 kB
// is said).
func diskFullError(path string, more int64) error {
	amount := fmt.Sprintf("%d kB", max((more+999)/1000, 1))
	if more > 1_000_000 {
		amount = fmt.Sprintf("%d MB", (more+999_999)/1_000_000)
	}
	return kindErrorf(ErrDiskFull, "no space left on the output's filesystem (%s): about %s more needed; free that much and run it again", shownDir(path), amount)
}

// shownDir names the directory of the file path as a person knows it: a
// directory opened through its descriptor (FDPath) by its name now, and a
// vsr temporary directory (".NAME.vsr-*") by the directory it is in.
func shownDir(path string) string {
	dir := filepath.Dir(path)
	if rest, ok := strings.CutPrefix(dir, selfFD); ok && !strings.Contains(rest, "/") {
		if name, err := os.Readlink(dir); err == nil {
			dir = name
		}
	}
	for b := filepath.Base(dir); strings.HasPrefix(b, ".") && strings.Contains(b, ".vsr-"); b = filepath.Base(dir) {
		dir = filepath.Dir(dir)
	}
	return dir
}
