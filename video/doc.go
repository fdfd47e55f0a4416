// Package video probes, decodes and encodes video files by running the
// ffmpeg executable (and ffprobe when it is available) as child processes.
//
// Probe describes a file and counts its frames exactly, refusing inputs
// over Limits. An input file is opened alone (the file protocol) and read
// only by the demuxer of a video container or of a PNG, JPEG, WebP, BMP or
// TIFF image: a playlist or list of files (HLS, DASH, ffconcat), which
// would make ffmpeg open other files and URLs, is refused unless
// ProbeOptions.AllowPlaylists says otherwise. A Decoder streams
// its frames as raw RGB24 (or another raw layout) through a pipe, one frame
// per source frame. An Encoder takes raw frames through a pipe and writes
// them, with the audio of another file if asked, to a temporary file that
// Close renames onto the output path, keeping the frame rate and the frame
// count exact.
//
// Only options that ffmpeg 4.1 also accepts are used, and everything works
// without ffprobe. The executables are chosen by FFmpegPath / FFprobePath,
// else the environment variables VSR_FFMPEG / VSR_FFPROBE, else PATH;
// VSR_FFPROBE=none makes Probe use ffmpeg alone.
//
// Children are started with exec.CommandContext, so they are killed when the
// context is done; Decoder.Close, Encoder.Close and Encoder.Abort reap them.
// Their stderr is kept in a small ring buffer for error messages. Errors are
// single lines; those about bad inputs wrap ErrNotVideo, ErrNoFrames,
// ErrTruncated, ErrCorrupt, ErrFormat, ErrLimit or fs.ErrNotExist.
//
// Nothing an Encoder or Concat writes is renamed into view before it is
// checked: ffmpeg's stderr names no write error whatever its exit status
// (ffmpeg 5.1 exits 0 after "Error writing trailer"), the file is non-empty
// (and forced to disk), and it reads back whole, every video packet
// demuxed up to the last, one per frame written. A failed check wraps
// ErrDiskFull (the disk was full: the message says about how much more
// room is needed) or ErrIncomplete, and leaves a file at the output path
// as it was.
package video
