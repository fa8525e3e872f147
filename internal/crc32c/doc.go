// Package crc32c is CRC32C (Castagnoli), the checksum of every chunk on a
// data connection, with the same values as hash/crc32's Castagnoli table.
//
// Why not hash/crc32 alone: its amd64 code sums with the SSE4.2 CRC32
// instruction, three streams at a time. On a CPU with AVX-512 and
// VPCLMULQDQ this package folds 256 bytes per step with carry-less
// multiplies instead (crc32c_amd64.s), several times as fast on large
// buffers; the consumer checks every chunk it receives and Put sums every
// block it stores, so on a 2-core machine the sums were a tenth of a
// load's CPU. Everywhere else, and for short buffers, it is hash/crc32.
package crc32c
