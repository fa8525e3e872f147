package main

import (
	"bufio"
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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvp2p/kvp2p/internal/config"
	"github.com/kvp2p/kvp2p/internal/status"
)

const deployDir = "../../deploy/kubernetes"

// decodeFile decodes every document of a manifest file into the type its
// kind names the way the API server decodes under strict field validation
// (kubectl apply --validate=strict), without its semantic validation: the
// YAML becomes JSON as Kubernetes converts it (sigs.k8s.io/yaml: YAML 1.1
// scalars, so an unquoted yes is a bool; duplicate keys refused), and
// sigs.k8s.io/json, the API machinery's own decoder, refuses unknown and
// duplicate fields and matches field names case-sensitively
// (encoding/json would accept "restartpolicy").
func decodeFile(path string) ([]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []any
	docs := yamlutil.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		js, err := sigsyaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
			continue // an empty document: a stray --- or comments only
		}
		var head metav1.TypeMeta
		if err := json.Unmarshal(js, &head); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var v any
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			v = &corev1.ConfigMap{}
		case "apps/v1 Deployment":
			v = &appsv1.Deployment{}
		case "v1 Service":
			v = &corev1.Service{}
		case "monitoring.coreos.com/v1 PodMonitor":
			v = &k8sPodMonitor{}
		case "kustomize.config.k8s.io/v1beta1 Kustomization":
			v = &k8sKustomization{}
		default:
			return nil, fmt.Errorf("%s: unexpected apiVersion %q kind %q", path, head.APIVersion, head.Kind)
		}
		strict, err := kjson.UnmarshalStrict(js, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err == nil {
			err = errors.Join(strict...)
		}
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", path, head.Kind, err)
		}
		out = append(out, v)
	}
}

// k8sFleet is what deploy/kubernetes holds, decoded.
type k8sFleet struct {
	files []string
	cm    *corev1.ConfigMap
	dep   *appsv1.Deployment
	svc   *corev1.Service // the engines' API, for a router
	peers *corev1.Service // headless: the sidecars' find membership
	pm    *k8sPodMonitor
	kust  *k8sKustomization
}

// decodeFleet decodes every manifest in dir.
func decodeFleet(dir string) (k8sFleet, error) {
	var f k8sFleet
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		return f, fmt.Errorf("no manifests in %s: %v", dir, err)
	}
	for _, p := range paths {
		f.files = append(f.files, filepath.Base(p))
		vs, err := decodeFile(p)
		if err != nil {
			return f, err
		}
		for _, v := range vs {
			switch v := v.(type) {
			case *corev1.ConfigMap:
				f.cm = v
			case *appsv1.Deployment:
				f.dep = v
			case *corev1.Service:
				if v.Spec.ClusterIP == corev1.ClusterIPNone {
					f.peers = v
				} else {
					f.svc = v
				}
			case *k8sPodMonitor:
				f.pm = v
			case *k8sKustomization:
				f.kust = v
			}
		}
	}
	if f.cm == nil || f.dep == nil || f.svc == nil || f.peers == nil || f.pm == nil || f.kust == nil {
		return f, fmt.Errorf("want a ConfigMap, a Deployment, a Service, a headless Service, a PodMonitor and a Kustomization in %s", dir)
	}
	return f, nil
}

