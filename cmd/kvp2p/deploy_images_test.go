package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/kvp2p/kvp2p"
)

// TestKubernetesImages: the manifests run the images this repository
// builds, at this version: the kvp2p image scripts/build-image.sh names,
// and the vLLM image deploy/vllm/Dockerfile builds (stock vLLM plus the
// plugin), tagged with the vLLM release it starts from and kvp2p's version.
func TestKubernetesImages(t *testing.T) {
	script, err := os.ReadFile("../../scripts/build-image.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`repo=\$\{IMAGE_REPO:-([^}]+)\}`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/build-image.sh names no default IMAGE_REPO")
	}
	wantKVP2P := string(m[1]) + ":" + kvp2p.Version

	dockerfile, err := os.ReadFile("../../deploy/vllm/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	base := regexp.MustCompile(`(?m)^ARG VLLM_IMAGE=vllm/vllm-openai:(\S+)$`).FindSubmatch(dockerfile)
	if base == nil {
		t.Fatal("deploy/vllm/Dockerfile: no ARG VLLM_IMAGE=vllm/vllm-openai:TAG")
	}
	if !regexp.MustCompile(`(?m)^FROM \$\{VLLM_IMAGE\}$`).Match(dockerfile) {
		t.Error("deploy/vllm/Dockerfile does not build FROM ${VLLM_IMAGE}")
	}
	wantVLLM := "ghcr.io/kvp2p/vllm-openai-kvp2p:" + string(base[1]) + "-" + kvp2p.Version
	if !strings.Contains(string(dockerfile), "-t "+wantVLLM+" .") {
		t.Errorf("deploy/vllm/Dockerfile's build command does not tag %s", wantVLLM)
	}

	pod := loadFleet(t).dep.Spec.Template.Spec
	if len(pod.InitContainers) == 0 || len(pod.Containers) == 0 {
		t.Fatal("no sidecars or no engines")
	}
	for _, c := range pod.InitContainers {
		if c.Image != wantKVP2P {
			t.Errorf("sidecar %s runs %q, want %q (scripts/build-image.sh)", c.Name, c.Image, wantKVP2P)
		}
		if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
			t.Errorf("sidecar %s may escalate privileges", c.Name)
		}
	}
	for _, c := range pod.Containers {
		if c.Image != wantVLLM {
			t.Errorf("engine %s runs %q, want %q (deploy/vllm/Dockerfile): stock vLLM lacks the plugin", c.Name, c.Image, wantVLLM)
		}
	}
}
