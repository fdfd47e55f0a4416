package video

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// exifSegment is an APP1 Exif segment holding one Orientation tag of
// value o, in byte order bo.
func exifSegment(bo binary.AppendByteOrder, o uint16) []byte {
	tiff := []byte("II\x2a\x00\x08\x00\x00\x00")
	if bo == binary.BigEndian {
		tiff = []byte("MM\x00\x2a\x00\x00\x00\x08")
	}
	tiff = bo.AppendUint16(tiff, 1)
	tiff = bo.AppendUint16(tiff, 0x0112)
	tiff = bo.AppendUint16(tiff, 3)
	tiff = bo.AppendUint32(tiff, 1)
	tiff = bo.AppendUint16(tiff, o)
	tiff = append(tiff, 0, 0, 0, 0, 0, 0)
	p := append([]byte("Exif\x00\x00"), tiff...)
	return append([]byte{0xff, 0xe1, byte((len(p) + 2) >> 8), byte(len(p) + 2)}, p...)
}

func TestEXIFOrientation(t *testing.T) {
	for _, bo := range []binary.AppendByteOrder{binary.LittleEndian, binary.BigEndian} {
		for o := uint16(0); o <= 9; o++ {
			jpeg := append(append([]byte{0xff, 0xd8}, exifSegment(bo, o)...), 0xff, 0xd9)
			want := int(o)
			if o > 8 {
				want = 0
			}
			if got := readImageMeta(bufio.NewReader(bytes.NewReader(jpeg))).Orientation; got != want {
				t.Errorf("%v orientation %d: read %d", bo, o, got)
			}
		}
	}
	seg := exifSegment(binary.BigEndian, 6)
	for n := 0; n < len(seg); n++ { // cut short anywhere: no orientation, no panic
		jpeg := append([]byte{0xff, 0xd8}, seg[:n]...)
		if got := readImageMeta(bufio.NewReader(bytes.NewReader(jpeg))).Orientation; got != 0 && n < len(seg) {
			t.Errorf("cut at %d: orientation %d", n, got)
		}
	}
}

// TestOrientFilter: for each EXIF orientation, a picture stored as the
// EXIF standard defines it (where its first row and first column lie in
// the upright picture) is decoded upright.
func TestOrientFilter(t *testing.T) {
	needFFmpeg(t)
	const w, h = 5, 3 // upright
	up := func(x, y int) uint8 { return uint8(10*y + x) }
	// The side of the upright picture the stored first row and first
	// column lie on.
	sides := [9][2]byte{1: {'t', 'l'}, 2: {'t', 'r'}, 3: {'b', 'r'}, 4: {'b', 'l'}, 5: {'l', 't'}, 6: {'r', 't'}, 7: {'r', 'b'}, 8: {'l', 'b'}}
	dir := t.TempDir()
	for o := 1; o <= 8; o++ {
		row, col := sides[o][0], sides[o][1]
		sw, sh := w, h
		if row == 'l' || row == 'r' {
			sw, sh = h, w
		}
		img := image.NewGray(image.Rect(0, 0, sw, sh))
		for r := 0; r < sh; r++ {
			for c := 0; c < sw; c++ {
				var x, y int
				if row == 't' || row == 'b' {
					x, y = c, r
					if row == 'b' {
						y = h - 1 - r
					}
					if col == 'r' {
						x = w - 1 - c
					}
				} else {
					x, y = r, c
					if row == 'r' {
						x = w - 1 - r
					}
					if col == 'b' {
						y = h - 1 - c
					}
				}
				img.SetGray(c, r, color.Gray{up(x, y)})
			}
		}
		path := filepath.Join(dir, "o.png")
		var b bytes.Buffer
		png.Encode(&b, img)
		os.WriteFile(path, b.Bytes(), 0o644)
		info := &Info{Path: path, Width: w, Height: h, Frames: 1, FPS: Rational{25, 1}, Orientation: o}
		got, _, err := decodeAll(t, info, DecodeOptions{PixFmt: "gray"})
		if err != nil {
			t.Fatal(err)
		}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				if got[y*w+x] != up(x, y) {
					t.Fatalf("orientation %d (%s): upright pixel (%d,%d) is %d, want %d", o, OrientFilter(o), x, y, got[y*w+x], up(x, y))
				}
			}
		}
	}
}

