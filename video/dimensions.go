package video

import "context"

// Dimensions returns the size of the decoded frames of the video at path
// (rotation applied, as Info's Width and Height) from the container's
// headers, without decoding: cheap enough to check a request before it is
// queued. Its errors are those Probe gives for a file it cannot open as a
// video.
func Dimensions(ctx context.Context, path string) (w, h int, err error) {
	t, err := resolveTools()
	if err != nil {
		return 0, 0, err
	}
	if err := checkInput(path); err != nil {
		return 0, 0, err
	}
	m, err := probeMeta(ctx, path, t)
	if err != nil {
		return 0, 0, err
	}
	vs := m.video()
	if vs == nil {
		return 0, 0, kindErrorf(ErrNotVideo, "%q has no video stream: give a video file", path)
	}
	w, h = vs.width, vs.height
	if vs.rotation == 90 || vs.rotation == 270 {
		w, h = h, w
	}
	if w <= 0 || h <= 0 {
		return 0, 0, kindErrorf(ErrNotVideo, "%q: %s could not determine the size of its video stream (codec %q)", path, m.tool, vs.codec)
	}
	return w, h, nil
}
