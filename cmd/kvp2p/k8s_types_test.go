package main

// The subset of the Kubernetes API (k8s.io/api core/v1, apps/v1) and the
// Prometheus Operator's PodMonitor that deploy/kubernetes uses, with the
// API's own field names. Manifests are decoded strictly into these: a
// field that is not here, a misspelt one or a wrong type fails the test.
// A field the manifests start to use must be added here, by its API name.
// (k8s.io/api itself is not a dependency of this module.)

type k8sMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type k8sHeader struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`
}

type k8sConfigMap struct {
	k8sHeader `yaml:",inline"`
	Data      map[string]string `yaml:"data"`
}

type k8sSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type k8sDeployment struct {
	k8sHeader `yaml:",inline"`
	Spec      struct {
		Replicas *int32      `yaml:"replicas"`
		Selector k8sSelector `yaml:"selector"`
		Template struct {
			Metadata k8sMeta    `yaml:"metadata"`
			Spec     k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sPodSpec struct {
	TerminationGracePeriodSeconds *int64         `yaml:"terminationGracePeriodSeconds"`
	InitContainers                []k8sContainer `yaml:"initContainers"`
	Containers                    []k8sContainer `yaml:"containers"`
	Volumes                       []k8sVolume    `yaml:"volumes"`
}

type k8sContainer struct {
	Name           string           `yaml:"name"`
	Image          string           `yaml:"image"`
	Command        []string         `yaml:"command"`
	Args           []string         `yaml:"args"`
	RestartPolicy  *string          `yaml:"restartPolicy"`
	Env            []k8sEnvVar      `yaml:"env"`
	Ports          []k8sPort        `yaml:"ports"`
	ReadinessProbe *k8sProbe        `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe        `yaml:"livenessProbe"`
	StartupProbe   *k8sProbe        `yaml:"startupProbe"`
	VolumeMounts   []k8sVolumeMount `yaml:"volumeMounts"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type k8sEnvVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			APIVersion string `yaml:"apiVersion"`
			FieldPath  string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type k8sPort struct {
	Name          string `yaml:"name"`
	ContainerPort int32  `yaml:"containerPort"`
	Protocol      string `yaml:"protocol"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"` // IntOrString: the manifests name their ports
	} `yaml:"httpGet"`
	InitialDelaySeconds int32 `yaml:"initialDelaySeconds"`
	PeriodSeconds       int32 `yaml:"periodSeconds"`
	TimeoutSeconds      int32 `yaml:"timeoutSeconds"`
	FailureThreshold    int32 `yaml:"failureThreshold"`
}

type k8sVolumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type k8sVolume struct {
	Name     string `yaml:"name"`
	EmptyDir *struct {
		Medium    string `yaml:"medium"`
		SizeLimit string `yaml:"sizeLimit"`
	} `yaml:"emptyDir"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

type k8sService struct {
	k8sHeader `yaml:",inline"`
	Spec      struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int32  `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sPodMonitor struct {
	k8sHeader `yaml:",inline"`
	Spec      struct {
		Selector            k8sSelector `yaml:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `yaml:"port"`
			Path     string `yaml:"path"`
			Interval string `yaml:"interval"`
		} `yaml:"podMetricsEndpoints"`
	} `yaml:"spec"`
}

type k8sKustomization struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
}
