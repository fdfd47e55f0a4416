package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/vsr-dev/vsr/video"
)

// paramFields are the model parameters that have a field of their own in
// a Request (tagged `vsr:"param"`), by JSON name: given in "params", they
// are moved into their field, so that one set of rules checks them
// wherever they were given.
var paramFields = fieldNames(func(f reflect.StructField) bool { return f.Tag.Get("vsr") == "param" })

// MaxClipLen bounds clip_len: SwiftVR holds clip_len+4 frames of a chunk
// at once, on the device, at the output's size.
const MaxClipLen = 256

// requestFields are the JSON names of a Request's fields.
var requestFields = fieldNames(func(reflect.StructField) bool { return true })

// fieldNames returns the JSON names of the fields of Request that keep.
func fieldNames(keep func(reflect.StructField) bool) map[string]bool {
	m := map[string]bool{}
	rt := reflect.TypeFor[Request]()
	for i := range rt.NumField() {
		if name := jsonName(rt.Field(i)); name != "" && keep(rt.Field(i)) {
			m[name] = true
		}
	}
	return m
}

// jsonName is f's name in JSON ("" for a field JSON leaves out).
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// ModelFields returns the model parameters r sets, by request field: its
// fields tagged `vsr:"param"` that are set (as JSON would give them: not
// zero, not empty), and its Params, each value as JSON decodes it (a
// number a float64, an array a []any). A runner takes them after
// CheckRequest, which leaves no field of a Request in Params and merges
// target_shape into size.
func (r *Request) ModelFields() map[string]any {
	out := map[string]any{}
	rv := reflect.ValueOf(r).Elem()
	for i := range rv.NumField() {
		f, v := rv.Type().Field(i), rv.Field(i)
		if f.Tag.Get("vsr") != "param" || v.IsZero() || v.Kind() == reflect.Slice && v.Len() == 0 {
			continue
		}
		raw, _ := json.Marshal(v.Interface())
		var x any
		json.Unmarshal(raw, &x)
		out[jsonName(f)] = x
	}
	maps.Copy(out, r.Params)
	return out
}

// CheckRequest validates a task request's values, whatever the runner: it
// moves the model parameters that have a field of their own (sr_ratio,
// size, target_shape, tile, clip_len, dit) from "params" into their
// fields, merges target_shape (LightX2V's name) into size, and then checks
// every field by one set of rules: numbers in their ranges (clip_len at
// most MaxClipLen), names made of name characters, and no control
// character (NUL included) in any string, paths, names and the strings of
// params alike. HLS and DASH outputs
// (.m3u8, .mpd) are refused: they are a playlist and segment files, which
// a file task does not deliver. CheckRequest may be run again on a
// request it passed (a runner checks the requests it gets so); the
// runner's own checks (the model's values) come after it.
func CheckRequest(r *Request) error {
	if err := liftParams(r); err != nil {
		return err
	}
	switch {
	case len(r.TargetShape) > 0 && len(r.Size) > 0 && !slices.Equal(r.TargetShape, r.Size):
		return fmt.Errorf("fields \"target_shape\" %v and \"size\" %v differ: give one of them", r.TargetShape, r.Size)
	case len(r.TargetShape) > 0:
		r.Size = r.TargetShape
	}
	r.TargetShape = nil
	if len(r.Size) == 0 { // LightX2V's default, []
		r.Size = nil
	}
	for name, v := range map[string]string{"task_id": r.TaskID, "video_path": r.VideoPath, "save_result_path": r.SaveResultPath,
		"model": r.Model, "codec": r.Codec, "preset": r.Preset, "pix_fmt": r.PixFmt, "dit": r.DiT} {
		if err := printable(name, v); err != nil {
			return err
		}
	}
	if err := printableParams(r.Params); err != nil {
		return err
	}
	switch {
	case !(r.SRRatio >= 0 && r.SRRatio <= 16): // NaN cannot come from JSON, but a runner's caller may
		return fmt.Errorf("field \"sr_ratio\": want a number in (0, 16]")
	case r.Size != nil && (len(r.Size) != 2 || r.Size[0] <= 0 || r.Size[1] <= 0 || r.Size[0] > 16384 || r.Size[1] > 16384):
		return fmt.Errorf("field \"target_shape\" (or \"size\"): want [height, width] with both in 1..16384")
	case r.CRF != nil && (*r.CRF < -1 || *r.CRF > 63):
		return fmt.Errorf("field \"crf\": want -1..63")
	case r.DiT != "" && r.DiT != "on" && r.DiT != "off":
		return fmt.Errorf("field \"dit\": %q: want \"on\" or \"off\"", r.DiT)
	case !slices.Contains(video.DeinterlaceModes, video.Deinterlace(r.Deinterlace)) && r.Deinterlace != "":
		return fmt.Errorf("field \"deinterlace\": %q: want auto, bwdif, yadif, double or off", r.Deinterlace)
	case r.ClipLen > MaxClipLen:
		return fmt.Errorf("field \"clip_len\": %d: want at most %d frames a chunk (a multiple of 4; SwiftVR's default is 24): a chunk's frames are held at once", r.ClipLen, MaxClipLen)
	case r.ClipLen < 0 || r.MaxFrames < 0 || r.Tile < 0 || r.Batch < 0 || r.Batch > 256 || r.Segments < 0 || r.Segments > 64:
		return fmt.Errorf("fields clip_len, max_frames, tile must be >= 0, batch 0..256, segments 0..64")
	case r.TaskID != "" && !validID(r.TaskID):
		if reservedIDs[r.TaskID] {
			return fmt.Errorf("field \"task_id\": %q is the name of an endpoint (/v1/tasks/%s/status): choose another", r.TaskID, r.TaskID)
		}
		return fmt.Errorf("field \"task_id\": want 1 to 64 letters, digits, '-', '_' or '.'")
	}
	for name, v := range map[string]string{"codec": r.Codec, "preset": r.Preset, "pix_fmt": r.PixFmt} {
		if len(v) > 64 {
			return fmt.Errorf("field %q: %d characters; at most 64", name, len(v))
		}
		for _, c := range v {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return fmt.Errorf("field %q: %q is not a name", name, v)
			}
		}
	}
	switch ext := strings.ToLower(filepath.Ext(r.SaveResultPath)); ext {
	case ".m3u8", ".mpd":
		return fmt.Errorf("field \"save_result_path\": %s is an HLS or DASH playlist, whose segments are separate files that a file task does not deliver: give a video file (.mp4, .mkv, ...), or stream HLS/DASH with a live session (POST /v1/streams)", ext)
	}
	return nil
}

