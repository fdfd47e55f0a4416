package video

import (
	"os/exec"
	"syscall"
)

// dieWithParent asks the kernel to SIGKILL the child when the thread that
// started it (and so the vsr process) dies, so that no ffmpeg outlives a
// killed vsr. The Go runtime does not end threads whose goroutines unlock
// them, and vsr's locked goroutines always unlock.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
