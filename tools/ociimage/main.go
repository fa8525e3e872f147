// Command ociimage writes kvp2p's container image without a container
// daemon or a registry: an OCI image layout (and an OCI archive of it) whose
// one layer holds a static kvp2p binary. scripts/build-image.sh runs it;
// the archive loads with `docker load`, `podman load` or
// `skopeo copy oci-archive:FILE DEST`.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	bin := fs.String("binary", "", "the static kvp2p `file` to install as /kvp2p")
	repo := fs.String("repo", "ghcr.io/kvp2p/kvp2p", "the image's `name`, without the tag")
	version := fs.String("version", "", "the tag: kvp2p's version")
	arch := fs.String("arch", runtime.GOARCH, "the binary's GOARCH")
	dir := fs.String("out", "", "write the OCI layout to this new `directory`")
	archive := fs.String("archive", "", "also write it as an OCI archive to this `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" || *version == "" || *dir == "" {
		return fmt.Errorf("-binary, -version and -out are required")
	}
	b, err := os.ReadFile(*bin)
	if err != nil {
		return err
	}
	// SOURCE_DATE_EPOCH (reproducible-builds.org) fixes the timestamps;
	// without it they are the epoch, so the image depends only on its inputs.
	created := time.Unix(0, 0).UTC()
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", v, err)
		}
		created = time.Unix(sec, 0).UTC()
	}
	l, err := Build(Spec{Binary: b, Repo: *repo, Version: *version, Arch: *arch, User: "65532:65532",
		Ports: []string{"7600/tcp", "9464/tcp"}, Cmd: []string{"serve"}, Created: created})
	if err != nil {
		return err
	}
	if err := l.WriteDir(*dir); err != nil {
		return err
	}
	if *archive != "" {
		return l.WriteArchive(*archive, created)
	}
	return nil
}
