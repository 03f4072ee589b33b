#!/usr/bin/env bash
# Builds the node's Kubernetes layer: the folder the node agent
# (test/nodeagent) lays over the node image (image.sh) for every machine,
# with what a node's packages would install besides Debian's containerd and
# runc: kubelet and kubeadm, the CNI plugins in /opt/cni/bin, containerd's
# configuration, the boot scripts that start containerd and the kubelet as
# their systemd units would, and the images kubeadm's static Pods and its
# kube-proxy and CoreDNS addons run (every image `kubeadm config images
# list` names; the script fails when one is not given), named as this
# kubeadm expects, plus the route agent's (test/tools/routeagent: the pod
# network's DaemonSet) and this project's cloud controller manager's
# (./ccm), so that nothing is pulled. Everything comes from this
# repository's build (CoreDNS from test/tools/coredns, its Go module with
# the plugins of kubeadm's Corefile):
#
#   kubelayer.sh OUTDIR KUBEADM KUBELET KUBE-APISERVER KUBE-CONTROLLER-MANAGER KUBE-SCHEDULER ETCD PAUSE KUBE-PROXY CNI-BIN-DIR ROUTEAGENT CCM COREDNS
#
# Each image is one uncompressed layer (a compressed one only costs time
# here): the binary in /usr/local/bin, the C library it is linked against,
# in the docker-archive form `ctr images import` reads. The build takes
# seconds.
set -euo pipefail

usage='usage: kubelayer.sh OUTDIR KUBEADM KUBELET KUBE-APISERVER KUBE-CONTROLLER-MANAGER KUBE-SCHEDULER ETCD PAUSE KUBE-PROXY CNI-BIN-DIR ROUTEAGENT CCM COREDNS'
out=${1:?$usage} kubeadm=$2 kubelet=$3 cni=${10:?$usage} routeagent=${11:?$usage} ccm=${12:?$usage}
declare -A binary=([kube-apiserver]=$4 [kube-controller-manager]=$5 [kube-scheduler]=$6 [etcd]=$7 [pause]=$8 [kube-proxy]=$9 [coredns]=${13:?$usage})
# The route agent's image: the test's DaemonSet names it, never pulled.
routeagent_ref=localhost/routeagent:test
# The cloud controller manager's: test/workload's flavor names it.
ccm_ref=localhost/metal-vrf-ccm:test

work="$(mktemp -d "${out%/}.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/usr/local/bin" "$root/usr/local/lib/nodeagent/boot.d" "$root/usr/local/lib/nodeagent/images" "$root/etc/containerd"
cp "$kubeadm" "$kubelet" "$root/usr/local/bin/"

mkdir -p "$root/opt/cni/bin"
for plugin in bridge host-local loopback portmap; do
  cp "$cni/$plugin" "$root/opt/cni/bin/"
done

# image NAME REF ENTRYPOINT SRC=DST... writes the image REF, with each
# host file (or folder, or symbolic link) SRC at DST and the libraries the
# binaries are linked against, to the layer's images/NAME.tar.
image() {
  local name=$1 ref=$2 entrypoint=$3 img="$work/img-$1" spec src dst lib diff config
  shift 3
  mkdir -p "$img/layer"
  for spec in "$@"; do
    src=${spec%%=*} dst=${spec#*=}
    mkdir -p "$img/layer$(dirname "$dst")"
    cp -a "$src" "$img/layer$dst"
    # The dynamic loader and libraries a binary needs (cgo: the C library),
    # or any file of a folder: iptables' extensions load theirs when a rule
    # uses them (libxt_statistic.so, for a Service of several endpoints,
    # needs libm).
    while IFS= read -r file; do
      for lib in $(ldd "$file" 2>/dev/null | grep -o '/[^ ]*'); do
        mkdir -p "$img/layer$(dirname "$lib")"
        cp -L "$lib" "$img/layer$lib"
      done
    done < <(find "$src" -type f)
  done
  tar -C "$img/layer" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$img/layer.tar" .
  diff="$(sha256sum "$img/layer.tar" | cut -d' ' -f1)"
  jq -cn --argjson ep "$entrypoint" --arg diff "sha256:$diff" '{architecture: "amd64", os: "linux",
    config: {Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], Entrypoint: $ep, WorkingDir: "/"},
    rootfs: {type: "layers", diff_ids: [$diff]}}' >"$img/config.json"
  config="$(sha256sum "$img/config.json" | cut -d' ' -f1)"
  mkdir -p "$img/archive/$diff"
  mv "$img/layer.tar" "$img/archive/$diff/layer.tar"
  mv "$img/config.json" "$img/archive/$config.json"
  jq -cn --arg config "$config.json" --arg ref "$ref" --arg layer "$diff/layer.tar" \
    '[{Config: $config, RepoTags: [$ref], Layers: [$layer]}]' >"$img/archive/manifest.json"
  tar -C "$img/archive" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -cf "$root/usr/local/lib/nodeagent/images/$name.tar" .
  rm -rf "$img"
}

