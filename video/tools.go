package video

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

// FFmpegPath, when non-empty, is the ffmpeg executable this package runs.
// When empty, the environment variable VSR_FFMPEG is used if set, else
// "ffmpeg" is looked up on PATH. Set it before starting any work; it is read
// without locking.
var FFmpegPath string

// FFprobePath, when non-empty, is the ffprobe executable Probe runs. When
// empty, the environment variable VSR_FFPROBE is used if set, else "ffprobe"
// is looked up on PATH. ffprobe is optional: when it cannot be found, or
// when the value is "none", Probe parses the output of ffmpeg instead. Set it
// before starting any work; it is read without locking.
var FFprobePath string

// ErrNoFFmpeg is wrapped by the errors returned when the ffmpeg executable
// cannot be found or run.
var ErrNoFFmpeg = errors.New("ffmpeg not found")

// Errors wrapped (see errors.Is) by the errors Probe and Decoder return for
// bad inputs. A missing input wraps fs.ErrNotExist.
var (
	// ErrNotVideo: the file is not a media file ffmpeg can read, or it has
	// no video stream.
	ErrNotVideo = errors.New("not a video")
	// ErrNoFrames: the video stream has no frames.
	ErrNoFrames = errors.New("no video frames")
	// ErrTruncated: the container states more frames than can be decoded.
	ErrTruncated = errors.New("truncated video")
	// ErrCorrupt: ffmpeg reported errors while decoding the video stream.
	ErrCorrupt = errors.New("corrupt video")
)

// kindError is a one-line message that also matches a sentinel error.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func kindErrorf(kind error, format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// tools are the resolved executables for one operation, and how it opens
// its input (see ProbeOptions). ffprobe is "" when it is not to be used.
type tools struct {
	ffmpeg  string
	ffprobe string
	in      ProbeOptions
}

// FFmpeg returns the ffmpeg executable this package runs (see FFmpegPath),
// or an error wrapping ErrNoFFmpeg saying how to provide one.
func FFmpeg() (string, error) {
	if p := FFmpegPath; p != "" {
		return lookTool(p, "FFmpegPath", ErrNoFFmpeg)
	}
	if p := os.Getenv("VSR_FFMPEG"); p != "" {
		return lookTool(p, "VSR_FFMPEG", ErrNoFFmpeg)
	}
	p, err := exec.LookPath("ffmpeg")
	if err != nil {
		return "", fmt.Errorf("%w on PATH: install ffmpeg (4.1 or newer) or set VSR_FFMPEG to its path", ErrNoFFmpeg)
	}
	return p, nil
}

// FFprobe returns the ffprobe executable Probe uses (see FFprobePath), or ""
// when none is available or it is disabled with "none", in which case Probe
// works from ffmpeg alone. An explicitly configured path that does not exist
// is an error.
func FFprobe() (string, error) {
	p, src := FFprobePath, "FFprobePath"
	if p == "" {
		p, src = os.Getenv("VSR_FFPROBE"), "VSR_FFPROBE"
	}
	switch {
	case strings.EqualFold(p, "none"):
		return "", nil
	case p != "":
		return lookTool(p, src, errNoFFprobe)
	}
	p, err := exec.LookPath("ffprobe")
	if err != nil {
		return "", nil
	}
	return p, nil
}

var errNoFFprobe = errors.New("ffprobe not found")

func lookTool(p, src string, kind error) (string, error) {
	found, err := exec.LookPath(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s=%q is not an executable file: fix it, or unset it to search PATH", kind, src, p)
	}
	return found, nil
}

func resolveTools() (tools, error) {
	ff, err := FFmpeg()
	if err != nil {
		return tools{}, err
	}
	fp, err := FFprobe()
	if err != nil {
		return tools{}, err
	}
	return tools{ffmpeg: ff, ffprobe: fp}, nil
}

// baseArgs start every ffmpeg command line: no keyboard interaction, no
// banner, no progress line, only errors on stderr.
var baseArgs = []string{"-nostdin", "-hide_banner", "-nostats", "-loglevel", "error"}

// passthroughCache remembers, per ffmpeg executable, the options that make
// it pass frames through without dropping or duplicating any.
var passthroughCache sync.Map // string -> []string

// passthroughArgs returns "-fps_mode passthrough" for an ffmpeg that has
// that option (5.1 and newer; ffmpeg 9 removed -vsync) and "-vsync
// passthrough" for older ones such as 4.1. It asks ffmpeg once per
// executable: the probe fails with "Unrecognized option" on old versions.
func passthroughArgs(ctx context.Context, ffmpeg string) []string {
	if v, ok := passthroughCache.Load(ffmpeg); ok {
		return v.([]string)
	}
	args := []string{"-vsync", "passthrough"}
	r := runTool(ctx, ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-fps_mode", "passthrough", "-version")
	if ctx.Err() != nil {
		return args
	}
	if r.err == nil {
		args = []string{"-fps_mode", "passthrough"}
	}
	passthroughCache.Store(ffmpeg, args)
	return args
}

// command builds a child that dies with ctx (and, on Linux, with this
// process). Its stderr must be set by the caller; WaitDelay keeps Wait from
// hanging on pipes a killed child left behind.
func command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	dieWithParent(cmd)
	return cmd
}

// result of a short-lived child run to completion.
type result struct {
	stdout []byte
	stderr []byte // the first stderrMax bytes
	tail   *logTail
	err    error // from Wait: exit status, or failure to start
	// over is set when stdout passed the limit of runToolMax (the child
	// was stopped; stdout holds what came before).
	over bool
}

const stderrMax = 1 << 20

// probeOutputMax bounds what is read of ffprobe's description of one
// file: a crafted file (thousands of chapters or tags) cannot make it
// take more memory than that.
const probeOutputMax = 16 << 20