// TestEmbedICC: a profile embedded into the PNG, JPEG and WebP files
// ffmpeg writes is read back the same, and ffmpeg decodes the same
// pixels from them.
func TestEmbedICC(t *testing.T) {
	ffmpeg := needFFmpeg(t)
	dir := t.TempDir()
	icc := make([]byte, 70000) // two JPEG segments
	for i := range icc {
		icc[i] = byte(i * 7)
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"a.png", nil},
		{"a.jpg", nil},
		{"lossy.webp", []string{"-c:v", "libwebp"}},
		{"alpha.webp", []string{"-c:v", "libwebp", "-pix_fmt", "yuva420p"}},
		{"lossless.webp", []string{"-c:v", "libwebp", "-lossless", "1"}},
	} {
		path := filepath.Join(dir, c.name)
		args := append([]string{"-v", "error", "-f", "lavfi", "-i", "testsrc2=size=24x16,format=rgba", "-frames:v", "1"}, c.args...)
		if out, err := exec.Command(ffmpeg, append(args, path)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", c.name, err, out)
		}
		decode := func() []byte {
			out, err := exec.Command(ffmpeg, "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgba", "-").Output()
			if err != nil {
				t.Fatalf("%s: ffmpeg cannot decode it: %v", c.name, err)
			}
			return out
		}
		before := decode()
		if err := EmbedICC(path, filepath.Ext(path), icc, 24, 16); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		m, err := ReadImageMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.ICC, icc) {
			t.Errorf("%s: read back %d bytes of profile, want the %d embedded", c.name, len(m.ICC), len(icc))
		}
		if !bytes.Equal(decode(), before) {
			t.Errorf("%s: the pixels changed", c.name)
		}
	}
}

// seeds are small files of each kind with metadata.
func seeds() [][]byte {
	ihdr := appendChunk(nil, binary.BigEndian, "IHDR", []byte{0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0})
	pngFile := append(append([]byte(pngSig), ihdr...), appendChunk(nil, binary.BigEndian, "IEND", nil)...)
	jpegFile := []byte{0xff, 0xd8, 0xff, 0xd9}
	vp8 := appendChunk(nil, binary.LittleEndian, "VP8 ", make([]byte, 10))
	webpFile := append([]byte("RIFF\x00\x00\x00\x00WEBP"), vp8...)
	out := [][]byte{pngFile, jpegFile, webpFile}
	icc := []byte("profile")
	if b, err := pngWithICC(pngFile, icc); err == nil {
		out = append(out, b)
	}
	if b, err := jpegWithICC(jpegFile, icc); err == nil {
		out = append(out, b, append(append([]byte{0xff, 0xd8}, exifSegment(binary.LittleEndian, 6)...), b[2:]...))
	}
	if b, err := webpWithICC(webpFile, icc, 1, 1); err == nil {
		out = append(out, b)
	}
	return out
}

// FuzzEXIF: the EXIF reader never panics, whatever the segment holds.
func FuzzEXIF(f *testing.F) {
	f.Add(exifSegment(binary.BigEndian, 6)[10:])
	f.Add(exifSegment(binary.LittleEndian, 3)[10:])
	f.Add([]byte("MM\x00\x2a\xff\xff\xff\xf0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if o := exifOrientation(b); o < 0 || o > 8 {
			t.Fatalf("orientation %d", o)
		}
		jpeg := append(append([]byte{0xff, 0xd8, 0xff, 0xe1, byte((len(b) + 8) >> 8), byte(len(b) + 8)}, "Exif\x00\x00"...), b...)
		readImageMeta(bufio.NewReader(bytes.NewReader(jpeg)))
	})
}

// FuzzICC: the ICC readers and writers never panic, whatever the file
// holds, and a profile written is read back.
func FuzzICC(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		readImageMeta(bufio.NewReader(bytes.NewReader(b)))
		icc := []byte("a profile")
		for _, embed := range []func([]byte, []byte) ([]byte, error){
			pngWithICC, jpegWithICC, func(b, icc []byte) ([]byte, error) { return webpWithICC(b, icc, 3, 2) },
		} {
			if out, err := embed(b, icc); err == nil {
				readImageMeta(bufio.NewReader(bytes.NewReader(out)))
			}
		}
	})
}
