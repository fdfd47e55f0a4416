package video

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
)

// LiveInput is a live source: anything ffmpeg reads (srt://, rtmp://,
// rtsp://, udp://, tcp://, a FIFO, a device, "-" for stdin), read once as
// it arrives, with no probe and no frame count.
type LiveInput struct {
	URL string
	// Format forces ffmpeg's input format (-f), for devices and pipes.
	Format string
	// Options are more input options, ffmpeg's "-key value" as
	// "key=value", given before the input (listen=1 to be an RTMP server,
	// rtsp_transport=tcp).
	Options []string
	// Protocols, when set, are the only protocols ffmpeg may open for this
	// input (-protocol_whitelist): a playlist or manifest cannot make it
	// pull other URLs.
	Protocols []string
	// Formats, when set, are the only demuxers ffmpeg may use for this
	// input (-format_whitelist): a source cannot turn out to be a playlist
	// or a concat list that opens more inputs.
	Formats []string
	// NoAudio drops the source's audio.
	NoAudio bool
	// Stdin is read for URL "-" (default os.Stdin).
	Stdin io.Reader
	// PixFmt is the layout of the frames: "rgb24" (the default) or
	// "rgb48le" (16 bits a sample, for a deep output).
	PixFmt string
}

// LivePacket is one video frame (in LiveInput.PixFmt) or one audio
// packet of the source, with its time in nanoseconds from the stream's
// start.
type LivePacket struct {
	Audio bool
	NS    int64
	Key   bool
	Data  []byte
}

