package video

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// AudioAhead re-encodes, while the video is being restored, the audio
// streams of a source that its output's container cannot take as they are,
// so that joining the segments (Concat, ConcatOptions.Audio) copies them
// instead of encoding them after all the video is done: on a film, hours
// of audio encoded by one thread after the last frame. It writes them,
// in the source's order, into a file of the output's own container (which
// keeps what the output keeps of them: the encoder's priming and padding
// in the same edit lists, the same timestamp precision) beside the output.
// The file's timestamps are those the join gives the source's streams;
// the join reads it shifted back by its start (ffmpeg shifts every input
// to start at 0). A failed encode is not an error of the restore: the
// join then encodes the audio as before.
type AudioAhead struct {
	wd      *Workdir
	path    string
	streams map[int]int // source stream index -> stream of the file
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
}

// StartAudio starts encoding the audio streams of opt.StreamsFrom that an
// output of extension ext re-encodes, into a work directory beside
// outPath. It returns nil when there are none (or no source, or
// opt.NoAudio).
func StartAudio(ctx context.Context, opt CarryOptions, outPath string) (*AudioAhead, error) {
	if opt.StreamsFrom == "" || opt.NoAudio {
		return nil, nil
	}
	ext := strings.ToLower(filepath.Ext(outPath))
	t, err := resolveTools()
	if err != nil {
		return nil, err
	}
	t.in.AllowPlaylists = opt.StreamsAllowPlaylists
	src, err := probeSource(ctx, t, opt.StreamsFrom)
	if err != nil {
		return nil, err
	}
	a := &AudioAhead{streams: map[int]int{}, done: make(chan struct{})}
	var maps []string
	for _, s := range src.streams {
		if s.kind != "audio" {
			continue
		}
		codec, err := audioCodec(ctx, t, opt.StreamsFrom, s.codec, ext)
		if err != nil || codec == "copy" {
			continue // the join copies it, or says why it cannot
		}
		k := len(a.streams)
		a.streams[s.index] = k
		maps = append(maps, "-map", "0:"+strconv.Itoa(s.index), "-c:a:"+strconv.Itoa(k), codec)
	}
	if len(maps) == 0 {
		return nil, nil
	}
	if a.wd, err = NewWorkdir(outPath); err != nil {
		return nil, err
	}
	a.path = a.wd.Path("audio" + ext)
	args := append([]string{}, baseArgs...)
	var dur []string
	if opt.StreamsDuration > 0 { // an excerpt: as planStreams cuts it
		dur = []string{"-t", strconv.FormatFloat(opt.StreamsDuration, 'f', 6, 64)}
	}
	args = append(append(args, dur...), inputArgs(opt.StreamsFrom, opt.StreamsAllowPlaylists)...)
	args = append(append(args, maps...), dur...)
	args = append(args, "-y", fileArg(a.path))
	var actx context.Context
	actx, a.cancel = context.WithCancel(ctx)
	go func() {
		defer close(a.done)
		if r := runTool(actx, t.ffmpeg, args...); r.err != nil {
			a.err = fmt.Errorf("encoding the audio ahead: %s", describe(r.tail, r.err))
		}
	}()
	return a, nil
}

// aheadInput is an AudioAhead's finished file as the join's input.
type aheadInput struct {
	path    string
	start   float64
	streams map[int]int
}

// wait waits for the encode and returns its file as an input, or the
// encode's error.
func (a *AudioAhead) wait(ctx context.Context) (*aheadInput, error) {
	select {
	case <-a.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if a.err != nil {
		return nil, a.err
	}
	t, err := resolveTools()
	if err != nil {
		return nil, err
	}
	m, err := probeMeta(ctx, a.path, t)
	if err != nil {
		return nil, err
	}
	if len(m.audio()) != len(a.streams) {
		return nil, errors.New("encoding the audio ahead: the file lacks streams")
	}
	return &aheadInput{path: a.path, start: m.start, streams: a.streams}, nil
}

// Close stops the encode if it still runs and removes its file. It is
// safe to call on nil and more than once.
func (a *AudioAhead) Close() {
	if a == nil {
		return
	}
	a.cancel()
	<-a.done
	a.wd.Remove()
}