// runTool runs bin to completion, collecting stdout (for the small outputs
// this package asks for), the start of stderr and the tail of stderr.
func runTool(ctx context.Context, bin string, args ...string) result {
	return runToolMax(ctx, 0, bin, args...)
}

// runToolMax is runTool with stdout limited to max bytes (0: no limit):
// past them the child is stopped and the result's over is set.
func runToolMax(ctx context.Context, max int, bin string, args ...string) result {
	cmd := command(ctx, bin, args...)
	out := &limitBuffer{max: max}
	head := &capBuffer{max: stderrMax}
	tail := newLogTail()
	cmd.Stdout = out
	cmd.Stderr = io.MultiWriter(head, tail)
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && ctx.Err() == nil && !out.over {
		err = fmt.Errorf("%w: cannot run %s: %v", ErrNoFFmpeg, bin, err)
	}
	return result{stdout: out.buf.Bytes(), stderr: head.buf.Bytes(), tail: tail, err: err, over: out.over}
}

// errOutputLimit is a child's stdout past its limit.
var errOutputLimit = errors.New("output past its limit")

// limitBuffer keeps what is written to it up to max bytes (0: no limit);
// a write that would pass them fails (errOutputLimit), which stops the
// child writing, and sets over.
type limitBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (l *limitBuffer) Write(p []byte) (int, error) {
	if l.max > 0 && l.buf.Len()+len(p) > l.max {
		l.over = true
		return 0, errOutputLimit
	}
	return l.buf.Write(p)
}

// capBuffer keeps the first max bytes written to it and drops the rest.
type capBuffer struct {
	buf bytes.Buffer
	max int
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

// fileArg makes path safe to give ffmpeg as an input or output: a relative
// name with a colon would otherwise be taken for a protocol ("a:b.mp4"), and
// one starting with "-" for an option.
func fileArg(path string) string {
	path = ChildPath(path)
	if strings.HasPrefix(path, "-") || (strings.Contains(path, ":") && !strings.HasPrefix(path, "/")) {
		return "file:" + path
	}
	return path
}

// logTail is an io.Writer that keeps the last lines written to it (bounded
// in count and length) so a child's stderr never blocks and never grows
// without bound.
type logTail struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
	total   int
}

const (
	tailLines   = 40
	tailLineMax = 400
)

func newLogTail() *logTail { return &logTail{} }

func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range p {
		if b == '\n' || b == '\r' {
			t.flushLocked()
			continue
		}
		if len(t.partial) < tailLineMax {
			t.partial = append(t.partial, b)
		}
	}
	return len(p), nil
}

func (t *logTail) flushLocked() {
	line := strings.TrimSpace(string(t.partial))
	t.partial = t.partial[:0]
	if line == "" {
		return
	}
	t.total++
	if len(t.lines) == tailLines {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:tailLines-1]
	}
	t.lines = append(t.lines, line)
}

// Lines returns the kept lines, including an unterminated last one.
func (t *logTail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.lines...)
	if s := strings.TrimSpace(string(t.partial)); s != "" {
		out = append(out, s)
	}
	return out
}

// Contains reports whether any kept line contains s (case-insensitive).
func (t *logTail) Contains(s string) bool {
	s = strings.ToLower(s)
	for _, l := range t.Lines() {
		if strings.Contains(strings.ToLower(l), s) {
			return true
		}
	}
	return false
}

// Count is the number of non-empty lines written so far.
func (t *logTail) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.total
	if strings.TrimSpace(string(t.partial)) != "" {
		n++
	}
	return n
}

// genericLines are ffmpeg's follow-up messages that say that something
// failed without saying what; the line before them is the useful one.
var genericLines = []string{
	"conversion failed",
	"error marking filters as finished",
	"cannot determine format of input stream",
	"error while opening encoder for output stream",
	"error initializing output stream",
	"exiting normally, received signal",
	"finishing stream",
	"nothing was written into output file",
	"output file is empty",
	"terminating thread with return code",
	"error closing file",
	"error while filtering",
	"failed to inject frame into filter network",
	"error while processing the decoded data",
	"could not write header for output file",
	"last message repeated",
	"x265 [info]",
	"x264 [info]",
}

var ctxPrefix = regexp.MustCompile(`^\[([^\]@]+?) @ 0x[0-9a-fA-F]+\]\s*`)

// cleanLine turns "[h264 @ 0x55d0] Invalid NAL" into "h264: Invalid NAL".
func cleanLine(s string) string {
	if m := ctxPrefix.FindStringSubmatchIndex(s); m != nil {
		if name := strings.TrimSpace(s[m[2]:m[3]]); name == "NULL" {
			s = s[m[1]:]
		} else {
			s = name + ": " + s[m[1]:]
		}
	}
	return strings.TrimSpace(s)
}

func isGeneric(s string) bool {
	l := strings.ToLower(s)
	for _, g := range genericLines {
		if strings.Contains(l, g) {
			return true
		}
	}
	return false
}

// Last returns the last meaningful stderr line, cleaned up, or "" if there
// was no output at all.
func (t *logTail) Last() string {
	lines := t.Lines()
	for i := len(lines) - 1; i >= 0; i-- {
		if !isGeneric(lines[i]) {
			return cleanLine(lines[i])
		}
	}
	if len(lines) > 0 {
		return cleanLine(lines[len(lines)-1])
	}
	return ""
}

// describe returns the last meaningful stderr line, or failing that the exit
// status, for use after "(ffmpeg: ...)".
func describe(tail *logTail, err error) string {
	if s := tail.Last(); s != "" {
		return s
	}
	if err != nil {
		return err.Error()
	}
	return "no error output"
}
