//go:build tools

// Package tools pins the frr-k8s command this module builds (its daemon), so that
// `go build github.com/metallb/frr-k8s/cmd/frr-k8s-controller` resolves against go.sum.
package tools

import (
	_ "github.com/metallb/frr-k8s/cmd/frr-k8s-controller"
)
