package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Media types of the OCI image spec (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Spec is what goes into the image: one static binary as the entrypoint,
// run as an unprivileged user, on an otherwise empty filesystem.
type Spec struct {
	Binary  []byte   // the static executable, installed as /kvp2p
	Repo    string   // e.g. ghcr.io/kvp2p/kvp2p
	Version string   // the tag, and the image's version label
	Arch    string   // GOARCH of the binary
	User    string   // uid:gid
	Ports   []string // exposed, e.g. 7600/tcp
	Cmd     []string // default arguments to the entrypoint
	Created time.Time
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// imageConfig is the OCI image configuration (the parts kvp2p sets).
type imageConfig struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       runConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	} `json:"history"`
}

type runConfig struct {
	User         string              `json:"User"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint"`
	Cmd          []string            `json:"Cmd"`
	WorkingDir   string              `json:"WorkingDir"`
	Labels       map[string]string   `json:"Labels"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// Layout is an OCI image layout: file paths (oci-layout, index.json,
// blobs/sha256/...) to their content.
type Layout map[string][]byte

// Build makes the image's layout. Everything in it is a function of the
// spec (fixed timestamps and owners, sorted entries), so the same binary
// gives the same digests.
func Build(s Spec) (Layout, error) {
	if len(s.Binary) == 0 || s.Repo == "" || s.Version == "" || s.Arch == "" {
		return nil, fmt.Errorf("ociimage: binary, repo, version and arch are required")
	}
	l := Layout{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}` + "\n")}
	layerTar, err := rootfs(s)
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.ModTime = s.Created
	if _, err := zw.Write(layerTar); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	layer := l.add(mediaLayer, gz.Bytes())

	created := s.Created.UTC().Format(time.RFC3339)
	cfg := imageConfig{Created: created, Architecture: s.Arch, OS: "linux", Config: runConfig{
		User: s.User, ExposedPorts: map[string]struct{}{}, Env: []string{"PATH=/"},
		Entrypoint: []string{"/kvp2p"}, Cmd: s.Cmd, WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "kvp2p",
			"org.opencontainers.image.version":  s.Version,
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.source":   "https://github.com/kvp2p/kvp2p",
		},
	}}
	for _, p := range s.Ports {
		cfg.Config.ExposedPorts[p] = struct{}{}
	}
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{digest(layerTar)}
	cfg.History = append(cfg.History, struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	}{created, "scripts/build-image.sh: /kvp2p, a static binary"})
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	config := l.add(mediaConfig, cfgJSON)

	man, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: config, Layers: []descriptor{layer}})
	if err != nil {
		return nil, err
	}
	md := l.add(mediaManifest, man)
	md.Platform = &platform{Architecture: s.Arch, OS: "linux"}
	// ref.name is the tag within the layout (skopeo's oci:DIR:TAG);
	// io.containerd.image.name is the full name docker load and containerd
	// give the image.
	md.Annotations = map[string]string{
		"org.opencontainers.image.ref.name": s.Version,
		"io.containerd.image.name":          s.Repo + ":" + s.Version,
	}
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{md}})
	if err != nil {
		return nil, err
	}
	l["index.json"] = idx
	return l, nil
}

// add stores b as a blob and returns its descriptor.
func (l Layout) add(mediaType string, b []byte) descriptor {
	d := digest(b)
	l["blobs/sha256/"+d[len("sha256:"):]] = b
	return descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// rootfs is the image's one layer: the binary, a writable /tmp, and
// passwd/group files naming the unprivileged user, so that tools inside
// and beside the container show a name rather than a bare uid.
func rootfs(s Spec) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	var uid, gid int
	if _, err := fmt.Sscanf(s.User, "%d:%d", &uid, &gid); err != nil {
		return nil, fmt.Errorf("ociimage: user %q: want uid:gid", s.User)
	}
	entries := []struct {
		name string
		mode int64
		dir  bool
		body []byte
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:\nkvp2p:x:%d:\n", gid)},
		{name: "etc/passwd", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:0:root:/:/sbin/nologin\nkvp2p:x:%d:%d:kvp2p:/:/sbin/nologin\n", uid, gid)},
		{name: "kvp2p", mode: 0o755, body: s.Binary},
		{name: "tmp/", mode: 0o1777, dir: true},
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: s.Created, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteDir writes the layout under dir (which must not exist yet, so that
// no blob of an earlier image is left in it).
func (l Layout) WriteDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("ociimage: %s exists", dir)
	}
	for _, name := range l.names() {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, l[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteArchive writes the layout as one tar file: an OCI archive, what
// `docker load`, `podman load` and `skopeo copy oci-archive:FILE` read.
func (l Layout) WriteArchive(path string, mtime time.Time) error {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dirs := map[string]bool{}
	for _, name := range l.names() {
		for d := filepath.Dir(name); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var ds []string
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	for _, d := range ds {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
			return err
		}
	}
	for _, name := range l.names() {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(l[name])), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := tw.Write(l[name]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func (l Layout) names() []string {
	var ns []string
	for n := range l {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}