func loadFleet(t *testing.T) k8sFleet {
	t.Helper()
	f, err := decodeFleet(deployDir)
	if err != nil {
		t.Fatal(err)
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
func containerEnv(t *testing.T, c corev1.Container, downward map[string]string) map[string]string {
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

func mountOf(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

func portOf(c corev1.Container, name string) int {
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
	labels := dep.Template.Labels
	if dep.Selector == nil {
		t.Fatal("deployment has no selector")
	}
	for k, v := range dep.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("deployment selector %s=%s does not match the pod template", k, v)
		}
	}
	if labels["llm-d.ai/inferenceServing"] != "true" || labels["llm-d.ai/role"] == "" {
		t.Errorf("pod labels %v lack llm-d's conventions", labels)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	dshm := vols["dshm"]
	if dshm.EmptyDir == nil || dshm.EmptyDir.Medium != corev1.StorageMediumMemory || dshm.EmptyDir.SizeLimit == nil {
		t.Fatalf("volume dshm must be a memory-backed emptyDir with a sizeLimit: %+v", dshm)
	}
	if run := vols["kvp2p-run"]; run.EmptyDir == nil {
		t.Fatal("volume kvp2p-run (engine sockets) must be an emptyDir")
	}
	if cmv := vols["kvp2p-config"]; cmv.ConfigMap == nil || cmv.ConfigMap.Name != f.cm.Name {
		t.Fatalf("volume kvp2p-config must mount ConfigMap %s", f.cm.Name)
	}
	confDir := t.TempDir()
	for name, data := range f.cm.Data {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var engines []corev1.Container
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
			if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
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
			cfg, err := config.Load(filepath.Join(confDir, filepath.Base(file)), func(k string) (string, bool) {
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
			// Find's members: every rank's port of the headless Service,
			// and that port is this rank's.
			entry := fmt.Sprintf("%s:%d", f.peers.Name, p2p)
			if !cfg.Find.Enabled || !slices.Contains(strings.Split(strings.ReplaceAll(cfg.Find.DNS, " ", ""), ","), entry) {
				t.Errorf("find (enabled %v, dns %q): want find on with member entry %s", cfg.Find.Enabled, cfg.Find.DNS, entry)
			}
			if !slices.ContainsFunc(f.peers.Spec.Ports, func(sp corev1.ServicePort) bool {
				return int(sp.Port) == p2p && sp.TargetPort == intstr.FromString(fmt.Sprintf("p2p-%d", rank))
			}) {
				t.Errorf("headless Service %s has no port %d targeting p2p-%d", f.peers.Name, p2p, rank)
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
				p    *corev1.Probe
				path string
			}{{"readiness", sc.ReadinessProbe, status.PathReadyz}, {"liveness", sc.LivenessProbe, status.PathHealthz}} {
				if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port != intstr.FromString(metricsName) {
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
			// The image pip-installs python/, whose vllm.general_plugins
			// entry point registers the tier as "kvp2p": no module_path.
			if tier.Type != "kvp2p" || tier.ModulePath != "" || tier.Socket != cfg.Engine.Socket {
				t.Errorf("tier %+v: want type kvp2p (the plugin's entry point, no module_path) on %s", tier, cfg.Engine.Socket)
			}
			if !pluginEntryPoint(t) {
				t.Errorf("python/pyproject.toml declares no vllm.general_plugins entry point kvp2p = \"kvp2p.plugin:register\": type kvp2p would not resolve in the image")
			}
			// cpu_bytes_to_use sizes the region alone: the sidecar takes its
			// geometry from the engine's Register, so a configured one could
			// only disagree with it.
			if cfg.Slots != 0 || cfg.BlockBytes != 0 {
				t.Errorf("kvp2p-config sets slots %d, block_bytes %d: leave both to the engine's Register", cfg.Slots, cfg.BlockBytes)
			}
			regionBytes += kv.Extra.Bytes
		})
	}
	if ann := dep.Template.Annotations; ann["prometheus.io/scrape"] == "true" &&
		(ann["prometheus.io/port"] != strconv.Itoa(metricsBase) || ann["prometheus.io/path"] != status.PathMetrics) {
		t.Errorf("prometheus.io annotations %v: want rank 0's metrics port %d and %s", ann, metricsBase, status.PathMetrics)
	}
	if limit := dshm.EmptyDir.SizeLimit; limit.Value() < int64(regionBytes) {
		t.Errorf("dshm sizeLimit %s is below the ranks' regions (%d bytes)", limit, regionBytes)
	}
	for k, v := range f.peers.Spec.Selector {
		if labels[k] != v {
			t.Errorf("headless Service selector %s=%s does not match the pods", k, v)
		}
	}
	if len(f.peers.Spec.Ports) != len(engines) {
		t.Errorf("headless Service has %d ports for %d ranks", len(f.peers.Spec.Ports), len(engines))
	}
	// The plugin holds lent chunks until its sidecar's process exits, and a
	// sidecar tells a starved engine from a stopped one, only if each sees
	// the other's processes.
	if pod.ShareProcessNamespace == nil || !*pod.ShareProcessNamespace {
		t.Error("shareProcessNamespace must be true: the sidecars and engines read each other's processes")
	}
	for _, p := range f.svc.Spec.Ports {
		found := false
		for _, e := range engines {
			if p.TargetPort.Type == intstr.String {
				found = found || portOf(e, p.TargetPort.StrVal) > 0
			} else {
				found = found || slices.ContainsFunc(e.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == p.TargetPort.IntVal })
			}
		}
		if !found {
			t.Errorf("service port %s targets %s, which no vLLM container has", p.Name, p.TargetPort.String())
		}
	}
}

// TestKubernetesManifestTypos: a copy of deploy/kubernetes with one
// mistake in one file fails the decoding TestKubernetesManifests relies
// on, and the error names the file and the field. The unchanged copy
// decodes, so each failure is the mistake's.
func TestKubernetesManifestTypos(t *testing.T) {
	// insertAfter adds line (indented like it) after the first line
	// matching re.
	insertAfter := func(re, line string) func(string) string {
		return func(s string) string {
			loc := regexp.MustCompile(`(?m)^( *)` + re + `.*\n`).FindStringSubmatchIndex(s)
			if loc == nil {
				return s
			}
			return s[:loc[1]] + s[loc[2]:loc[3]] + line + "\n" + s[loc[1]:]
		}
	}
	replace := func(old, new string) func(string) string {
		return func(s string) string { return strings.Replace(s, old, new, 1) }
	}
	for _, tc := range []struct {
		name, file string
		mutate     func(string) string
		want       string
	}{
		{"unknown field in a sidecar", "vllm-kvp2p.yaml",
			insertAfter(`image: ghcr.io/kvp2p/`, "imagePullPolicyy: IfNotPresent"), `unknown field "spec.template.spec.initContainers[0].imagePullPolicyy"`},
		{"unknown field in an engine", "vllm-kvp2p.yaml",
			insertAfter(`image: ghcr.io/kvp2p/vllm-openai`, "imagePullPolicyy: IfNotPresent"), `unknown field "spec.template.spec.containers[0].imagePullPolicyy"`},
		{"field name in the wrong case", "vllm-kvp2p.yaml",
			replace("restartPolicy: Always", "restartpolicy: Always"), `unknown field "spec.template.spec.initContainers[0].restartpolicy"`},
		{"unknown field in a volume", "vllm-kvp2p.yaml",
			replace("medium: Memory", "medum: Memory"), `unknown field "spec.template.spec.volumes[0].emptyDir.medum"`},
		{"duplicate field", "vllm-kvp2p.yaml",
			insertAfter(`restartPolicy: Always`, "restartPolicy: Always"), `key "restartPolicy" already set in map`},
		{"wrong type", "vllm-kvp2p.yaml",
			replace("containerPort: 7600", `containerPort: "7600"`), `cannot unmarshal string into Go struct field ContainerPort.spec.template.spec.initContainers.ports.containerPort of type int32`},
		{"YAML 1.1 boolean for a string", "vllm-kvp2p.yaml",
			replace("value: /run/kvp2p/rank-0.sock", "value: yes"), `cannot unmarshal bool into Go struct field EnvVar.spec.template.spec.initContainers.env.value of type string`},
		{"unknown field in the Service", "service.yaml",
			replace("targetPort: http-0", "targetPrt: http-0"), `unknown field "spec.ports[0].targetPrt"`},
		{"unknown field in the ConfigMap", "configmap.yaml",
			replace("\ndata:", "\ndat:"), `unknown field "dat"`},
		{"unknown field in the PodMonitor", "podmonitor.yaml",
			replace("interval: 15s", "intervall: 15s"), `unknown field "spec.podMetricsEndpoints[0].intervall"`},
		{"unknown field in the Kustomization", "kustomization.yaml",
			replace("resources:", "resource:"), `unknown field "resource"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyManifests(t)
			if _, err := decodeFleet(dir); err != nil {
				t.Fatalf("the unchanged copy: %v", err)
			}
			path := filepath.Join(dir, tc.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bad := tc.mutate(string(b))
			if bad == string(b) {
				t.Fatalf("the mutation did not apply to %s: update the test", tc.file)
			}
			if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = decodeFleet(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
				t.Fatalf("decoded with the mistake, or the error does not name %s and %q: %v", tc.file, tc.want, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// copyManifests copies deploy/kubernetes into a temp dir.
func copyManifests(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	paths, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// pluginEntryPoint reports whether python/pyproject.toml registers the vLLM
// plugin that makes {"type": "kvp2p"} resolve.
func pluginEntryPoint(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "python", "pyproject.toml"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "[project.entry-points.\"vllm.general_plugins\"]")
	if !ok {
		return false
	}
	section, _, _ := strings.Cut(after, "\n[")
	return strings.Contains(section, `kvp2p = "kvp2p.plugin:register"`)
}
