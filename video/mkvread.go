package video

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// mkvReader reads the Matroska stream a live decoder's ffmpeg writes: one
// raw video track (V_UNCOMPRESSED) and at most one audio track copied from
// the source, in clusters whose sizes may be unknown (a stream). It reads
// only what vsr's own ffmpeg command writes; other elements are skipped.
type mkvReader struct {
	r     *bufio.Reader
	scale int64 // nanoseconds per timestamp unit (TimestampScale)
	// The tracks, once the Tracks element is read.
	video, audio         uint64 // track numbers (0: none)
	width, height        int
	audioEntry           []byte // the audio TrackEntry's body, to copy into the output
	cluster              int64  // the current cluster's timestamp
	frameDur             int64  // the video's DefaultDuration in ns (0: not given)
	sawTracks, sawHeader bool
	pending              *LivePacket // read by Header, returned by the next Next

	sar    Rational // from the display size (zero: square pixels)
	colour Colour   // primaries and transfer (the frames are RGB)
}

// mkvPacket is one block of the stream.
type mkvPacket struct {
	track uint64
	ns    int64 // presentation time in nanoseconds
	key   bool
	data  []byte
}

// Element IDs read here, besides those of mkvWriter.
const (
	mkvTimestampScale  = 0x2AD7B1
	mkvTrackNumber     = 0xD7
	mkvTrackType       = 0x83
	mkvCodecID         = 0x86
	mkvDefaultDuration = 0x23E383
	mkvPixelWidth      = 0xB0
	mkvPixelHeight     = 0xBA
	mkvBlockGroup      = 0xA0
	mkvBlock           = 0xA1
	mkvDisplayWidth    = 0x54B0
	mkvDisplayHeight   = 0x54BA
	mkvColour          = 0x55B0
	mkvPrimaries       = 0x55BB
	mkvTransfer        = 0x55BA
)

// maxElement bounds an element read into memory (a 16K RGB frame is 400 MB).
const maxElement = 1 << 30

func newMKVReader(r io.Reader) *mkvReader {
	return &mkvReader{r: bufio.NewReaderSize(r, 1<<20), scale: 1000000}
}

// vint reads an EBML variable-length number; an ID keeps its marker bit.
// unknown reports a size of all ones (an element of unknown size).
func (m *mkvReader) vint(id bool) (v uint64, unknown bool, err error) {
	b, err := m.r.ReadByte()
	if err != nil {
		return 0, false, err
	}
	n := 1
	for mask := byte(0x80); n <= 8 && b&mask == 0; mask >>= 1 {
		n++
	}
	if n > 8 {
		return 0, false, errors.New("matroska: invalid variable-length number")
	}
	v = uint64(b)
	if !id {
		v &= 0xFF >> n
	}
	ones := v == uint64(0xFF>>n)
	for range n - 1 {
		c, err := m.r.ReadByte()
		if err != nil {
			return 0, false, noEOF(err)
		}
		v = v<<8 | uint64(c)
		ones = ones && c == 0xFF
	}
	return v, ones && !id, nil
}