// liftParams moves the entries of r.Params named in paramFields into
// their fields, and refuses the other fields of a Request there.
func liftParams(r *Request) error {
	if len(r.Params) == 0 {
		return nil
	}
	var top map[string]json.RawMessage // the fields given at the top level
	raw, _ := json.Marshal(r)
	json.Unmarshal(raw, &top)
	lift, rest := map[string]any{}, map[string]any{}
	for k, v := range r.Params {
		_, twice := top[k]
		switch {
		case twice && k != "params":
			return fmt.Errorf("field %q is given twice, at the top level and in \"params\": give it once", k)
		case paramFields[k]:
			lift[k] = v
		case requestFields[k]:
			return fmt.Errorf("field %q in \"params\": it is a field of the request, not a model parameter: give it at the top level", k)
		default:
			rest[k] = v
		}
	}
	if len(lift) == 0 {
		return nil
	}
	body, err := json.Marshal(lift)
	if err != nil {
		return fmt.Errorf("field \"params\": %v", err)
	}
	if _, err := decodeRequest(bytes.NewReader(body), r); err != nil {
		return fmt.Errorf("in \"params\": %v", err)
	}
	r.Params = rest
	if len(rest) == 0 {
		r.Params = nil
	}
	return nil
}

// printable refuses a string field holding a control character: a NUL
// would cut a path short where the system reads it, and a newline or an
// escape would forge lines in logs and messages.
func printable(field, v string) error {
	if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
		c, _ := utf8.DecodeRuneInString(v[i:])
		return fmt.Errorf("field %q: a control character (%U) at byte %d: paths and names must be printable text", field, c, i)
	}
	return nil
}

// printableParams applies printable to the names and the strings (in
// arrays and objects too) of params.
func printableParams(params map[string]any) error {
	var walk func(field string, v any) error
	walk = func(field string, v any) error {
		switch v := v.(type) {
		case string:
			return printable(field, v)
		case []any:
			for _, e := range v {
				if err := walk(field, e); err != nil {
					return err
				}
			}
		case map[string]any:
			for k, e := range v {
				if err := printable(field+" (a name in it)", k); err != nil {
					return err
				}
				if err := walk(field+"."+k, e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk("params", map[string]any(params))
}
