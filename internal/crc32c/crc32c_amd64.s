#include "textflag.h"

// Fold constants for CRC32C, reflected. Folding 16 bytes A forward by D
// bytes: A.lo*k1 ^ A.hi*k2 (carry-less), where k1 = x^(8D+32) mod P and
// k2 = x^(8D-32) mod P, each bit-reflected and shifted left by one.
// Each pair is one 128-bit lane: k1 in the low quadword.

// D = 256: four ZMM registers, 256 bytes per step.
DATA k256<>+0(SB)/8, $0xdcb17aa4
DATA k256<>+8(SB)/8, $0xb9e02b86
GLOBL k256<>(SB), RODATA, $16

// D = 64: one ZMM register onto the next.
DATA k64<>+0(SB)/8, $0x740eef02
DATA k64<>+8(SB)/8, $0x9e4addf8
GLOBL k64<>(SB), RODATA, $16

// The four lanes of one ZMM register onto its last: D = 48, 32, 16, and 0
// for the last lane itself (zero: it is added as it is).
DATA klanes<>+0(SB)/8, $0x1c291d04
DATA klanes<>+8(SB)/8, $0x1d82c63da
DATA klanes<>+16(SB)/8, $0x1384aa63a
DATA klanes<>+24(SB)/8, $0xba4fc28e
DATA klanes<>+32(SB)/8, $0xf20c0dfe
DATA klanes<>+40(SB)/8, $0x14cd00bd6
DATA klanes<>+48(SB)/8, $0
DATA klanes<>+56(SB)/8, $0
GLOBL klanes<>(SB), RODATA, $64

// func fold(crc uint32, p []byte) uint32
TEXT ·fold(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

	VBROADCASTI32X4 k256<>(SB), Z10
	VBROADCASTI32X4 k64<>(SB), Z11
	VMOVDQU64 klanes<>(SB), Z12

	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVD AX, X4
	VPXORQ Z4, Z0, Z0 // the register goes into the first 4 bytes
	ADDQ $256, SI
	SUBQ $256, CX

loop256:
	CMPQ CX, $256
	JB   merge
	VPCLMULQDQ $0x00, Z10, Z0, Z4
	VPCLMULQDQ $0x11, Z10, Z0, Z0
	VPTERNLOGD $0x96, 0(SI), Z4, Z0
	VPCLMULQDQ $0x00, Z10, Z1, Z5
	VPCLMULQDQ $0x11, Z10, Z1, Z1
	VPTERNLOGD $0x96, 64(SI), Z5, Z1
	VPCLMULQDQ $0x00, Z10, Z2, Z6
	VPCLMULQDQ $0x11, Z10, Z2, Z2
	VPTERNLOGD $0x96, 128(SI), Z6, Z2
	VPCLMULQDQ $0x00, Z10, Z3, Z7
	VPCLMULQDQ $0x11, Z10, Z3, Z3
	VPTERNLOGD $0x96, 192(SI), Z7, Z3
	ADDQ $256, SI
	SUBQ $256, CX
	JMP  loop256

merge:
	// Z0 onto Z1 onto Z2 onto Z3, 64 bytes apart.
	VPCLMULQDQ $0x00, Z11, Z0, Z4
	VPCLMULQDQ $0x11, Z11, Z0, Z5
	VPTERNLOGD $0x96, Z4, Z5, Z1
	VPCLMULQDQ $0x00, Z11, Z1, Z4
	VPCLMULQDQ $0x11, Z11, Z1, Z5
	VPTERNLOGD $0x96, Z4, Z5, Z2
	VPCLMULQDQ $0x00, Z11, Z2, Z4
	VPCLMULQDQ $0x11, Z11, Z2, Z5
	VPTERNLOGD $0x96, Z4, Z5, Z3

loop64:
	CMPQ CX, $64
	JB   lanes
	VPCLMULQDQ $0x00, Z11, Z3, Z4
	VPCLMULQDQ $0x11, Z11, Z3, Z3
	VPTERNLOGD $0x96, 0(SI), Z4, Z3
	ADDQ $64, SI
	SUBQ $64, CX
	JMP  loop64

lanes:
	// Lanes 0-2 folded onto lane 3.
	VPCLMULQDQ $0x00, Z12, Z3, Z4
	VPCLMULQDQ $0x11, Z12, Z3, Z5
	VPXORQ Z5, Z4, Z4
	VEXTRACTI32X4 $3, Z3, X0
	VEXTRACTI32X4 $1, Z4, X5
	VEXTRACTI32X4 $2, Z4, X6
	VPXOR X4, X0, X0
	VPXOR X5, X0, X0
	VPXOR X6, X0, X0
	VMOVDQU klanes<>+32(SB), X13 // D = 16

loop16:
	CMPQ CX, $16
	JB   done
	VPCLMULQDQ $0x00, X13, X0, X4
	VPCLMULQDQ $0x11, X13, X0, X0
	VPXOR X4, X0, X0
	VPXOR 0(SI), X0, X0
	ADDQ $16, SI
	SUBQ $16, CX
	JMP  loop16

done:
	// The 16 bytes left are congruent to all of p: their CRC is p's.
	VMOVQ X0, BX
	VPEXTRQ $1, X0, DX
	XORL AX, AX
	CRC32Q BX, AX
	CRC32Q DX, AX
	VZEROUPPER
	MOVL AX, ret+32(FP)
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
