package serve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// inputCheckTimeout bounds the runner's check of a submitted input (a
// header read: a fraction of a second for a file that is what it says).
const inputCheckTimeout = 30 * time.Second

// checkInput has the runner, when it is an InputChecker, check the input
// of a task being submitted: the file at path (the resolved video_path),
// or at upload (an uploaded file's hidden name until the task is stored)
// when that is set. The file is opened inside the input root with os.Root
// and must be a regular file; the runner reads that very file through its
// descriptor, and its messages name it as the client does.
func (a *api) checkInput(ctx context.Context, req *Request, path, upload string) error {
	c, ok := a.runner.(InputChecker)
	if !ok {
		return nil
	}
	name, quoted := req.VideoPath, strconv.Quote(req.VideoPath)
	if upload != "" {
		path, name = upload, "the uploaded video"
		quoted = name
	}
	f, err := openIn(a.cfg.InputRoot, path)
	if err != nil {
		return fmt.Errorf("video_path %s cannot be opened inside the input root: %v", quoted, unwrapPath(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("video_path %s is not a regular file", quoted)
	}
	ctx, cancel := context.WithTimeout(ctx, inputCheckTimeout)
	defer cancel()
	fd := video.FDPath(f, path)
	err = c.CheckInput(ctx, req, fd)
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("video_path %s: reading its header took over %s: give a video file", quoted, inputCheckTimeout)
	}
	child := video.ChildPath(fd)
	names := strings.NewReplacer(strconv.Quote(child), quoted, strconv.Quote(fd), quoted, child, name, fd, name)
	return errors.New(names.Replace(err.Error()))
}
