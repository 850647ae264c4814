//go:build tools

// Package tools pins the MetalLB commands this module builds (the controller and the speaker),
// so that `go build go.universe.tf/metallb/controller` resolves against the versions in go.sum.
package tools

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
