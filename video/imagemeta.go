package video

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// ImageMeta is what a still image carries besides its pixels that vsr
// keeps: its EXIF orientation and its ICC colour profile.
type ImageMeta struct {
	// Orientation is the EXIF orientation of a JPEG (1-8: 1 upright, 6
	// turned 90 degrees clockwise to display...); 0 when there is none.
	Orientation int
	// ICC is the embedded ICC profile (a JPEG's APP2 ICC_PROFILE
	// segments joined, a PNG's iCCP decompressed, a WebP's ICCP), nil
	// when there is none or it is damaged.
	ICC []byte
}

// maxICC bounds an ICC profile read from a file (the largest a JPEG can
// hold is 255 segments of 65519 bytes).
const maxICC = 16 << 20

// ReadImageMeta reads the metadata of the image at path (a JPEG, PNG or
// WebP; others have none vsr reads). The file is untrusted: it reads the
// headers before the picture data only, every length checked, and a
// damaged header gives no metadata rather than an error. The error is for
// a file that cannot be read at all.
func ReadImageMeta(path string) (ImageMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return ImageMeta{}, err
	}
	defer f.Close()
	return readImageMeta(bufio.NewReader(f)), nil
}

// readImageMeta reads the metadata of the image r begins with.
func readImageMeta(r *bufio.Reader) ImageMeta {
	head, _ := r.Peek(12)
	switch {
	case bytes.HasPrefix(head, []byte{0xff, 0xd8}):
		return readJPEGMeta(r)
	case bytes.HasPrefix(head, []byte(pngSig)):
		return ImageMeta{ICC: readPNGICC(r)}
	case len(head) == 12 && string(head[:4]) == "RIFF" && string(head[8:]) == "WEBP":
		return ImageMeta{ICC: readWebPICC(r)}
	}
	return ImageMeta{}
}

const pngSig = "\x89PNG\r\n\x1a\n"

// readJPEGMeta reads the segments of a JPEG up to its first scan: the
// orientation of its APP1 Exif segment and the profile of its APP2
// ICC_PROFILE segments.
func readJPEGMeta(r *bufio.Reader) ImageMeta {
	var m ImageMeta
	if _, err := r.Discard(2); err != nil { // SOI
		return m
	}
	var chunks [][]byte // ICC_PROFILE segments by sequence number - 1
	for {
		b, err := r.ReadByte()
		if err != nil || b != 0xff {
			break
		}
		marker, err := r.ReadByte()
		for err == nil && marker == 0xff { // fill bytes
			marker, err = r.ReadByte()
		}
		if err != nil || marker == 0xda || marker == 0xd9 { // SOS, EOI
			break
		}
		if marker == 0x01 || marker >= 0xd0 && marker <= 0xd7 { // no length
			continue
		}
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			break
		}
		n := int(binary.BigEndian.Uint16(l[:])) - 2
		if n < 0 {
			break
		}
		if marker != 0xe1 && marker != 0xe2 {
			if _, err := r.Discard(n); err != nil {
				break
			}
			continue
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			break
		}
		switch {
		case marker == 0xe1 && m.Orientation == 0 && bytes.HasPrefix(p, []byte("Exif\x00\x00")):
			m.Orientation = exifOrientation(p[6:])
		case marker == 0xe2 && len(p) > 14 && bytes.HasPrefix(p, []byte("ICC_PROFILE\x00")):
			seq, count := int(p[12]), int(p[13])
			if seq == 0 || seq > count || chunks != nil && len(chunks) != count {
				return ImageMeta{Orientation: m.Orientation} // inconsistent: no profile
			}
			if chunks == nil {
				chunks = make([][]byte, count)
			}
			chunks[seq-1] = p[14:]
		}
	}
	if chunks != nil && !containsNil(chunks) {
		m.ICC = bytes.Join(chunks, nil)
	}
	return m
}

func containsNil(bs [][]byte) bool {
	for _, b := range bs {
		if b == nil {
			return true
		}
	}
	return false
}