// LiveDecoder decodes a live source to raw frames and its first audio
// stream to PCM, as they arrive: ffmpeg writes a Matroska stream of rgb24
// frames and audio packets with their timestamps, which this reads.
type LiveDecoder struct {
	in      LiveInput
	cmd     *exec.Cmd
	out     io.ReadCloser
	tail    *logTail
	mkv     *mkvReader
	stopped atomic.Bool
	done    bool
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// IsURL reports whether s names a network (or other protocol) source
// rather than a file: it has a scheme://.
func IsURL(s string) bool { return schemeRE.MatchString(s) }

// liveArg is the ffmpeg argument of a live input or output: URLs as they
// are, "-" as the standard stream, a path as a file.
func liveArg(url, pipe string) string {
	switch {
	case url == "-":
		return pipe
	case IsURL(url):
		return url
	}
	return fileArg(url)
}

// OpenLive starts decoding in. The stream's header is read by the first
// Next (or Header), which blocks until the source sends it.
func OpenLive(ctx context.Context, in LiveInput) (*LiveDecoder, error) {
	if in.URL == "" {
		return nil, errors.New("live input: none given")
	}
	ffmpeg, err := FFmpeg()
	if err != nil {
		return nil, err
	}
	args := append([]string{}, baseArgs...)
	if len(in.Protocols) > 0 {
		args = append(args, "-protocol_whitelist", strings.Join(in.Protocols, ","))
	}
	if len(in.Formats) > 0 {
		args = append(args, "-format_whitelist", strings.Join(in.Formats, ","))
	}
	if in.Format != "" {
		args = append(args, "-f", in.Format)
	}
	for _, kv := range in.Options {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, "-") {
			return nil, fmt.Errorf("live input option %q: want key=value (ffmpeg's -key value)", kv)
		}
		args = append(args, "-"+k, v)
	}
	args = append(args, "-analyzeduration", "1000000", "-i", liveArg(in.URL, "pipe:0"), "-map", "0:v:0")
	if !in.NoAudio {
		// Decoded: a copy needs codec headers that a stream (ADTS AAC, say)
		// only sends with its first packet, too late for the header.
		args = append(args, "-map", "0:a:0?", "-c:a", "pcm_s16le")
	}
	args = append(args, passthroughArgs(ctx, ffmpeg)...)
	// Raw frames each in a cluster of their own, flushed as they come.
	pix := in.PixFmt
	if pix != "rgb48le" {
		pix = "rgb24"
	}
	args = append(args, "-c:v", "rawvideo", "-pix_fmt", pix, "-f", "matroska", "-allow_raw_vfw", "1", "-live", "1", "-flush_packets", "1", "pipe:1")
	cmd := command(ctx, ffmpeg, args...)
	tail := newLogTail()
	cmd.Stderr = tail
	if in.URL == "-" {
		cmd.Stdin = in.Stdin
		if cmd.Stdin == nil {
			cmd.Stdin = os.Stdin
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: cannot run %s: %v", ErrNoFFmpeg, ffmpeg, err)
	}
	return &LiveDecoder{in: in, cmd: cmd, out: out, tail: tail, mkv: newMKVReader(out)}, nil
}

// Header reads the stream's header: after it, Size and AudioTrack are
// known.
func (d *LiveDecoder) Header() error {
	if d.mkv.sawTracks {
		return nil
	}
	p, err := d.next()
	if err != nil {
		return err
	}
	d.mkv.pending = p
	return nil
}

// Size is the frames' size (after Header).
func (d *LiveDecoder) Size() (int, int) { return d.mkv.width, d.mkv.height }

// Colour is the source's colour primaries and transfer (the frames are
// RGB: they have no matrix, and full range), known after Header.
func (d *LiveDecoder) Colour() Colour { return d.mkv.colour }

// SAR is the source's sample aspect ratio (zero: square pixels), known
// after Header.
func (d *LiveDecoder) SAR() Rational { return d.mkv.sar }

// FrameDuration is the source's nominal frame duration in nanoseconds,
// when it says (0: it does not).
func (d *LiveDecoder) FrameDuration() int64 { return d.mkv.frameDur }

// AudioTrack is the audio track to carry into the output (a Matroska
// TrackEntry; nil: none), after Header.
func (d *LiveDecoder) AudioTrack() []byte { return d.mkv.audioEntry }

// Next returns the next packet, io.EOF at the end of the source (or after
// Stop), or an error with ffmpeg's message. A frame's Data is its own.
func (d *LiveDecoder) Next() (*LivePacket, error) {
	if p := d.mkv.pending; p != nil {
		d.mkv.pending = nil
		return p, nil
	}
	return d.next()
}

func (d *LiveDecoder) next() (*LivePacket, error) {
	if d.done {
		return nil, io.EOF
	}
	p, err := d.mkv.next()
	if err == nil {
		want := d.mkv.width * d.mkv.height * 3
		if d.in.PixFmt == "rgb48le" {
			want *= 2
		}
		if p.track == d.mkv.video && len(p.data) != want {
			return nil, d.fail(fmt.Errorf("a frame of %d bytes, want %d", len(p.data), want))
		}
		return &LivePacket{Audio: p.track != d.mkv.video, NS: p.ns, Key: p.key, Data: p.data}, nil
	}
	return nil, d.fail(err)
}

// fail ends the stream: io.EOF when ffmpeg finished cleanly or was
// stopped, else ffmpeg's error.
func (d *LiveDecoder) fail(err error) error {
	d.done = true
	d.out.Close()
	werr := d.cmd.Wait()
	if d.stopped.Load() || (werr == nil && (err == io.EOF || d.mkv.sawTracks && errors.Is(err, io.ErrUnexpectedEOF))) {
		return io.EOF
	}
	msg := describe(d.tail, werr)
	if werr == nil || !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		msg = err.Error() // the stream, not ffmpeg, went wrong
	}
	return fmt.Errorf("live input %s: %s", d.in.URL, msg)
}

// Stop ends the stream now (an idle source): the next Next returns io.EOF.
func (d *LiveDecoder) Stop() {
	if d.stopped.CompareAndSwap(false, true) && d.cmd.Process != nil {
		d.cmd.Process.Kill()
	}
}

