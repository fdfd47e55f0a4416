//go:build !unix

package main

const cpuTimesMeasured = false

// cpuTimes is not measured here.
func cpuTimes() (self, children float64) { return 0, 0 }