// exifOrientation returns the Orientation tag (0x0112) of the first IFD of
// the TIFF structure b (an Exif segment's payload), 0 if absent or out of
// range. Every offset is checked against len(b).
func exifOrientation(b []byte) int {
	if len(b) < 8 {
		return 0
	}
	var bo binary.ByteOrder
	switch string(b[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 0
	}
	if bo.Uint16(b[2:]) != 42 {
		return 0
	}
	off := uint64(bo.Uint32(b[4:]))
	if off+2 > uint64(len(b)) {
		return 0
	}
	n := uint64(bo.Uint16(b[off:]))
	for i := uint64(0); i < n; i++ {
		e := off + 2 + 12*i
		if e+12 > uint64(len(b)) {
			return 0
		}
		if bo.Uint16(b[e:]) != 0x0112 {
			continue
		}
		// SHORT (type 3), count 1: the value sits in the entry.
		if bo.Uint16(b[e+2:]) != 3 || bo.Uint32(b[e+4:]) != 1 {
			return 0
		}
		if o := int(bo.Uint16(b[e+8:])); o >= 1 && o <= 8 {
			return o
		}
		return 0
	}
	return 0
}

// OrientFilter is the ffmpeg filter that turns a picture stored with EXIF
// orientation o upright ("" for 0, 1 or an unknown value).
func OrientFilter(o int) string {
	return [...]string{2: "hflip", 3: "hflip,vflip", 4: "vflip", 5: "transpose=0", 6: "transpose=1", 7: "transpose=3", 8: "transpose=2", 9: ""}[min(max(o, 0), 9)]
}

// orientArgs are the input options of an image turned upright by
// OrientFilter(o): ffmpeg 5.1 turns a JPEG by its EXIF orientation itself
// (4.1 does not), so that is turned off.
func orientArgs(o int) []string {
	if OrientFilter(o) == "" {
		return nil
	}
	return []string{"-noautorotate"}
}

// readPNGICC reads the chunks of a PNG up to its image data and returns
// the profile of its iCCP chunk, decompressed (nil if none or damaged).
func readPNGICC(r *bufio.Reader) []byte {
	if _, err := r.Discard(len(pngSig)); err != nil {
		return nil
	}
	for {
		var h [8]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return nil
		}
		n, typ := binary.BigEndian.Uint32(h[:4]), string(h[4:])
		switch {
		case typ == "IDAT" || typ == "IEND" || n > 1<<30:
			return nil
		case typ != "iCCP":
			if _, err := r.Discard(int(n) + 4); err != nil {
				return nil
			}
			continue
		case n > maxICC:
			return nil
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return nil
		}
		name, rest, ok := bytes.Cut(p, []byte{0})
		if !ok || len(name) == 0 || len(name) > 79 || len(rest) < 1 || rest[0] != 0 {
			return nil
		}
		icc, err := inflate(rest[1:], maxICC)
		if err != nil {
			return nil
		}
		return icc
	}
}

// inflate decompresses zlib data of at most limit bytes.
func inflate(b []byte, limit int64) ([]byte, error) {
	z, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer z.Close()
	out, err := io.ReadAll(io.LimitReader(z, limit+1))
	if err == nil && int64(len(out)) > limit {
		err = errors.New("too large")
	}
	return out, err
}

// readWebPICC reads the chunks of a WebP up to its image data and returns
// the payload of its ICCP chunk (nil if none or damaged).
func readWebPICC(r *bufio.Reader) []byte {
	if _, err := r.Discard(12); err != nil {
		return nil
	}
	for {
		var h [8]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return nil
		}
		typ, n := string(h[:4]), binary.LittleEndian.Uint32(h[4:])
		switch typ {
		case "VP8 ", "VP8L", "ALPH", "ANIM":
			return nil // the profile comes before the image
		case "ICCP":
			if n == 0 || n > maxICC {
				return nil
			}
			p := make([]byte, n)
			if _, err := io.ReadFull(r, p); err != nil {
				return nil
			}
			return p
		}
		if n > 1<<30 {
			return nil
		}
		if _, err := r.Discard(int(n + n&1)); err != nil {
			return nil
		}
	}
}

// CanEmbedICC reports whether EmbedICC writes a profile into a file of
// extension ext (.png, .jpg, .jpeg, .webp).
func CanEmbedICC(ext string) bool {
	switch ext {
	case ".png", ".jpg", ".jpeg", ".webp":
		return true
	}
	return false
}

// EmbedICC rewrites the image at path (a PNG, JPEG or WebP as vsr's
// encoders write them; see CanEmbedICC) with the ICC profile icc: a PNG
// gets an iCCP chunk after its IHDR (its sRGB and iCCP chunks dropped), a
// JPEG APP2 ICC_PROFILE segments after its SOI and JFIF APP0, a WebP an
// ICCP chunk after its VP8X (made if absent: w x h is the picture's
// size). It is for files vsr has just written, not for arbitrary ones.
func EmbedICC(path, ext string, icc []byte, w, h int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var out []byte
	switch ext {
	case ".png":
		out, err = pngWithICC(b, icc)
	case ".jpg", ".jpeg":
		out, err = jpegWithICC(b, icc)
	case ".webp":
		out, err = webpWithICC(b, icc, w, h)
	default:
		err = fmt.Errorf("%s files cannot carry an ICC profile here", ext)
	}
	if err != nil {
		return fmt.Errorf("embed the ICC profile: %w", err)
	}
	return os.WriteFile(path, out, 0o644)
}

