package video

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// mkvWriter writes raw video frames with their own timestamps as a
// Matroska stream (V_UNCOMPRESSED, no seeking index): what an encoder reads
// from its pipe when every frame keeps its source timestamp (a
// variable-frame-rate video), which raw frames at a fixed rate cannot
// carry. Timestamps are in microseconds; each frame is a cluster of one
// block.
type mkvWriter struct {
	w   io.Writer
	buf []byte
}

// mkvFourCC is the ColourSpace of each raw pixel format ffmpeg's Matroska
// demuxer maps back (libavcodec/raw.c): the 8-bit formats and the 16-bit
// ones a backend writes (see backend.PixelFormat).
var mkvFourCC = map[string]string{"yuv420p": "I420", "rgb24": "RGB\x18", "rgb48le": "RGB0",
	"yuv420p10le": "Y3\x0b\x0a", "yuv420p12le": "Y3\x0b\x0c", "yuv420p16le": "Y3\x0b\x10",
	"yuv444p10le": "Y3\x00\x0a", "yuv444p12le": "Y3\x00\x0c", "yuv444p16le": "Y3\x00\x10"}

// Matroska element IDs used here.
const (
	mkvEBML        = 0x1A45DFA3
	mkvSegment     = 0x18538067
	mkvInfo        = 0x1549A966
	mkvTracks      = 0x1654AE6B
	mkvTrackEntry  = 0xAE
	mkvVideo       = 0xE0
	mkvCluster     = 0x1F43B675
	mkvTimestamp   = 0xE7
	mkvSimpleBlock = 0xA3
)

// newMKVWriter writes the header of a stream of w x h frames in pixel
// format pix (see mkvFourCC), track 1, and of the tracks whose
// TrackEntry bodies more holds (copied from another Matroska stream, with
// track numbers above 1).
func newMKVWriter(out io.Writer, pix string, w, h int, more ...[]byte) (*mkvWriter, error) {
	fourcc, ok := mkvFourCC[pix]
	if !ok {
		return nil, fmt.Errorf("raw %s frames cannot carry timestamps (yuv420p, rgb24, rgb48le and 10, 12 and 16-bit yuv420p and yuv444p can)", pix)
	}
	m := &mkvWriter{w: out}
	var b []byte
	b = mkvElem(b, mkvEBML, cat(
		mkvUint(0x4286, 1), mkvUint(0x42F7, 1), mkvUint(0x42F2, 4), mkvUint(0x42F3, 8),
		mkvElem(nil, 0x4282, []byte("matroska")), mkvUint(0x4287, 4), mkvUint(0x4285, 2)))
	b = appendID(b, mkvSegment)
	b = append(b, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF) // unknown size: a stream
	b = mkvElem(b, mkvInfo, cat(mkvUint(0x2AD7B1, 1000), mkvElem(nil, 0x4D80, []byte("vsr")), mkvElem(nil, 0x5741, []byte("vsr"))))
	video := cat(mkvUint(0xB0, uint64(w)), mkvUint(0xBA, uint64(h)), mkvElem(nil, 0x2EB524, []byte(fourcc)))
	tracks := mkvElem(nil, mkvTrackEntry, cat(
		mkvUint(0xD7, 1), mkvUint(0x73C5, 1), mkvUint(0x83, 1), mkvUint(0x9C, 0),
		mkvElem(nil, 0x86, []byte("V_UNCOMPRESSED")), mkvElem(nil, mkvVideo, video)))
	for _, e := range more {
		tracks = mkvElem(tracks, mkvTrackEntry, e)
	}
	b = mkvElem(b, mkvTracks, tracks)
	_, err := out.Write(b)
	return m, err
}

// WriteFrame writes one frame shown at us microseconds.
func (m *mkvWriter) WriteFrame(us int64, frame []byte) error {
	return m.WriteBlock(1, us, true, frame)
}

// WriteBlock writes one block of track (1 to 127) at us microseconds, in a
// cluster of its own.
func (m *mkvWriter) WriteBlock(track byte, us int64, key bool, frame []byte) error {
	if us < 0 {
		return fmt.Errorf("negative timestamp %d us", us)
	}
	if track == 0 || track > 127 {
		return fmt.Errorf("track %d", track)
	}
	flags := byte(0)
	if key {
		flags = 0x80
	}
	block := 4 + len(frame) // track number, relative timestamp, flags
	ts := mkvUint(mkvTimestamp, uint64(us))
	b := appendID(m.buf[:0], mkvCluster)
	b = appendSize(b, uint64(len(ts)+1+8+block))
	b = append(b, ts...)
	b = appendID(b, mkvSimpleBlock)
	b = binary.BigEndian.AppendUint64(b, 0x01<<56|uint64(block)) // an 8-byte size
	b = append(b, 0x80|track, 0, 0, flags)                       // track, +0, flags
	m.buf = b
	if _, err := m.w.Write(b); err != nil {
		return err
	}
	_, err := m.w.Write(frame)
	return err
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func appendID(b []byte, id uint32) []byte {
	switch {
	case id >= 1<<24:
		return append(b, byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
	case id >= 1<<16:
		return append(b, byte(id>>16), byte(id>>8), byte(id))
	case id >= 1<<8:
		return append(b, byte(id>>8), byte(id))
	}
	return append(b, byte(id))
}

// appendSize writes an EBML size in the fewest bytes.
func appendSize(b []byte, n uint64) []byte {
	l := 1
	for n >= 1<<(7*l)-1 && l < 8 {
		l++
	}
	v := n | 1<<(7*l)
	for i := l - 1; i >= 0; i-- {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}

func mkvElem(b []byte, id uint32, data []byte) []byte {
	b = appendSize(appendID(b, id), uint64(len(data)))
	return append(b, data...)
}

func mkvUint(id uint32, v uint64) []byte {
	n := 1
	for n < 8 && v >= 1<<(8*n) {
		n++
	}
	d := make([]byte, n)
	for i := range d {
		d[i] = byte(v >> (8 * (n - 1 - i)))
	}
	return mkvElem(nil, id, d)
}

// micros rounds seconds to microseconds.
func micros(s float64) int64 { return int64(math.Round(s * 1e6)) }
