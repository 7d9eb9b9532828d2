#!/usr/bin/env bash
# Build kube-apiserver, kube-scheduler and kube-controller-manager v1.20.2 from Debian bookworm's `kubernetes`
# source package, for the real-apiserver tests (see tests/kube/binaries.py, which calls this).
#
#   usage: build-k8s-binaries.sh OUTPUT_DIR
#
# Needs apt-get (run as root, or with sudo available), about 3 GB of disk and 1.5 GB of RAM; takes 10-15 minutes
# on two cores. The work tree is a temporary directory unless PORTAL_K8S_BUILD_DIR names one to keep.
#
# Why each step: Debian builds only kubectl from this source package, but the package carries the whole upstream
# tree with vendor/, so `make WHAT=...` builds the servers offline. The vendored modern-go/reflect2 1.0.1 crashes
# on every POST/PATCH/PUT under Go >= 1.18, so it is replaced by Debian's reflect2 1.0.2 before building.
set -euo pipefail

out_dir=${1:?usage: $0 OUTPUT_DIR}
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "error: apt-get needs root; run as root or install sudo" >&2; exit 1; }
    sudo=sudo
fi

step() { printf '\n==> %s\n' "$*"; }

# 1. A deb-src entry mirroring every Debian `deb` entry already configured (deb822 .sources and one-line lists).
src_list=/etc/apt/sources.list.d/gpu-portal-debian-src.sources
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    step "adding deb-src entries ($src_list)"
    tmp_list=$(mktemp)
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -e "$f" ] || continue
        # Keep the stanzas that point at Debian archives, switched to source packages.
        awk 'BEGIN { RS=""; ORS="\n\n" } /URIs:[^\n]*debian/ { sub(/Types:[^\n]*/, "Types: deb-src"); print }' \
            "$f" >>"$tmp_list"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -e "$f" ] || continue
        grep -E '^deb [^#]*debian' "$f" | sed -E 's/^deb /deb-src /' >>"$tmp_list.oneline" || true
    done
    if [ -s "$tmp_list.oneline" ]; then
        $sudo cp "$tmp_list.oneline" /etc/apt/sources.list.d/gpu-portal-debian-src.list
    fi
    if [ -s "$tmp_list" ]; then
        $sudo cp "$tmp_list" "$src_list"
    fi
    rm -f "$tmp_list" "$tmp_list.oneline"
fi

step "installing the toolchain (golang-go, etcd-server, reflect2 1.0.2, build tools)"
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    golang-go etcd-server golang-github-modern-go-reflect2-dev dpkg-dev rsync jq make openssl curl xz-utils

build_root=${PORTAL_K8S_BUILD_DIR:-}
if [ -z "$build_root" ]; then
    build_root=$(mktemp -d)
    trap 'rm -rf "$build_root"' EXIT
fi
mkdir -p "$build_root"
cd "$build_root"

step "fetching Debian's kubernetes source package into $build_root"
apt-get source kubernetes
src_dir=$(find . -maxdepth 1 -type d -name 'kubernetes-*' | head -n 1)
[ -n "$src_dir" ] || { echo "error: apt-get source kubernetes left no kubernetes-* directory" >&2; exit 1; }
case "$src_dir" in
    *1.20.2*) ;;
    *) echo "error: expected the 1.20.2 tree, got $src_dir; update tests/kube/binaries.py if Debian moved on" >&2
       exit 1 ;;
esac
cd "$src_dir"

step "replacing vendored modern-go/reflect2 1.0.1 with Debian's 1.0.2 (Go >= 1.18 crash fix)"
reflect2_src=/usr/share/gocode/src/github.com/modern-go/reflect2/
[ -d "$reflect2_src" ] || { echo "error: $reflect2_src missing (golang-github-modern-go-reflect2-dev)" >&2; exit 1; }
rsync -a --delete --exclude BUILD --exclude go.mod --exclude '*_test.go' \
    "$reflect2_src" vendor/github.com/modern-go/reflect2/

step "building (make WHAT=cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager)"
export CGO_ENABLED=0 GOPROXY=off GOCACHE="$build_root/go-build-cache"
export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean
make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager" GOLDFLAGS="-s -w"

step "installing into $out_dir"
for name in kube-apiserver kube-scheduler kube-controller-manager; do
    install -m 0755 "_output/bin/$name" "$out_dir/$name"
done
"$out_dir/kube-apiserver" --version