// Close stops ffmpeg and reaps it.
func (d *LiveDecoder) Close() error {
	if !d.done {
		d.Stop()
		d.fail(io.EOF)
	}
	return nil
}

// LiveOutput is a live sink: anything ffmpeg writes (rtmp/srt/udp/tcp
// push, an HLS playlist .m3u8 with its segments beside it, a DASH .mpd, a
// FIFO, a file, "-" for stdout with a Format).
type LiveOutput struct {
	URL string
	// Format is the container (-f): default from the URL's scheme or
	// extension (see LiveFormat).
	Format string
	// Encode sets the frames' size and format and the encoder; FPS, Times,
	// audio and frame counts are not used (the frames carry their times).
	Encode EncodeOptions
	// Audio is the source's audio track (LiveDecoder.AudioTrack), encoded
	// to AAC (Opus for WebM).
	Audio []byte
	// Protocols, when set, are the only protocols ffmpeg may open.
	Protocols []string
	// Stdout receives the stream for URL "-" (default os.Stdout).
	Stdout io.Writer
}

// LiveFormat returns the container of a live output: format when given,
// else FLV for rtmp, MPEG-TS for srt, udp, tcp and rtp, HLS for .m3u8,
// DASH for .mpd, and ffmpeg's guess from the extension otherwise ("").
func LiveFormat(url, format string) (string, error) {
	if format != "" {
		return format, nil
	}
	if url == "-" {
		return "", errors.New("live output to stdout: give its container with --container (mpegts, matroska, flv)")
	}
	if IsURL(url) {
		scheme := strings.ToLower(url[:strings.Index(url, "://")])
		switch scheme {
		case "rtmp", "rtmps":
			return "flv", nil
		case "srt", "udp", "tcp":
			return "mpegts", nil
		case "rtp":
			return "rtp_mpegts", nil
		case "rtsp":
			return "rtsp", nil
		case "file":
		default:
			return "", fmt.Errorf("live output %s: give its container with --container (mpegts, flv, ...)", url)
		}
	}
	switch strings.ToLower(filepath.Ext(url)) {
	case ".m3u8":
		return "hls", nil
	case ".mpd":
		return "dash", nil
	case "":
		return "", fmt.Errorf("live output %s has no extension: give its container with --container (mpegts, matroska, hls)", url)
	}
	return "", nil
}

// splitPlaylist splits an HLS playlist's or DASH manifest's path or URL
// into its folder (a URL's scheme://authority/folders/) and its name,
// beside which the segments go. A URL needs a path with a name and no
// query or fragment: ffmpeg names the segments of a URL without one from
// its host (the HLS muxer cuts the URL at its last '.', the DASH muxer at
// its last '/'), which may name another host or port.
func splitPlaylist(url string) (dir, name string, err error) {
	if !IsURL(url) {
		return filepath.Dir(url) + string(filepath.Separator), filepath.Base(url), nil
	}
	i := strings.Index(url, "://") + 3
	slash := strings.IndexByte(url[i:], '/')
	last := strings.LastIndexByte(url, '/')
	if slash < 0 || last == len(url)-1 || strings.ContainsAny(url, "?#") {
		return "", "", errors.New("an HLS or DASH output URL needs a path to its playlist, with no query: scheme://host:port/folder/name.m3u8 (or .mpd); its segments go beside it")
	}
	return url[:last+1], url[last+1:], nil
}

// LiveEncoder encodes restored frames with their own timestamps into a
// live sink, with the source's audio copied in. Frames and audio must
// come in time order, each kind on its own.
type LiveEncoder struct {
	out     LiveOutput
	cmd     *exec.Cmd
	in      io.WriteCloser
	tail    *logTail
	mkv     *mkvWriter
	size    int
	written int
	err     error
	closed  bool
	start   int64 // the first timestamp written, in ns: the output starts at 0
	started bool
	carried Carried
}

