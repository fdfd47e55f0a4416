package video

import (
	"bufio"
	"bytes"
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// What ffmpeg prints about its input ("ffmpeg -i FILE"), read when there is
// no ffprobe.
var (
	reInput     = regexp.MustCompile(`^Input #0, (.*), from '`)
	reDuration  = regexp.MustCompile(`^Duration: (\d+):(\d+):(\d+(?:\.\d+)?)`)
	reStart     = regexp.MustCompile(`^Duration: [^,]*, start: (-?\d+(?:\.\d+)?)`)
	reStream    = regexp.MustCompile(`^Stream #0:(\d+)(?:\[[^\]]*\])?(?:\(([^)]*)\))?: (\w+): (.*)$`)
	reChapter   = regexp.MustCompile(`^Chapter #0:\d+: start (-?\d+(?:\.\d+)?), end (-?\d+(?:\.\d+)?)`)
	reSAR       = regexp.MustCompile(`SAR (\d+):(\d+) DAR`)
	reDispos    = regexp.MustCompile(` \(([a-z -]+)\)$`)
	reSize      = regexp.MustCompile(`^(\d+)x(\d+)\b`)
	reRate      = regexp.MustCompile(`^(\d+(?:\.\d+)?)(k?) (fps|tbr)$`)
	reRotate    = regexp.MustCompile(`^rotate\s*:\s*(-?\d+(?:\.\d+)?)`)
	reDispMat   = regexp.MustCompile(`displaymatrix: rotation of (-?\d+(?:\.\d+)?) degrees`)
	reCodecName = regexp.MustCompile(`^([\w-]+)`)
)

// probeMetaFFmpeg parses what "ffmpeg -i FILE" prints about its input. The
// frame rates in it are rounded; Probe gets the exact one from
// decodedFrameRate.
func probeMetaFFmpeg(ctx context.Context, path string, t tools) (*fileMeta, error) {
	r := runTool(ctx, t.ffmpeg, append([]string{"-nostdin", "-hide_banner"}, t.input(path)...)...)
	m, ok := parseFFmpegInfo(r.stderr)
	if !ok {
		return nil, notMedia(path, "ffmpeg", r)
	}
	m.tool = "ffmpeg"
	return m, nil
}

// parseFFmpegInfo parses ffmpeg's description of input #0. It reports false
// when there is none (ffmpeg could not open the file). Its blocks
// ("Metadata:", "Side data:") are told apart by their indentation, as
// ffmpeg indents their entries.
func parseFFmpegInfo(out []byte) (*fileMeta, bool) {
	m := &fileMeta{}
	found := false
	var cur *streamMeta
	var chapter *Chapter
	owner := "" // what a "Metadata:" block belongs to: "file", "chapter" or "stream"
	block, blockIndent, lastKey := "", 0, ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		indent := len(raw) - len(strings.TrimLeft(raw, " "))
		if block != "" && indent > blockIndent && found {
			if block == "side" && cur != nil {
				parseHDRText(&cur.hdr, line)
			} else if block == "meta" {
				key, value, _ := strings.Cut(line, ": ")
				key = strings.TrimSpace(strings.TrimSuffix(key, ":"))
				if key == "" { // a value's next line
					key, value = lastKey, "\n"+value
				}
				lastKey = key
				switch {
				case owner == "file" && len(m.tags) < 16*maxTags:
					if m.tags == nil {
						m.tags = map[string]string{}
					}
					m.tags[key] += value
				case owner == "chapter" && chapter != nil && strings.EqualFold(key, "title"):
					chapter.Title = cleanText(chapter.Title+value, maxText)
				case owner == "stream" && cur != nil && strings.EqualFold(key, "title"):
					cur.title = cleanText(cur.title+value, maxText)
				case owner == "stream" && cur != nil && strings.EqualFold(key, "timecode"):
					cur.timecode = cleanText(value, 32)
				}
			}
		} else {
			block = ""
		}
		if mm := reInput.FindStringSubmatch(line); mm != nil {
			if found {
				break // a second input: not ours
			}
			found, owner = true, "file"
			m.format = mm[1]
			continue
		}
		if !found {
			continue
		}
		if strings.HasPrefix(line, "Output #") || strings.HasPrefix(line, "Input #") {
			break
		}
		switch line {
		case "Metadata:":
			block, blockIndent, lastKey = "meta", indent, ""
			continue
		case "Side data:":
			block, blockIndent = "side", indent
			continue
		}
		if ms := reStart.FindStringSubmatch(line); ms != nil {
			m.start, _ = strconv.ParseFloat(ms[1], 64)
		}
		if mm := reDuration.FindStringSubmatch(line); mm != nil {
			h, _ := strconv.Atoi(mm[1])
			mi, _ := strconv.Atoi(mm[2])
			s, _ := strconv.ParseFloat(mm[3], 64)
			m.duration = float64(h*3600+mi*60) + s
			continue
		}
		if mm := reChapter.FindStringSubmatch(line); mm != nil && cur == nil {
			owner, chapter = "chapter", nil
			start, _ := strconv.ParseFloat(mm[1], 64)
			end, _ := strconv.ParseFloat(mm[2], 64)
			if len(m.chapters) < maxChapters {
				m.chapters = append(m.chapters, Chapter{Start: start, End: end})
				chapter = &m.chapters[len(m.chapters)-1]
			}
			continue
		}
		if mm := reStream.FindStringSubmatch(line); mm != nil {
			idx, _ := strconv.Atoi(mm[1])
			s := parseStreamLine(idx, strings.ToLower(mm[3]), mm[4])
			s.language = cleanText(mm[2], 16)
			m.streams = append(m.streams, s)
			cur, owner = &m.streams[len(m.streams)-1], "stream"
			continue
		}
		if cur != nil {
			if mm := reRotate.FindStringSubmatch(line); mm != nil {
				f, _ := strconv.ParseFloat(mm[1], 64)
				cur.rotation = normRotation(f)
			} else if mm := reDispMat.FindStringSubmatch(line); mm != nil {
				f, _ := strconv.ParseFloat(mm[1], 64)
				cur.rotation = normRotation(f)
			}
		}
	}
	return m, found
}