// element reads the next element's header.
func (m *mkvReader) element() (id, size uint64, unknown bool, err error) {
	if id, _, err = m.vint(true); err != nil {
		return
	}
	size, unknown, err = m.vint(false)
	return id, size, unknown, noEOF(err)
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// body reads an element's body of size bytes.
func (m *mkvReader) body(size uint64) ([]byte, error) {
	if size > maxElement {
		return nil, fmt.Errorf("matroska: an element of %d bytes", size)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(m.r, b)
	return b, noEOF(err)
}

// next returns the next block of the stream, reading the header and the
// tracks on the way; io.EOF at the end of the stream.
func (m *mkvReader) next() (*mkvPacket, error) {
	for {
		id, size, unknown, err := m.element()
		if err != nil {
			return nil, err
		}
		switch id {
		case mkvEBML:
			m.sawHeader = true
			if _, err := m.body(size); err != nil {
				return nil, err
			}
			continue
		case mkvSegment, mkvCluster, mkvBlockGroup:
			continue // masters whose children are read in line
		}
		if !m.sawHeader {
			return nil, errors.New("matroska: no EBML header")
		}
		if unknown {
			return nil, fmt.Errorf("matroska: element %#x of unknown size", id)
		}
		b, err := m.body(size)
		if err != nil {
			return nil, err
		}
		switch id {
		case mkvInfo:
			m.info(b)
		case mkvTracks:
			if err := m.tracks(b); err != nil {
				return nil, err
			}
		case mkvTimestamp:
			m.cluster = int64(beUint(b))
		case mkvSimpleBlock, mkvBlock:
			if !m.sawTracks {
				return nil, errors.New("matroska: a block before the tracks")
			}
			p, err := m.block(b, id == mkvBlock)
			if err != nil {
				return nil, err
			}
			if p != nil {
				return p, nil
			}
		}
	}
}

// children calls f with each child element of a master's body.
func children(b []byte, f func(id uint64, body []byte) error) error {
	m := &mkvReader{r: bufio.NewReader(bytes.NewReader(b))}
	for {
		id, size, unknown, err := m.element()
		if err == io.EOF {
			return nil
		}
		if err != nil || unknown {
			return fmt.Errorf("matroska: a damaged master element")
		}
		body, err := m.body(size)
		if err != nil {
			return err
		}
		if err := f(id, body); err != nil {
			return err
		}
	}
}

func (m *mkvReader) info(b []byte) {
	children(b, func(id uint64, body []byte) error {
		if id == mkvTimestampScale && beUint(body) > 0 {
			m.scale = int64(beUint(body))
		}
		return nil
	})
}

// tracks reads the Tracks element: the video track's size and the audio
// track to carry.
func (m *mkvReader) tracks(b []byte) error {
	err := children(b, func(id uint64, entry []byte) error {
		if id != mkvTrackEntry {
			return nil
		}
		var num, kind uint64
		var codec string
		var w, h, dw, dh int
		var colour Colour
		var dur int64
		err := children(entry, func(id uint64, body []byte) error {
			switch id {
			case mkvTrackNumber:
				num = beUint(body)
			case mkvTrackType:
				kind = beUint(body)
			case mkvCodecID:
				codec = string(body)
			case mkvDefaultDuration:
				dur = int64(beUint(body))
			case mkvVideo:
				return children(body, func(id uint64, body []byte) error {
					switch id {
					case mkvPixelWidth:
						w = int(beUint(body))
					case mkvPixelHeight:
						h = int(beUint(body))
					case mkvDisplayWidth:
						dw = int(beUint(body))
					case mkvDisplayHeight:
						dh = int(beUint(body))
					case mkvColour:
						return children(body, func(id uint64, body []byte) error {
							switch id {
							case mkvPrimaries:
								colour.Primaries = mkvPrimaryNames[beUint(body)]
							case mkvTransfer:
								colour.Transfer = mkvTransferNames[beUint(body)]
							}
							return nil
						})
					}
					return nil
				})
			}
			return nil
		})
		if err != nil {
			return err
		}
		switch {
		case kind == 1 && m.video == 0:
			if codec != "V_UNCOMPRESSED" && codec != "V_MS/VFW/FOURCC" { // ffmpeg 5 writes raw frames in VFW mode
				return fmt.Errorf("matroska: video track of codec %s, want raw frames", codec)
			}
			m.video, m.width, m.height, m.frameDur, m.colour = num, w, h, dur, colour
			if dw > 0 && dh > 0 && w > 0 && h > 0 && dw*h != dh*w && dw <= 1<<20 && dh <= 1<<20 {
				m.sar = Rational{Num: dw * h, Den: dh * w}.Reduced()
			}
		case kind == 2 && m.audio == 0:
			m.audio, m.audioEntry = num, entry
		}
		return nil
	})
	if err != nil {
		return err
	}
	if m.video == 0 || m.width <= 0 || m.height <= 0 {
		return errors.New("matroska: no raw video track with a frame size")
	}
	if err := DefaultLimits.checkSize("the live source", m.width, m.height); err != nil {
		return err // as a file input's (Limits), before a frame is read
	}
	if m.audio == m.video {
		m.audio, m.audioEntry = 0, nil
	}
	m.sawTracks = true
	return nil
}

// The names of Matroska's (ISO/IEC 23091-2) colour primaries and transfer
// codes, as ffmpeg names them.
var (
	mkvPrimaryNames = map[uint64]string{1: "bt709", 4: "bt470m", 5: "bt470bg", 6: "smpte170m", 7: "smpte240m", 8: "film",
		9: "bt2020", 10: "smpte428", 11: "smpte431", 12: "smpte432", 22: "jedec-p22"}
	mkvTransferNames = map[uint64]string{1: "bt709", 4: "gamma22", 5: "gamma28", 6: "smpte170m", 7: "smpte240m", 8: "linear",
		9: "log100", 10: "log316", 11: "iec61966-2-4", 12: "bt1361e", 13: "iec61966-2-1", 14: "bt2020-10", 15: "bt2020-12",
		16: "smpte2084", 17: "smpte428", 18: "arib-std-b67"}
)

// block parses a SimpleBlock (or a BlockGroup's Block) of one frame; nil
// for the blocks of other tracks.
func (m *mkvReader) block(b []byte, inGroup bool) (*mkvPacket, error) {
	r := &mkvReader{r: bufio.NewReader(bytes.NewReader(b))}
	track, _, err := r.vint(false)
	if err != nil {
		return nil, err
	}
	hdr := bits.LeadingZeros8(b[0]) + 1 // the track number's length
	if len(b) < hdr+3 {
		return nil, errors.New("matroska: a short block")
	}
	rel := int64(int16(binary.BigEndian.Uint16(b[hdr:])))
	flags := b[hdr+2]
	if flags&0x06 != 0 {
		return nil, errors.New("matroska: laced blocks are not read")
	}
	if track != m.video && track != m.audio {
		return nil, nil
	}
	return &mkvPacket{track: track, ns: (m.cluster + rel) * m.scale, key: inGroup || flags&0x80 != 0, data: b[hdr+3:]}, nil
}

// beUint reads a big-endian unsigned integer of up to 8 bytes.
func beUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