# kube-proxy programs the node's iptables through the iptables commands:
# its image has this host's (the nftables backend, which the node image's
# Debian defaults to too) with their extensions.
[ -x /usr/sbin/xtables-nft-multi ] || { echo "kube-proxy's image needs this host's iptables (apt-get install iptables)" >&2; exit 1; }
iptables=(/usr/sbin/xtables-nft-multi=/usr/sbin/xtables-nft-multi
  /usr/lib/x86_64-linux-gnu/xtables=/usr/lib/x86_64-linux-gnu/xtables)
for cmd in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  ln -s xtables-nft-multi "$work/$cmd"
  iptables+=("$work/$cmd=/usr/sbin/$cmd")
done

# The version kubeadm deploys is its own; its image list names the tags.
version="$("$kubeadm" version -o short)"
sandbox=
while read -r ref; do
  repo=${ref%:*} name=${repo##*/}
  bin=${binary[$name]:-}
  [ -n "$bin" ] || { echo "kubeadm $version lists $ref, which this script does not build" >&2; exit 1; }
  dst=/usr/local/bin/$name extra=()
  case $name in
  pause)
    sandbox=$ref dst=/pause ;;
  etcd)
    # kubeadm passes etcd the flags of the version it names.
    want=${ref##*:} want=${want%-*} got="$("$bin" --version | sed -n 's/^etcd Version: //p')"
    [ "$got" = "$want" ] || { echo "$bin is etcd $got; kubeadm $version runs etcd $want" >&2; exit 1; } ;;
  kube-proxy)
    extra=("${iptables[@]}") ;;
  coredns)
    # The upstream image's entrypoint: kubeadm's Deployment gives only
    # args (-conf /etc/coredns/Corefile). Its version is the one kubeadm
    # lists, as etcd's.
    dst=/coredns got="$("$bin" -version | sed -n 's/^CoreDNS-//p')"
    [ "v$got" = "${ref##*:}" ] || { echo "$bin is CoreDNS $got; kubeadm $version runs ${ref##*:}" >&2; exit 1; } ;;
  esac
  image "$name" "$ref" "[\"$dst\"]" "$bin=$dst" "${extra[@]}"
done < <("$kubeadm" config images list --kubernetes-version "$version")
for name in "${!binary[@]}"; do
  [ -f "$root/usr/local/lib/nodeagent/images/$name.tar" ] || { echo "kubeadm $version lists no image for $name" >&2; exit 1; }
done
image routeagent "$routeagent_ref" '["/usr/local/bin/routeagent"]' "$routeagent=/usr/local/bin/routeagent"
image metal-vrf-ccm "$ccm_ref" '["/metal-vrf-ccm"]' "$ccm=/metal-vrf-ccm"

# Only what differs from containerd 1.6's defaults, as test/cluster's node:
# kubeadm's sandbox image, no oom_score_adj below containerd's own (no
# CAP_SYS_RESOURCE here) and the native snapshotter (the machine's root is
# an overlay, which overlayfs cannot take as an upper layer).
cat >"$root/etc/containerd/config.toml" <<TOML
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
TOML

# The node agent runs these, in order, before cloud-init: what the
# containerd and kubelet units (the latter with kubeadm's drop-in) do.
cat >"$root/usr/local/lib/nodeagent/boot.d/10-containerd" <<'SH'
#!/bin/sh
# containerd.service, then the images imported (a node's would be pulled).
set -eu
sysctl -qw net.ipv4.ip_forward=1
containerd >>/var/log/containerd.log 2>&1 &
for _ in $(seq 600); do
  ctr version >/dev/null 2>&1 && break
  sleep 0.1
done
for image in /usr/local/lib/nodeagent/images/*.tar; do
  ctr -n k8s.io images import --no-unpack "$image" >/dev/null
done
SH
cat >"$root/usr/local/lib/nodeagent/boot.d/20-kubelet" <<'SH'
#!/bin/sh
# kubelet.service with kubeadm's drop-in (10-kubeadm.conf): once kubeadm
# wrote its configuration, the kubelet runs, with kubeadm's flags and the
# node's own (/etc/default/kubelet: CAPP's --node-ip), restarted when it
# exits.
(
  while :; do
    if [ -f /var/lib/kubelet/config.yaml ]; then
      KUBELET_KUBEADM_ARGS= KUBELET_EXTRA_ARGS=
      [ -f /var/lib/kubelet/kubeadm-flags.env ] && . /var/lib/kubelet/kubeadm-flags.env
      [ -f /etc/default/kubelet ] && . /etc/default/kubelet
      # shellcheck disable=SC2086 # the variables hold several flags
      kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
        --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
        $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
    fi
    sleep 1
  done
) >>/var/log/kubelet.log 2>&1 &
SH
chmod 0755 "$root/usr/local/lib/nodeagent/boot.d"/*

rm -rf "$out"
mv "$root" "$out"
