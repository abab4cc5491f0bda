//go:build tools

// Package tools pins sigs.k8s.io/kwok (Kubernetes WithOut Kubelet) so that
// infra/kube/kube.sh builds its controller from the Go module proxy like the
// control plane: go build sigs.k8s.io/kwok/cmd/kwok in this module.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
