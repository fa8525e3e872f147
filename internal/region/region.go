package region

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// Geometry is a region's layout.
type Geometry struct {
	NumChunks uint64
	RowStride uint64 // bytes per chunk
}

// Size is the region's length in bytes.
func (g Geometry) Size() (int, error) {
	if g.NumChunks == 0 || g.RowStride == 0 {
		return 0, fmt.Errorf("region: %d chunks of %d bytes", g.NumChunks, g.RowStride)
	}
	const maxSize = 1 << 46 // 64 TiB: beyond any host's memory, and far from overflow
	if g.NumChunks > maxSize/g.RowStride {
		return 0, fmt.Errorf("region: %d chunks of %d bytes is too large", g.NumChunks, g.RowStride)
	}
	return int(g.NumChunks * g.RowStride), nil
}

// Region is one mapped region.
type Region struct {
	path   string
	geo    Geometry
	mem    []byte
	stride int
	f      *os.File // kept open for Revoke

	// mu orders Revoke and Close, which may come from different
	// goroutines (an engine's stream ending as the node stops): a Revoke
	// after Close would map over memory that is no longer the region's.
	mu     sync.Mutex
	closed bool
}

// ErrOutside is returned for a path outside the allowed directory.
var ErrOutside = errors.New("region: path outside the allowed directory")

// Open maps the region file at path, which must lie inside dir (after
// resolving symbolic links) and be a regular file of at least geo's size.
func Open(path, dir string, geo Geometry) (*Region, error) {
	size, err := geo.Size()
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("region: path %q is not absolute", path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("region: %w", err)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("region: allowed directory: %w", err)
	}
	rel, err := filepath.Rel(realDir, real)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("%w: %s is not inside %s", ErrOutside, path, dir)
	}
	f, err := openBeneath(realDir, rel)
	if err != nil {
		return nil, fmt.Errorf("region: %s: %w", path, err)
	}
	fail := func(err error) (*Region, error) {
		f.Close()
		return nil, err
	}
	fi, err := f.Stat() // fstat: the file opened, not whatever the path names now
	if err != nil {
		return fail(fmt.Errorf("region: %w", err))
	}
	if !fi.Mode().IsRegular() {
		return fail(fmt.Errorf("region: %s is not a regular file", path))
	}
	if fi.Size() < int64(size) {
		return fail(fmt.Errorf("region: %s is %d bytes, the layout needs %d (%d chunks of %d)", path, fi.Size(), size, geo.NumChunks, geo.RowStride))
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("region: mmap %s: %w", path, err))
	}
	return &Region{path: path, geo: geo, mem: mem, stride: int(geo.RowStride), f: f}, nil
}

// openBeneath opens dir/rel read-write without following a symbolic link
// in rel: each component is opened relative to the one before with
// O_NOFOLLOW. rel was resolved from the engine's path a moment earlier; a
// component swapped for a link since (a race in a world-writable /dev/shm)
// fails here with ELOOP or ENOTDIR instead of leading outside dir.
func openBeneath(dir, rel string) (*os.File, error) {
	const flags = syscall.O_CLOEXEC | syscall.O_NOFOLLOW | syscall.O_NOCTTY
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|flags, 0)
	if err != nil {
		return nil, fmt.Errorf("allowed directory: %w", err)
	}
	parts := strings.Split(rel, string(filepath.Separator))
	for i, p := range parts {
		mode := syscall.O_RDONLY | syscall.O_DIRECTORY
		if i == len(parts)-1 {
			// O_NONBLOCK: a FIFO planted at the path does not hang the
			// open; fstat then refuses it as not a regular file.
			mode = syscall.O_RDWR | syscall.O_NONBLOCK
		}
		next, err := syscall.Openat(fd, p, mode|flags, 0)
		syscall.Close(fd)
		if err != nil {
			if errors.Is(err, syscall.ELOOP) {
				return nil, fmt.Errorf("%s is a symbolic link now (it was not when resolved): %w", p, err)
			}
			return nil, err
		}
		fd = next
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, rel)), nil
}

// Revoke cuts kvp2p's writes off from the engine's memory, at once and
// from every goroutine: the span is remapped, at the same address, as a
// private copy-on-write mapping of the same file. Reads still see the
// engine's bytes; a write from here on (a peer's chunk still arriving for
// a load the engine has given up on) lands in a private copy and never in
// the engine's region. Chunk keeps working; nothing faults. The node
// revokes a region as soon as its engine is gone, because the engine
// reuses the chunks of failed loads at once.
func (r *Region) Revoke() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(r.mem)))
	_, _, errno := syscall.Syscall6(syscall.SYS_MMAP, addr, uintptr(len(r.mem)),
		syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_FIXED, r.f.Fd(), 0)
	if errno != 0 {
		return fmt.Errorf("region: revoke %s: %w", r.path, errno)
	}
	return nil
}

// Path is the file the region maps.
func (r *Region) Path() string { return r.path }

// Geometry is the region's layout.
func (r *Region) Geometry() Geometry { return r.geo }

// Chunk returns chunk b's bytes, capped so an append cannot spill into the
// next chunk. It panics if b is out of range.
func (r *Region) Chunk(b uint32) []byte {
	off := int(b) * r.stride
	end := off + r.stride
	return r.mem[off:end:end]
}

// Close unmaps the region. See the package doc for when that is allowed.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	err := syscall.Munmap(r.mem)
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}
