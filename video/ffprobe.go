package video

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

type ffprobeOutput struct {
	Streams []struct {
		Index          int               `json:"index"`
		CodecType      string            `json:"codec_type"`
		CodecName      string            `json:"codec_name"`
		Width          int               `json:"width"`
		Height         int               `json:"height"`
		PixFmt         string            `json:"pix_fmt"`
		RFrameRate     string            `json:"r_frame_rate"`
		AvgFrameRate   string            `json:"avg_frame_rate"`
		NbFrames       string            `json:"nb_frames"`
		SAR            string            `json:"sample_aspect_ratio"`
		FieldOrder     string            `json:"field_order"`
		ColorRange     string            `json:"color_range"`
		ColorSpace     string            `json:"color_space"`
		ColorTransfer  string            `json:"color_transfer"`
		ColorPrimaries string            `json:"color_primaries"`
		ChromaLocation string            `json:"chroma_location"`
		Disposition    map[string]int    `json:"disposition"`
		Tags           map[string]string `json:"tags"`
		SideDataList   []ffprobeSideData `json:"side_data_list"`
	} `json:"streams"`
	Chapters []struct {
		StartTime string            `json:"start_time"`
		EndTime   string            `json:"end_time"`
		Tags      map[string]string `json:"tags"`
	} `json:"chapters"`
	Format struct {
		FormatName string            `json:"format_name"`
		Duration   string            `json:"duration"`
		StartTime  string            `json:"start_time"`
		Tags       map[string]string `json:"tags"`
	} `json:"format"`
}

func probeMetaFFprobe(ctx context.Context, path string, t tools) (*fileMeta, error) {
	ffprobe := t.ffprobe
	r := runToolMax(ctx, probeOutputMax, ffprobe, append([]string{"-v", "error", "-show_format", "-show_streams",
		"-show_entries", "chapter=start_time,end_time:chapter_tags=title", "-of", "json"}, t.input(path)...)...)
	if r.over {
		return nil, fmt.Errorf("probe %q: ffprobe describes it in more than %d MiB (its streams, chapters and tags): not a file vsr reads", path, probeOutputMax>>20)
	}
	if r.err != nil {
		return nil, notMedia(path, "ffprobe", r)
	}
	var out ffprobeOutput
	if err := json.Unmarshal(r.stdout, &out); err != nil {
		return nil, fmt.Errorf("probe %q: cannot parse ffprobe output (%v): check that %s is a working ffprobe or set VSR_FFPROBE=none", path, err, ffprobe)
	}
	m := &fileMeta{format: out.Format.FormatName, tool: "ffprobe", tags: out.Format.Tags}
	if d, err := strconv.ParseFloat(out.Format.Duration, 64); err == nil && d > 0 && !math.IsInf(d, 0) {
		m.duration = d
	}
	if st, err := strconv.ParseFloat(out.Format.StartTime, 64); err == nil && !math.IsInf(st, 0) && !math.IsNaN(st) {
		m.start = st
	}
	for _, c := range out.Chapters {
		start, err1 := strconv.ParseFloat(c.StartTime, 64)
		end, err2 := strconv.ParseFloat(c.EndTime, 64)
		if err1 == nil && err2 == nil && len(m.chapters) < maxChapters {
			m.chapters = append(m.chapters, Chapter{Start: start, End: end, Title: tag(c.Tags, "title")})
		}
	}
	for _, s := range out.Streams {
		sm := streamMeta{
			index:       s.Index,
			kind:        s.CodecType,
			codec:       s.CodecName,
			width:       s.Width,
			height:      s.Height,
			pixFmt:      s.PixFmt,
			attachedPic: s.Disposition["attached_pic"] != 0,
			colour: Colour{Primaries: ffmpegName(s.ColorPrimaries), Transfer: ffmpegName(s.ColorTransfer),
				Matrix: ffmpegName(s.ColorSpace), Range: ffmpegName(s.ColorRange), ChromaLocation: ffmpegName(s.ChromaLocation)},
			fieldOrder:   fieldOrders[s.FieldOrder],
			language:     ffmpegName(tag(s.Tags, "language")),
			title:        tag(s.Tags, "title"),
			timecode:     tag(s.Tags, "timecode"),
			dispositions: dispositionsOf(s.Disposition),
		}
		if sm.kind == "attachment" && sm.codec == "" {
			sm.codec = tag(s.Tags, "mimetype")
		}
		if sar, ok := parseFraction(strings.Replace(s.SAR, ":", "/", 1)); ok && sar.Num > 0 {
			sm.sar = sar.Reduced()
		}
		if n, err := strconv.Atoi(s.NbFrames); err == nil && n > 0 {
			sm.nbFrames = n
		}
		rfr, _ := ParseRational(s.RFrameRate)
		afr, _ := ParseRational(s.AvgFrameRate)
		sm.fps = guessFrameRate(rfr, afr)
		rot := 0.0
		if v, ok := s.Tags["rotate"]; ok {
			rot, _ = strconv.ParseFloat(v, 64)
		}
		for _, sd := range s.SideDataList {
			if r, err := strconv.ParseFloat(string(sd.Rotation), 64); err == nil && sd.Type == "Display Matrix" && r != 0 {
				rot = r
			}
		}
		sm.rotation = normRotation(rot)
		sm.hdr.addSideData(s.SideDataList)
		m.streams = append(m.streams, sm)
	}
	return m, nil
}

// guessFrameRate picks the rate as ffmpeg's av_guess_frame_rate does for
// the demuxer's r_frame_rate and avg_frame_rate.
func guessFrameRate(r, avg Rational) Rational {
	if !r.Valid() {
		return avg.Reduced()
	}
	if avg.Valid() && avg.Float() < 70 && r.Float() > 210 {
		return avg.Reduced()
	}
	return r.Reduced()
}
