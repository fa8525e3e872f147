package crc32c

// haveFold: the CPU folds with AVX-512 and VPCLMULQDQ and the OS saves
// the ZMM registers. Set once, at package initialisation.
var haveFold = detect()

// fold returns the CRC register after p, starting from crc (the register,
// not its complement, as the CRC32 instruction keeps it). len(p) is at
// least 256 and a multiple of 16. In crc32c_amd64.s.
//
//go:noescape
func fold(crc uint32, p []byte) uint32

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

func detect() bool {
	max, _, _, _ := cpuid(0, 0)
	if max < 7 {
		return false
	}
	_, _, c1, _ := cpuid(1, 0)
	const sse42, pclmul, osxsave = 1 << 20, 1 << 1, 1 << 27
	if c1&sse42 == 0 || c1&pclmul == 0 || c1&osxsave == 0 {
		return false
	}
	// XCR0: SSE, AVX, opmask, and both halves of the ZMM state saved.
	if xcr0, _ := xgetbv(); xcr0&0xe6 != 0xe6 {
		return false
	}
	_, b7, c7, _ := cpuid(7, 0)
	const avx512f, avx512vl, vpclmul = 1 << 16, 1 << 31, 1 << 10
	return b7&avx512f != 0 && b7&avx512vl != 0 && c7&vpclmul != 0
}
