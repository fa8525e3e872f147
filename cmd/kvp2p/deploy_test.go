package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kvp2p/kvp2p/internal/status"
)

const deployDir = "../../deploy/kubernetes"

// decodeStrict decodes every document of a manifest file strictly into the
// type its kind names.
func decodeStrict(t *testing.T, path string) []any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var node yaml.Node
		if err := dec.Decode(&node); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var head struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
		}
		if err := node.Decode(&head); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var v any
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			v = &k8sConfigMap{}
		case "apps/v1 Deployment":
			v = &k8sDeployment{}
		case "v1 Service":
			v = &k8sService{}
		case "monitoring.coreos.com/v1 PodMonitor":
			v = &k8sPodMonitor{}
		case "kustomize.config.k8s.io/v1beta1 Kustomization":
			v = &k8sKustomization{}
		default:
			t.Fatalf("%s: unexpected %s %s", path, head.APIVersion, head.Kind)
		}
		// Node.Decode cannot refuse unknown fields: re-encode, and decode
		// with a strict decoder.
		raw, err := yaml.Marshal(&node)
		if err != nil {
			t.Fatal(err)
		}
		strict := yaml.NewDecoder(bytes.NewReader(raw))
		strict.KnownFields(true)
		if err := strict.Decode(v); err != nil {
			t.Fatalf("%s (%s): %v", path, head.Kind, err)
		}
		out = append(out, v)
	}
}

// k8sFleet is what deploy/kubernetes holds, decoded.
type k8sFleet struct {
	files []string
	cm    *k8sConfigMap
	dep   *k8sDeployment
	svc   *k8sService
	pm    *k8sPodMonitor
	kust  *k8sKustomization
}

func loadFleet(t *testing.T) k8sFleet {
	t.Helper()
	var f k8sFleet
	paths, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	for _, p := range paths {
		f.files = append(f.files, filepath.Base(p))
		for _, v := range decodeStrict(t, p) {
			switch v := v.(type) {
			case *k8sConfigMap:
				f.cm = v
			case *k8sDeployment:
				f.dep = v
			case *k8sService:
				f.svc = v
			case *k8sPodMonitor:
				f.pm = v
			case *k8sKustomization:
				f.kust = v
			}
		}
	}
	if f.cm == nil || f.dep == nil || f.svc == nil || f.pm == nil || f.kust == nil {
		t.Fatalf("want a ConfigMap, a Deployment, a Service, a PodMonitor and a Kustomization in %s", deployDir)
	}
	return f
}

// expand does what the kubelet does to $(VAR) in env values and args:
// variables defined earlier (env order) are replaced; others stay.
func expand(s string, env map[string]string) string {
	return regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// containerEnv resolves c's env as the kubelet would in a pod with the
// given downward-API values.
func containerEnv(t *testing.T, c k8sContainer, downward map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v, ok := downward[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("%s: env %s from an unexpected field %q", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		case e.ValueFrom != nil:
			t.Fatalf("%s: env %s: unexpected valueFrom", c.Name, e.Name)
		default:
			if strings.Contains(expand(e.Value, env), "$(") {
				t.Fatalf("%s: env %s = %q refers to a variable not defined above it", c.Name, e.Name, e.Value)
			}
			env[e.Name] = expand(e.Value, env)
		}
	}
	return env
}

func mountOf(c k8sContainer, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

func portOf(c k8sContainer, name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	return -1
}

func portNum(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return n
}

// quantity parses the binary-suffixed sizes the manifests use (20Gi).
func quantity(t *testing.T, s string) int64 {
	t.Helper()
	for suffix, mul := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", s, err)
			}
			return v * mul
		}
	}
	t.Fatalf("quantity %q: want a Ki/Mi/Gi/Ti size", s)
	return 0
}

