package region

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	if rel, err := filepath.Rel(realDir, real); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("%w: %s is not inside %s", ErrOutside, path, dir)
	}
	f, err := os.OpenFile(real, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("region: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("region: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("region: %s is not a regular file", path)
	}
	if fi.Size() < int64(size) {
		return nil, fmt.Errorf("region: %s is %d bytes, the layout needs %d (%d chunks of %d)", path, fi.Size(), size, geo.NumChunks, geo.RowStride)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("region: mmap %s: %w", path, err)
	}
	return &Region{path: path, geo: geo, mem: mem, stride: int(geo.RowStride)}, nil
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
	if r.mem == nil {
		return nil
	}
	err := syscall.Munmap(r.mem)
	r.mem = nil
	return err
}