// pngWithICC returns the PNG b with an iCCP chunk holding icc.
func pngWithICC(b, icc []byte) ([]byte, error) {
	const ihdrEnd = len(pngSig) + 8 + 13 + 4
	if len(b) < ihdrEnd || !bytes.HasPrefix(b, []byte(pngSig)) || string(b[12:16]) != "IHDR" {
		return nil, errors.New("not a PNG as written")
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(icc)
	zw.Close()
	out := append([]byte(nil), b[:ihdrEnd]...)
	out = appendChunk(out, binary.BigEndian, "iCCP", append([]byte("ICC profile\x00\x00"), z.Bytes()...))
	for rest := b[ihdrEnd:]; len(rest) > 0; {
		if len(rest) < 12 {
			return nil, errors.New("PNG chunk cut short")
		}
		n := uint64(binary.BigEndian.Uint32(rest)) + 12
		if n > uint64(len(rest)) {
			return nil, errors.New("PNG chunk cut short")
		}
		if typ := string(rest[4:8]); typ != "iCCP" && typ != "sRGB" {
			out = append(out, rest[:n]...)
		}
		rest = rest[n:]
	}
	return out, nil
}

// appendChunk appends a PNG chunk (big-endian, with its CRC) or a RIFF
// chunk (little-endian, padded to an even length) to b.
func appendChunk(b []byte, bo binary.ByteOrder, typ string, data []byte) []byte {
	if bo == binary.BigEndian {
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		at := len(b)
		b = append(append(b, typ...), data...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[at:]))
	}
	b = binary.LittleEndian.AppendUint32(append(b, typ...), uint32(len(data)))
	b = append(b, data...)
	if len(data)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

// jpegWithICC returns the JPEG b with APP2 ICC_PROFILE segments holding
// icc.
func jpegWithICC(b, icc []byte) ([]byte, error) {
	if len(b) < 4 || b[0] != 0xff || b[1] != 0xd8 {
		return nil, errors.New("not a JPEG as written")
	}
	at := 2
	if b[2] == 0xff && b[3] == 0xe0 && len(b) >= 6 { // JFIF APP0 stays first
		at = 4 + int(binary.BigEndian.Uint16(b[4:]))
		if at > len(b) {
			return nil, errors.New("JPEG APP0 cut short")
		}
	}
	const per = 65535 - 2 - 14
	count := (len(icc) + per - 1) / per
	if count > 255 {
		return nil, fmt.Errorf("a %d-byte profile is too large for a JPEG", len(icc))
	}
	out := append([]byte(nil), b[:at]...)
	for i := 0; i < count; i++ {
		part := icc[i*per : min((i+1)*per, len(icc))]
		out = append(out, 0xff, 0xe2)
		out = binary.BigEndian.AppendUint16(out, uint16(2+14+len(part)))
		out = append(append(out, "ICC_PROFILE\x00"...), byte(i+1), byte(count))
		out = append(out, part...)
	}
	return append(out, b[at:]...), nil
}

// webpWithICC returns the WebP b (of w x h) with an ICCP chunk holding
// icc, after a VP8X chunk whose ICC flag is set.
func webpWithICC(b, icc []byte, w, h int) ([]byte, error) {
	if len(b) < 20 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WEBP" {
		return nil, errors.New("not a WebP as written")
	}
	var chunks [][2][]byte // fourcc, payload
	for rest := b[12:]; len(rest) > 0; {
		if len(rest) < 8 {
			return nil, errors.New("WebP chunk cut short")
		}
		n := uint64(binary.LittleEndian.Uint32(rest[4:]))
		if 8+n > uint64(len(rest)) {
			return nil, errors.New("WebP chunk cut short")
		}
		chunks = append(chunks, [2][]byte{rest[:4], rest[8 : 8+n]})
		rest = rest[min(8+n+n&1, uint64(len(rest))):]
	}
	if len(chunks) == 0 {
		return nil, errors.New("WebP holds no chunks")
	}
	out := append([]byte(nil), b[:12]...)
	switch first := chunks[0]; string(first[0]) {
	case "VP8X":
		if len(first[1]) < 10 {
			return nil, errors.New("WebP VP8X chunk cut short")
		}
		x := append([]byte(nil), first[1]...)
		x[0] |= 0x20
		out = appendChunk(out, binary.LittleEndian, "VP8X", x)
		chunks = chunks[1:]
	case "VP8 ", "VP8L":
		x := make([]byte, 10)
		x[0] = 0x20
		if p := first[1]; string(first[0]) == "VP8L" && len(p) >= 5 && binary.LittleEndian.Uint32(p[1:])>>28&1 == 1 {
			x[0] |= 0x10 // alpha
		}
		put24 := func(b []byte, v int) { b[0], b[1], b[2] = byte(v), byte(v>>8), byte(v>>16) }
		put24(x[4:], w-1)
		put24(x[7:], h-1)
		out = appendChunk(out, binary.LittleEndian, "VP8X", x)
	default:
		return nil, fmt.Errorf("WebP begins with a %q chunk", first[0])
	}
	out = appendChunk(out, binary.LittleEndian, "ICCP", icc)
	for _, c := range chunks {
		if string(c[0]) != "ICCP" {
			out = appendChunk(out, binary.LittleEndian, string(c[0]), c[1])
		}
	}
	binary.LittleEndian.PutUint32(out[4:], uint32(len(out)-8))
	return out, nil
}
