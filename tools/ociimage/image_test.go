package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p"
)

// image is what checkLayout read back from a layout.
type image struct {
	ref    string // io.containerd.image.name
	config imageConfig
	files  map[string]*tar.Header
	binary []byte // /kvp2p
}

// checkLayout follows a layout from index.json to the layer as a runtime
// would, checking every digest and size on the way, and returns the image.
func checkLayout(t *testing.T, l Layout) image {
	t.Helper()
	if got := string(l["oci-layout"]); !strings.Contains(got, `"imageLayoutVersion":"1.0.0"`) {
		t.Fatalf("oci-layout %q", got)
	}
	blob := func(d descriptor, mediaType string) []byte {
		t.Helper()
		if d.MediaType != mediaType {
			t.Fatalf("descriptor %s has media type %q, want %q", d.Digest, d.MediaType, mediaType)
		}
		b, ok := l["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			t.Fatalf("no blob %s", d.Digest)
		}
		if digest(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s: digest %s, %d bytes, want %d", d.Digest, digest(b), len(b), d.Size)
		}
		return b
	}
	var idx index
	if err := json.Unmarshal(l["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != mediaIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %+v", idx)
	}
	var img image
	img.ref = idx.Manifests[0].Annotations["io.containerd.image.name"]
	var man manifest
	if err := json.Unmarshal(blob(idx.Manifests[0], mediaManifest), &man); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(blob(man.Config, mediaConfig), &img.config); err != nil {
		t.Fatal(err)
	}
	if len(man.Layers) != 1 || len(img.config.RootFS.DiffIDs) != 1 {
		t.Fatalf("want one layer: %+v, %+v", man.Layers, img.config.RootFS)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(man.Layers[0], mediaLayer)))
	if err != nil {
		t.Fatal(err)
	}
	layerTar, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if digest(layerTar) != img.config.RootFS.DiffIDs[0] {
		t.Fatalf("layer's diff id %s, config says %s", digest(layerTar), img.config.RootFS.DiffIDs[0])
	}
	img.files = map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(layerTar))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		img.files[h.Name] = h
		if h.Name == "kvp2p" {
			if img.binary, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	return img
}

// checkRunConfig: how the image runs, as deploy/kubernetes expects it.
func checkRunConfig(t *testing.T, img image, version string) {
	t.Helper()
	c := img.config.Config
	if !reflect.DeepEqual(c.Entrypoint, []string{"/kvp2p"}) || !reflect.DeepEqual(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q, cmd %q", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q: want the unprivileged 65532:65532", c.User)
	}
	if _, ok := c.ExposedPorts["7600/tcp"]; !ok || len(c.ExposedPorts) != 2 {
		t.Errorf("exposed ports %v: want 7600/tcp and 9464/tcp", c.ExposedPorts)
	}
	if _, ok := c.ExposedPorts["9464/tcp"]; !ok {
		t.Errorf("exposed ports %v: want 9464/tcp", c.ExposedPorts)
	}
	if c.Labels["org.opencontainers.image.version"] != version || img.config.OS != "linux" {
		t.Errorf("labels %v, os %q", c.Labels, img.config.OS)
	}
	if h := img.files["kvp2p"]; h == nil || h.Mode&0o111 == 0 || h.Uid != 0 {
		t.Errorf("/kvp2p missing or not executable: %+v", h)
	}
	if h := img.files["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("/tmp missing or not world-writable and sticky: %+v", h)
	}
}

// TestBuildLayout: a layout whose digests, sizes and config check out,
// and the same bytes for the same inputs.
func TestBuildLayout(t *testing.T) {
	s := Spec{Binary: []byte("\x7fELF not really"), Repo: "example.com/kvp2p", Version: "9.8.7", Arch: "amd64",
		User: "65532:65532", Ports: []string{"7600/tcp", "9464/tcp"}, Cmd: []string{"serve"}, Created: time.Unix(0, 0)}
	l, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	img := checkLayout(t, l)
	checkRunConfig(t, img, "9.8.7")
	if img.ref != "example.com/kvp2p:9.8.7" || !bytes.Equal(img.binary, s.Binary) {
		t.Errorf("ref %q, binary %q", img.ref, img.binary)
	}
	again, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l, again) {
		t.Error("two builds of the same spec differ")
	}
	for _, bad := range []Spec{{}, {Binary: s.Binary, Repo: "r", Version: "1", Arch: "amd64", User: "nobody"}} {
		if _, err := Build(bad); err == nil {
			t.Errorf("Build(%+v): no error", bad)
		}
	}
}

// TestBuildImageScript runs scripts/build-image.sh, the one command that
// builds the image, and checks its archive as far as this machine allows
// (no container runtime here): its config, and that the binary in it is
// static and runs `kvp2p version` with kvp2p.Version.
func TestBuildImageScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kvp2p")
	}
	dist := t.TempDir()
	cmd := exec.Command("scripts/build-image.sh")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "DIST="+dist, "GOARCH=amd64", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-image.sh: %v\n%s", err, out)
	}
	archive := filepath.Join(dist, "kvp2p-"+kvp2p.Version+"-amd64.oci.tar")
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := Layout{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if l[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	img := checkLayout(t, l)
	checkRunConfig(t, img, kvp2p.Version)
	if img.ref != "ghcr.io/kvp2p/kvp2p:"+kvp2p.Version {
		t.Errorf("image name %q", img.ref)
	}
	bin := filepath.Join(t.TempDir(), "kvp2p")
	if err := os.WriteFile(bin, img.binary, 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a dynamic loader: not static, it cannot run on an empty base")
		}
	}
	ef.Close()
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("kvp2p version in the image: %v", err)
	}
	if !strings.HasPrefix(string(out), "kvp2p "+kvp2p.Version+" (") {
		t.Errorf("kvp2p version printed %q", out)
	}
}
