package region

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func makeFile(t *testing.T, dir string, size int) string {
	t.Helper()
	p := filepath.Join(dir, "r.mmap")
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenSharesBytesWithTheFile(t *testing.T) {
	dir := t.TempDir()
	p := makeFile(t, dir, 4*64)
	r, err := Open(p, dir, Geometry{NumChunks: 4, RowStride: 64})
	if err != nil {
		t.Fatal(err)
	}
	copy(r.Chunk(2), bytes.Repeat([]byte{7}, 64))
	if got := len(r.Chunk(3)); got != 64 || cap(r.Chunk(3)) != 64 {
		t.Fatalf("chunk len %d cap %d", got, cap(r.Chunk(3)))
	}
	// A second mapping of the same file (the engine's) sees the write.
	r2, err := Open(p, dir, Geometry{NumChunks: 4, RowStride: 64})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r2.Chunk(2), bytes.Repeat([]byte{7}, 64)) || r2.Chunk(1)[0] != 0 {
		t.Fatal("the second mapping does not see the first one's write")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	p := makeFile(t, dir, 100)
	other := t.TempDir()
	outside := makeFile(t, other, 1024)
	link := filepath.Join(dir, "link.mmap")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		path string
		geo  Geometry
		is   error
	}{
		{"too small", p, Geometry{NumChunks: 2, RowStride: 64}, nil},
		{"zero chunks", p, Geometry{NumChunks: 0, RowStride: 64}, nil},
		{"overflow", p, Geometry{NumChunks: 1 << 40, RowStride: 1 << 40}, nil},
		{"outside", outside, Geometry{NumChunks: 1, RowStride: 64}, ErrOutside},
		{"symlink out", link, Geometry{NumChunks: 1, RowStride: 64}, ErrOutside},
		{"relative", "r.mmap", Geometry{NumChunks: 1, RowStride: 64}, nil},
		{"missing", filepath.Join(dir, "nope"), Geometry{NumChunks: 1, RowStride: 64}, nil},
		{"directory", dir, Geometry{NumChunks: 1, RowStride: 64}, ErrOutside},
	}
	for _, c := range cases {
		r, err := Open(c.path, dir, c.geo)
		if err == nil {
			r.Close()
			t.Errorf("%s: opened", c.name)
			continue
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		}
	}
}

// After Revoke, kvp2p's writes no longer reach the engine's memory, while
// kvp2p still reads what the engine writes, and nothing faults.
func TestRevokeCutsWritesOff(t *testing.T) {
	dir := t.TempDir()
	p := makeFile(t, dir, 4*4096)
	geo := Geometry{NumChunks: 4, RowStride: 4096}
	kv, err := Open(p, dir, geo) // kvp2p's mapping
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	eng, err := Open(p, dir, geo) // the engine's
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	copy(kv.Chunk(1), bytes.Repeat([]byte{1}, 4096))
	chunk := kv.Chunk(1) // a data-path goroutine holds this slice across the revoke
	if err := kv.Revoke(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kv.Chunk(1), eng.Chunk(1)) {
		t.Fatal("after revoke, kvp2p does not read the engine's bytes")
	}
	copy(chunk, bytes.Repeat([]byte{9}, 4096)) // a late peer write
	if eng.Chunk(1)[0] != 1 {
		t.Fatalf("a write after revoke reached the engine's region: %d", eng.Chunk(1)[0])
	}
	copy(eng.Chunk(2), bytes.Repeat([]byte{5}, 4096)) // the engine reuses a chunk
	if kv.Chunk(2)[0] != 5 {
		t.Fatal("after revoke, kvp2p does not see the engine's new bytes")
	}
	if err := kv.Revoke(); err != nil { // idempotent
		t.Fatal(err)
	}
}

// The open after resolving never follows a link: a component that became a
// symbolic link since it was resolved (the race a world-writable /dev/shm
// allows) fails the open instead of leading outside the directory; a FIFO
// planted at the path is refused without hanging.
func TestOpenBeneathFollowsNoLink(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	makeFile(t, filepath.Join(dir, "sub"), 64)
	f, err := openBeneath(dir, filepath.Join("sub", "r.mmap"))
	if err != nil {
		t.Fatalf("plain path: %v", err)
	}
	f.Close()

	outside := makeFile(t, other, 64)
	if err := os.Symlink(outside, filepath.Join(dir, "swapped.mmap")); err != nil {
		t.Fatal(err)
	}
	if f, err := openBeneath(dir, "swapped.mmap"); err == nil {
		f.Close()
		t.Fatal("opened a file that is a symbolic link")
	}
	// A directory on the way swapped for a link to another directory.
	if err := os.RemoveAll(filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if f, err := openBeneath(dir, filepath.Join("sub", "r.mmap")); err == nil {
		f.Close()
		t.Fatal("opened through a directory that is a symbolic link")
	}

	fifo := filepath.Join(dir, "fifo.mmap")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(fifo, dir, Geometry{NumChunks: 1, RowStride: 64}); err == nil {
		t.Fatal("a FIFO was mapped")
	}
}
