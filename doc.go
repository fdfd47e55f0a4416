// Package vsr is the root of the vsr video restoration engine. The command is
// cmd/vsr; the engine lives in the packages below this one.
package vsr