// Carried says what the live output carries of its source besides the
// picture, and what it drops.
func (e *LiveEncoder) Carried() Carried { return e.carried }

// NewLiveEncoder starts ffmpeg writing o.
func NewLiveEncoder(ctx context.Context, o LiveOutput) (*LiveEncoder, error) {
	if !o.Encode.FPS.Valid() {
		o.Encode.FPS = Rational{Num: 25, Den: 1} // unused: the frames carry their times
	}
	enc, err := normalizeEncodeOptions(o.Encode)
	if err != nil {
		return nil, fmt.Errorf("live output %s: %w", o.URL, err)
	}
	size, err := FrameSize(enc.InputPixFmt, enc.Width, enc.Height)
	if err != nil {
		return nil, err
	}
	format, err := LiveFormat(o.URL, o.Format)
	if err != nil {
		return nil, err
	}
	if !IsURL(o.URL) && o.URL != "-" {
		if st, err := os.Stat(filepath.Dir(o.URL)); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("live output %s: its folder %s does not exist: create it first", o.URL, filepath.Dir(o.URL))
		}
	}
	t, err := resolveTools()
	if err != nil {
		return nil, err
	}
	if err := checkEncoder(ctx, t.ffmpeg, enc.Codec); err != nil {
		return nil, fmt.Errorf("live output %s: %w", o.URL, err)
	}
	args := append([]string{}, baseArgs...)
	args = append(args, "-f", "matroska", "-i", "pipe:0", "-map", "0:v:0")
	ext := strings.ToLower(filepath.Ext(o.URL))
	if o.Audio != nil {
		codec := "aac" // what FLV, MPEG-TS, HLS, DASH, MP4 and Matroska all take
		if ext == ".webm" {
			codec = "libopus"
		}
		args = append(args, "-map", "0:a:0", "-c:a", codec, "-b:a", "160k")
	}
	tags := planVideoTags(ctx, t.ffmpeg, enc)
	args = append(args, videoArgs(enc, ext, tags)...)
	tuned := false
	for _, kv := range enc.Options {
		tuned = tuned || strings.HasPrefix(kv, "tune=")
	}
	if (enc.Codec == "libx264" || enc.Codec == "libx265") && !tuned {
		args = append(args, "-tune", "zerolatency") // no frames held for look-ahead
	}
	// A keyframe every 2 s: where players join and HLS/DASH cut segments.
	args = append(args, "-force_key_frames", "expr:gte(t,n_forced*2)")
	args = append(args, passthroughArgs(ctx, t.ffmpeg)...)
	if len(o.Protocols) > 0 {
		args = append(args, "-protocol_whitelist", strings.Join(o.Protocols, ","))
	}
	switch format {
	case "hls", "dash":
		dir, name, err := splitPlaylist(o.URL)
		if err != nil {
			return nil, fmt.Errorf("live output %s: %w", o.URL, err)
		}
		base := strings.TrimSuffix(name, filepath.Ext(name))
		if format == "hls" {
			args = append(args, "-hls_time", "2", "-hls_list_size", "0")
			if IsURL(o.URL) {
				// Named from the parsed parts: ffmpeg's default cuts the
				// whole URL at its last '.', which may lie in its host.
				args = append(args, "-hls_segment_filename", strings.ReplaceAll(dir+base, "%", "%%")+"%d.ts")
			}
			break
		}
		// Segments named after the manifest (ffmpeg's default names would
		// be shared by every manifest in the folder), written to its folder.
		args = append(args, "-init_seg_name", base+"-init-$RepresentationID$.m4s", "-media_seg_name", base+"-$RepresentationID$-$Number%05d$.m4s")
	case "":
		if ext == ".mp4" || ext == ".mov" {
			args = append(args, "-movflags", "frag_keyframe+empty_moov") // playable up to where it stopped
		}
	}
	if format != "" {
		args = append(args, "-f", format)
	}
	args = append(args, "-flush_packets", "1", "-y", liveArg(o.URL, "pipe:1"))
	cmd := command(ctx, t.ffmpeg, args...)
	tail := newLogTail()
	cmd.Stderr = tail
	if o.URL == "-" {
		cmd.Stdout = o.Stdout
		if cmd.Stdout == nil {
			cmd.Stdout = os.Stdout
		}
	}
	pr, in, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	growPipe(in)
	cmd.Stdin = pr
	err = cmd.Start()
	pr.Close()
	if err != nil {
		in.Close()
		return nil, fmt.Errorf("%w: cannot run %s: %v", ErrNoFFmpeg, t.ffmpeg, err)
	}
	e := &LiveEncoder{out: o, cmd: cmd, in: in, tail: tail, size: size, carried: tags.report}
	if o.Audio != nil {
		e.carried.carry("audio (the first stream, re-encoded)")
	}
	e.carried.drop("other streams, subtitles and metadata", "a live stream carries its video and first audio stream only")
	var audio [][]byte
	if o.Audio != nil {
		audio = append(audio, o.Audio)
	}
	if e.mkv, err = newMKVWriter(in, enc.InputPixFmt, enc.Width, enc.Height, audio...); err != nil {
		e.Abort()
		return nil, err
	}
	return e, nil
}

