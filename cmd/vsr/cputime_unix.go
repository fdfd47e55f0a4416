//go:build unix

package main

import "syscall"

const cpuTimesMeasured = true

// cpuTimes returns the user + system CPU seconds used so far by this
// process and by its children that have exited (ffmpeg).
func cpuTimes() (self, children float64) {
	sec := func(who int) float64 {
		var u syscall.Rusage
		if syscall.Getrusage(who, &u) != nil {
			return 0
		}
		return float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
	}
	return sec(syscall.RUSAGE_SELF), sec(syscall.RUSAGE_CHILDREN)
}
