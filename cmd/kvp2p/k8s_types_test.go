package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The two kinds deploy/kubernetes uses that k8s.io/api does not define:
// the Prometheus Operator's PodMonitor and kustomize's Kustomization.
// These hold only the fields the manifests use, under their upstream JSON
// names, and are decoded as strictly as the k8s.io/api kinds: a field that
// is not here, a misspelt one or a wrong type fails the test. A field the
// manifests start to use must be added here, by its upstream name.
// (Their upstream Go modules would bring in prometheus-operator and
// kustomize for two small structs.)

// k8sPodMonitor is monitoring.coreos.com/v1 PodMonitor (the subset used).
type k8sPodMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// k8sKustomization is kustomize.config.k8s.io/v1beta1 Kustomization (the
// subset used).
type k8sKustomization struct {
	metav1.TypeMeta `json:",inline"`
	Resources       []string `json:"resources"`
}