// parseStreamLine parses the part after "Video: " or "Audio: ", e.g.
// "h264 (High) (avc1 / 0x31637661), yuv420p(tv, bt709, progressive), 64x48
// [SAR 1:1 DAR 4:3], 57 kb/s, 29.97 fps, 29.97 tbr, 30k tbn (default)".
func parseStreamLine(idx int, kind, desc string) streamMeta {
	s := streamMeta{index: idx, kind: kind}
	if strings.Contains(desc, "(attached pic)") {
		s.attachedPic = true
	}
	for { // the dispositions at the end, "(default) (forced)"; those vsr does not know are skipped
		mm := reDispos.FindStringSubmatchIndex(desc)
		if mm == nil {
			break
		}
		if d := dispositionNames[desc[mm[2]:mm[3]]]; d != "" {
			s.dispositions = append(s.dispositions, d)
		}
		desc = desc[:mm[0]]
	}
	slices.Sort(s.dispositions)
	fields := splitTopLevel(desc)
	if len(fields) == 0 {
		return s
	}
	s.codec = reCodecName.FindString(fields[0])
	if kind != "video" {
		return s
	}
	if all := reSAR.FindAllStringSubmatch(desc, -1); all != nil { // the stream's, after the codec's
		n, _ := strconv.Atoi(all[len(all)-1][1])
		d, _ := strconv.Atoi(all[len(all)-1][2])
		if sar := (Rational{n, d}); sar.Valid() {
			s.sar = sar.Reduced()
		}
	}
	var fps, tbr float64
	for i, f := range fields[1:] {
		f = strings.TrimSpace(f)
		if mm := reSize.FindStringSubmatch(f); mm != nil && s.width == 0 {
			s.width, _ = strconv.Atoi(mm[1])
			s.height, _ = strconv.Atoi(mm[2])
			continue
		}
		if mm := reRate.FindStringSubmatch(f); mm != nil {
			v, _ := strconv.ParseFloat(mm[1], 64)
			if mm[2] == "k" {
				v *= 1000
			}
			if mm[3] == "fps" {
				fps = v
			} else {
				tbr = v
			}
			continue
		}
		if i == 0 {
			pf := f
			if j := strings.IndexByte(pf, '('); j >= 0 {
				s.colour, s.fieldOrder = parsePixFmtParens(strings.TrimSuffix(pf[j+1:], ")"))
				pf = pf[:j]
			}
			s.pixFmt = strings.TrimSpace(pf)
		}
	}
	switch {
	case tbr > 0 && (fps == 0 || fps < 70 && tbr > 210):
		if fps > 0 {
			s.fps = rationalFromDecimal(fps, 0.01)
		} else {
			s.fps = rationalFromDecimal(tbr, 0.01)
		}
	case tbr > 0:
		s.fps = rationalFromDecimal(tbr, 0.01)
	case fps > 0:
		s.fps = rationalFromDecimal(fps, 0.01)
	}
	return s
}

// splitTopLevel splits on commas outside parentheses and brackets.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(', '[':
			depth++
		case ')', ']':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}
