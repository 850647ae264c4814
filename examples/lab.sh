#!/usr/bin/env bash
# FerroLB's lab: the whole system on one machine, in network namespaces. Builds the workspace's
# binaries, then runs `ferrolb-lab` as root: three nodes on a bridge, a BIRD (or FRR) router,
# two clients, the test API server loaded with examples/lab/*.yaml, the real controller and one
# real speaker per node. It prints each Service's address, owner and routes, who answers each
# client, and a measured failover, then removes everything.
#
#   ./examples/lab.sh                 report and failover, then clean up
#   ./examples/lab.sh --router frr    FRR instead of BIRD
#   ./examples/lab.sh --keep          leave it running; prints kubectl and shell hints
#   ./examples/lab.sh --down          remove a lab left running or crashed
#   ./examples/lab.sh --apiserver real   on a real kube-apiserver + etcd (built once by
#                                            scripts/realkube from Go modules; needs Go)
#   ./examples/lab.sh --kube-proxy iptables   the real kube-proxy (iptables, nftables or ipvs
#                                            mode; scripts/realkube) and backends in Pod
#                                            namespaces, on the real API server
#   ./examples/lab.sh --cluster real   real nodes: kubelet and containerd per node, FerroLB
#                                            installed by Helm from its images (scripts/images,
#                                            scripts/realkube; Debian's containerd, runc and
#                                            containernetworking-plugins)
#   ./examples/lab.sh --system metallb  the same lab with MetalLB v0.16.2 (scripts/metallb)
#
# Needs Debian's iproute2 iputils-arping ndisc6 bird2 (or frr); the lab names what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(-p ferrolb-controller -p ferrolb-speaker -p ferrolb-tests)
lab=target/debug/ferrolb-lab

build() {
  if command -v cargo >/dev/null 2>&1; then
    cargo build --quiet --bins "${packages[@]}"
  elif [ -n "${SUDO_USER:-}" ] && sudo -u "$SUDO_USER" bash -lc 'command -v cargo' >/dev/null 2>&1; then
    # sudo drops the user's PATH: build as that user, with their toolchain.
    sudo -u "$SUDO_USER" bash -lc "cd '$PWD' && cargo build --quiet --bins ${packages[*]}"
  elif [ -x "$lab" ]; then
    echo "lab.sh: cargo not found; using the binaries already in target/debug" >&2
  else
    echo "lab.sh: cargo not found: install Rust (https://rustup.rs), or build first with cargo build --bins" >&2
    exit 1
  fi
}

if [ "${1:-}" = "--down" ] && [ -x "$lab" ]; then
  :
else
  build
fi
case " $* " in
  *" --apiserver real "* | *" --apiserver=real "* | *" --kube-proxy "* | *" --kube-proxy="*)
    scripts/realkube >/dev/null ;;
esac
# Real nodes run FerroLB's own images (a release build, a few minutes the first time).
case " $* " in
  *" --cluster real "* | *" --cluster=real "*) scripts/realkube >/dev/null && scripts/images >/dev/null ;;
esac
# MetalLB's lab runs on the real API server, with MetalLB built from the module proxy.
case " $* " in
  *" --system metallb "* | *" --system=metallb "*) scripts/realkube >/dev/null && scripts/metallb >/dev/null ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo "$lab" "$@"
  fi
  echo "lab.sh: run as root: the lab creates network namespaces (no sudo here)" >&2
  exit 1
fi
exec "$lab" "$@"