// FrameSize is the bytes of one frame given to WriteFrame.
func (e *LiveEncoder) FrameSize() int { return e.size }

// Written is the frames written so far.
func (e *LiveEncoder) Written() int { return e.written }

// us turns a source time into the output's microseconds from its first
// packet.
func (e *LiveEncoder) us(ns int64) int64 {
	if !e.started {
		e.start, e.started = ns, true
	}
	return max(ns-e.start, 0) / 1000
}

// WriteFrame sends one restored frame shown at ns.
func (e *LiveEncoder) WriteFrame(ns int64, frame []byte) error {
	if e.err != nil {
		return e.err
	}
	if len(frame) != e.size {
		return fmt.Errorf("live output %s: frame of %d bytes, want %d", e.out.URL, len(frame), e.size)
	}
	if err := e.mkv.WriteBlock(1, e.us(ns), true, frame); err != nil {
		return e.failed()
	}
	e.written++
	return nil
}

// WriteAudio sends one audio packet of the source shown at ns (dropped
// when the output carries no audio, or when it comes before the first
// frame written).
func (e *LiveEncoder) WriteAudio(ns int64, key bool, data []byte) error {
	if e.err != nil {
		return e.err
	}
	if e.out.Audio == nil || !e.started || ns < e.start {
		return nil
	}
	if err := e.mkv.WriteBlock(2, e.us(ns), key, data); err != nil {
		return e.failed()
	}
	return nil
}

// failed reports the sink's failure with ffmpeg's message.
func (e *LiveEncoder) failed() error {
	e.in.Close()
	werr := e.cmd.Wait()
	e.closed = true
	e.err = fmt.Errorf("live output %s: ffmpeg stopped after %d frames: %s", e.out.URL, e.written, describe(e.tail, werr))
	return e.err
}

// Close finishes the output (an HLS playlist gets its end tag) and waits
// for ffmpeg.
func (e *LiveEncoder) Close() error {
	if e.closed {
		return e.err
	}
	e.closed = true
	e.in.Close()
	if err := e.cmd.Wait(); err != nil {
		e.err = fmt.Errorf("live output %s: %s", e.out.URL, describe(e.tail, err))
	}
	return e.err
}

// Abort stops ffmpeg at once.
func (e *LiveEncoder) Abort() {
	if e.closed {
		return
	}
	e.closed = true
	if e.cmd.Process != nil {
		e.cmd.Process.Kill()
	}
	e.in.Close()
	e.cmd.Wait()
	if e.err == nil {
		e.err = fmt.Errorf("live output %s: aborted", e.out.URL)
	}
}
