//go:build !amd64 || purego

package cpu

// useAsm is always false here: only the pure-Go microkernel is available.
var useAsm = false

func kernel6x16(k int, a *float32, lda int, b *float32, c *float32, ldc int, bias *float32) {
	kernel6x16Go(k, a, lda, b, c, ldc, bias)
}