// TestKubernetesManifests decodes deploy/kubernetes strictly and checks
// that its parts agree: each DP rank's sidecar, as `kvp2p serve` would
// configure itself from the ConfigMap and its env, listens where its ports
// say, takes its peer id from the pod IP and its failure domain from the
// pod UID, serves the probes' endpoints, and shares its engine socket and
// /dev/shm with its vLLM container, whose tier config names that socket
// and the region size kvp2p expects.
func TestKubernetesManifests(t *testing.T) {
	f := loadFleet(t)
	slices.Sort(f.files)
	listed := slices.Clone(f.kust.Resources)
	listed = append(listed, "kustomization.yaml")
	slices.Sort(listed)
	if !slices.Equal(listed, f.files) {
		t.Errorf("kustomization lists %v; the directory holds %v", f.kust.Resources, f.files)
	}

	dep := f.dep.Spec
	pod := dep.Template.Spec
	labels := dep.Template.Metadata.Labels
	for k, v := range dep.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("deployment selector %s=%s does not match the pod template", k, v)
		}
	}
	if labels["llm-d.ai/inferenceServing"] != "true" || labels["llm-d.ai/role"] == "" {
		t.Errorf("pod labels %v lack llm-d's conventions", labels)
	}
	vols := map[string]k8sVolume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	dshm := vols["dshm"]
	if dshm.EmptyDir == nil || dshm.EmptyDir.Medium != "Memory" {
		t.Fatalf("volume dshm must be a memory-backed emptyDir: %+v", dshm)
	}
	if run := vols["kvp2p-run"]; run.EmptyDir == nil {
		t.Fatal("volume kvp2p-run (engine sockets) must be an emptyDir")
	}
	if cmv := vols["kvp2p-config"]; cmv.ConfigMap == nil || cmv.ConfigMap.Name != f.cm.Metadata.Name {
		t.Fatalf("volume kvp2p-config must mount ConfigMap %s", f.cm.Metadata.Name)
	}
	confDir := t.TempDir()
	for name, data := range f.cm.Data {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var engines []k8sContainer
	for _, c := range pod.Containers {
		if strings.HasPrefix(c.Name, "vllm-rank-") {
			engines = append(engines, c)
		}
	}
	if len(engines) == 0 || len(pod.InitContainers) != len(engines) {
		t.Fatalf("%d vLLM rank containers and %d sidecars: want one sidecar per rank", len(engines), len(pod.InitContainers))
	}
	downward := map[string]string{"status.podIP": "10.1.2.3", "metadata.uid": "6f0c-pod-uid"}
	var p2pBase, metricsBase, regionBytes int
	monitored := map[string]bool{}
	for _, e := range f.pm.Spec.PodMetricsEndpoints {
		if e.Path != status.PathMetrics {
			t.Errorf("PodMonitor scrapes %s on %s, want %s", e.Path, e.Port, status.PathMetrics)
		}
		monitored[e.Port] = true
	}
	for k, v := range f.pm.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("PodMonitor selector %s=%s does not match the pods", k, v)
		}
	}

	for rank, eng := range engines {
		sc := pod.InitContainers[rank]
		t.Run(sc.Name, func(t *testing.T) {
			if sc.Name != fmt.Sprintf("kvp2p-rank-%d", rank) || eng.Name != fmt.Sprintf("vllm-rank-%d", rank) {
				t.Fatalf("rank %d: containers %s and %s", rank, sc.Name, eng.Name)
			}
			if sc.RestartPolicy == nil || *sc.RestartPolicy != "Always" {
				t.Error("not a native sidecar: restartPolicy must be Always")
			}
			// The config as `kvp2p serve` loads it in this container.
			if len(sc.Args) < 3 || sc.Args[0] != "serve" || sc.Args[1] != "--config" {
				t.Fatalf("args %v: want serve --config FILE", sc.Args)
			}
			file := sc.Args[2]
			if dir := mountOf(sc, "kvp2p-config"); dir == "" || filepath.Dir(file) != dir {
				t.Fatalf("--config %s is not in the kvp2p-config mount (%q)", file, dir)
			}
			env := containerEnv(t, sc, downward)
			cfg, err := loadConfig(filepath.Join(confDir, filepath.Base(file)), func(k string) (string, bool) {
				v, ok := env[k]
				return v, ok
			}, nil)
			if err != nil {
				t.Fatalf("kvp2p serve would refuse this config: %v", err)
			}
			if h, _, _ := net.SplitHostPort(cfg.PeerID); h != downward["status.podIP"] {
				t.Errorf("peer_id %s: want the pod IP", cfg.PeerID)
			}
			if cfg.FailureDomain != downward["metadata.uid"] {
				t.Errorf("failure_domain %q: want the pod UID", cfg.FailureDomain)
			}
			p2p, metricsPort := portNum(t, cfg.PeerID), portNum(t, cfg.MetricsAddr)
			if rank == 0 {
				p2pBase, metricsBase = p2p, metricsPort
			}
			if p2p != p2pBase+rank || metricsPort != metricsBase+rank {
				t.Errorf("ports %d, %d: want base + rank (%d + %d, %d + %d)", p2p, metricsPort, p2pBase, rank, metricsBase, rank)
			}
			if portNum(t, cfg.Listen) != p2p {
				t.Errorf("listen %s and peer_id %s differ in port", cfg.Listen, cfg.PeerID)
			}
			if got := portOf(sc, fmt.Sprintf("p2p-%d", rank)); got != p2p {
				t.Errorf("containerPort p2p-%d = %d, want %d", rank, got, p2p)
			}
			metricsName := fmt.Sprintf("metrics-%d", rank)
			if got := portOf(sc, metricsName); got != metricsPort {
				t.Errorf("containerPort %s = %d, want %d", metricsName, got, metricsPort)
			}
			if !monitored[metricsName] {
				t.Errorf("PodMonitor does not scrape %s", metricsName)
			}
			for _, pr := range []struct {
				name string
				p    *k8sProbe
				path string
			}{{"readiness", sc.ReadinessProbe, status.PathReadyz}, {"liveness", sc.LivenessProbe, status.PathHealthz}} {
				if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port != metricsName {
					t.Errorf("%s probe: want GET %s on %s", pr.name, pr.path, metricsName)
				}
			}
			// The engine side: the same socket, the same /dev/shm, the
			// region kvp2p expects.
			if !cfg.Engine.Enabled() || !strings.HasPrefix(cfg.Engine.Socket, "/") {
				t.Fatalf("engine.socket %q: want a Unix socket path", cfg.Engine.Socket)
			}
			sockDir := filepath.Dir(cfg.Engine.Socket)
			if mountOf(sc, "kvp2p-run") != sockDir || mountOf(eng, "kvp2p-run") != sockDir {
				t.Errorf("kvp2p-run must be mounted at %s in both containers", sockDir)
			}
			if mountOf(sc, "dshm") != "/dev/shm" || mountOf(eng, "dshm") != "/dev/shm" {
				t.Error("dshm must be mounted at /dev/shm in both containers")
			}
			if rd := cfg.Engine.RegionDir; rd != "" && rd != "/dev/shm" {
				t.Errorf("engine.region_dir %s: vLLM's region is in /dev/shm", rd)
			}
			engEnv := containerEnv(t, eng, downward)
			if engEnv["PYTHONHASHSEED"] != "0" {
				t.Error("vLLM container: PYTHONHASHSEED must be 0 (block hashes agree across the fleet)")
			}
			args := make([]string, len(eng.Args))
			for i, a := range eng.Args {
				args[i] = expand(a, engEnv)
			}
			flag := func(name string) string {
				i := slices.Index(args, name)
				if i < 0 || i+1 >= len(args) {
					t.Fatalf("vLLM args lack %s", name)
				}
				return args[i+1]
			}
			if flag("--data-parallel-rank") != strconv.Itoa(rank) || flag("--data-parallel-size") != strconv.Itoa(len(engines)) {
				t.Errorf("vLLM DP rank/size %s/%s, want %d/%d", flag("--data-parallel-rank"), flag("--data-parallel-size"), rank, len(engines))
			}
			if port, _ := strconv.Atoi(flag("--port")); portOf(eng, fmt.Sprintf("http-%d", rank)) != port {
				t.Errorf("vLLM --port %d has no containerPort http-%d", port, rank)
			}
			var kv struct {
				Connector string `json:"kv_connector"`
				Role      string `json:"kv_role"`
				Extra     struct {
					Spec  string `json:"spec_name"`
					Bytes int    `json:"cpu_bytes_to_use"`
					Tiers []struct {
						Type       string `json:"type"`
						ModulePath string `json:"module_path"`
						Socket     string `json:"socket"`
					} `json:"secondary_tiers"`
				} `json:"kv_connector_extra_config"`
			}
			dec := json.NewDecoder(strings.NewReader(flag("--kv-transfer-config")))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&kv); err != nil {
				t.Fatalf("--kv-transfer-config: %v", err)
			}
			if kv.Connector != "OffloadingConnector" || kv.Role != "kv_both" || kv.Extra.Spec != "TieringOffloadingSpec" || len(kv.Extra.Tiers) != 1 {
				t.Fatalf("--kv-transfer-config %+v: want the OffloadingConnector's tiering spec with one secondary tier", kv)
			}
			tier := kv.Extra.Tiers[0]
			if tier.Type != "Kvp2pTier" || tier.ModulePath != "kvp2p.vllm" || tier.Socket != cfg.Engine.Socket {
				t.Errorf("tier %+v: want Kvp2pTier from kvp2p.vllm on %s", tier, cfg.Engine.Socket)
			}
			if kv.Extra.Bytes != cfg.Slots*cfg.BlockBytes {
				t.Errorf("cpu_bytes_to_use %d != slots x block_bytes (%d x %d)", kv.Extra.Bytes, cfg.Slots, cfg.BlockBytes)
			}
			regionBytes += kv.Extra.Bytes
		})
	}
	if ann := dep.Template.Metadata.Annotations; ann["prometheus.io/scrape"] == "true" &&
		(ann["prometheus.io/port"] != strconv.Itoa(metricsBase) || ann["prometheus.io/path"] != status.PathMetrics) {
		t.Errorf("prometheus.io annotations %v: want rank 0's metrics port %d and %s", ann, metricsBase, status.PathMetrics)
	}
	if limit := quantity(t, dshm.EmptyDir.SizeLimit); limit < int64(regionBytes) {
		t.Errorf("dshm sizeLimit %s is below the ranks' regions (%d bytes)", dshm.EmptyDir.SizeLimit, regionBytes)
	}
	for _, p := range f.svc.Spec.Ports {
		found := false
		for _, e := range engines {
			found = found || portOf(e, p.TargetPort) > 0
		}
		if !found {
			t.Errorf("service port %s targets %s, which no vLLM container has", p.Name, p.TargetPort)
		}
	}
}

// TestManifestDecodeIsStrict: a misspelt field fails the decoding that
// TestKubernetesManifests relies on.
func TestManifestDecodeIsStrict(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "vllm-kvp2p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "restartPolicy: Always", "restartPolcy: Always", 1)
	var d k8sDeployment
	dec := yaml.NewDecoder(strings.NewReader(bad))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err == nil || !strings.Contains(err.Error(), "restartPolcy") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}
