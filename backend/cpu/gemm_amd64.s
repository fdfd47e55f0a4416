//go:build amd64 && !purego

#include "textflag.h"

// One K step of the 6x16 microkernel: two YMM loads of the packed B row
// (16 floats), six broadcasts of A (rows 0-2 from SI, rows 3-5 from R11,
// row stride DX bytes), twelve FMAs into the accumulators Y0-Y11.
// Every accumulator lane sees exactly one FMA per step, in increasing p.
#define STEP(ao, bo) \
	VMOVUPS      bo(BX), Y12;            \
	VMOVUPS      bo+32(BX), Y13;         \
	VBROADCASTSS ao(SI), Y14;            \
	VFMADD231PS  Y12, Y14, Y0;           \
	VFMADD231PS  Y13, Y14, Y1;           \
	VBROADCASTSS ao(SI)(DX*1), Y15;      \
	VFMADD231PS  Y12, Y15, Y2;           \
	VFMADD231PS  Y13, Y15, Y3;           \
	VBROADCASTSS ao(SI)(DX*2), Y14;      \
	VFMADD231PS  Y12, Y14, Y4;           \
	VFMADD231PS  Y13, Y14, Y5;           \
	VBROADCASTSS ao(R11), Y15;           \
	VFMADD231PS  Y12, Y15, Y6;           \
	VFMADD231PS  Y13, Y15, Y7;           \
	VBROADCASTSS ao(R11)(DX*1), Y14;     \
	VFMADD231PS  Y12, Y14, Y8;           \
	VFMADD231PS  Y13, Y14, Y9;           \
	VBROADCASTSS ao(R11)(DX*2), Y15;     \
	VFMADD231PS  Y12, Y15, Y10;          \
	VFMADD231PS  Y13, Y15, Y11

// func kernel6x16(k int, a *float32, lda int, b *float32, c *float32, ldc int, bias *float32)
TEXT ·kernel6x16(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), DX
	MOVQ b+24(FP), BX
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R8
	MOVQ bias+48(FP), R9

	SHLQ $2, DX           // lda in bytes
	SHLQ $2, R8           // ldc in bytes
	LEAQ (SI)(DX*2), R11
	ADDQ DX, R11          // R11 = &a[3*lda]

	// Accumulators start from the bias.
	VMOVUPS (R9), Y0
	VMOVUPS 32(R9), Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y1, Y3
	VMOVAPS Y0, Y4
	VMOVAPS Y1, Y5
	VMOVAPS Y0, Y6
	VMOVAPS Y1, Y7
	VMOVAPS Y0, Y8
	VMOVAPS Y1, Y9
	VMOVAPS Y0, Y10
	VMOVAPS Y1, Y11

	MOVQ CX, R10
	SHRQ $2, R10
	JZ   tail

loop4:
	STEP(0, 0)
	STEP(4, 64)
	STEP(8, 128)
	STEP(12, 192)
	ADDQ $16, SI
	ADDQ $16, R11
	ADDQ $256, BX
	DECQ R10
	JNZ  loop4

tail:
	ANDQ $3, CX
	JZ   store

loop1:
	STEP(0, 0)
	ADDQ $4, SI
	ADDQ $4, R11
	ADDQ $64, BX
	DECQ CX
	JNZ  loop1

store:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    R8, DI
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ    R8, DI
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ    R8, DI
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, 32(DI)
	ADDQ    R8, DI
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, 32(DI)
	ADDQ    R8, DI
	VMOVUPS Y10, (DI)
	VMOVUPS Y11, 32(DI)
	VZEROUPPER
	RET
