#!/usr/bin/env bash
# Builds the Debian bookworm node image the node boot test (test/node) boots
# under qemu: a root filesystem laid out like an Equinix Metal server's
# (bond0 enslaving eth0 and eth1, a static address), with cloud-init reading
# a NoCloud seed, and a probe that records the node's network state once
# cloud-init is done. Writes OUT/rootfs.img (ext4, raw), OUT/vmlinuz and
# OUT/initrd.img. Needs root, debootstrap and e2fsprogs; everything comes from
# Debian's packages.
set -euo pipefail

out=${1:?usage: image.sh OUTDIR}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

work="$(mktemp -d "${out%/}.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"

# python3-cffi-backend is listed because debootstrap does not resolve the
# virtual package python3-cryptography depends on (python3-cffi-backend-api).
# containerd, runc, iptables and conntrack are the node's runtime and what
# kubeadm's preflight and kube-proxy look for: Debian's, as on the host's
# one-node cluster; kubelet, kubeadm and the control plane's images come
# from this repository's build (kubelayer.sh), a layer of their own.
debootstrap --variant=minbase \
  --include=systemd-sysv,udev,cloud-init,ifupdown,vlan,ifenslave,iproute2,curl,jq,ethtool,kmod,linux-image-amd64,ca-certificates,netbase,python3-cffi-backend,containerd,runc,iptables,conntrack \
  bookworm "$root" "$mirror"

echo node >"$root/etc/hostname"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
printf '/dev/vda / ext4 defaults 0 1\n' >"$root/etc/fstab"

# Equinix Metal's layout: both NICs enslaved to bond0, which carries the
# server's address. active-backup rather than the platform's 802.3ad: qemu's
# user-mode network answers no LACP. The guest's default route leads nowhere:
# qemu runs it with restrict=on.
cat >"$root/etc/network/interfaces" <<'IFACES'
auto lo
iface lo inet loopback

auto eth0
iface eth0 inet manual
    bond-master bond0

auto eth1
iface eth1 inet manual
    bond-master bond0

auto bond0
iface bond0 inet static
    address 10.0.2.15/24
    gateway 10.0.2.2
    bond-slaves eth0 eth1
    bond-mode active-backup
    bond-primary eth0
    bond-miimon 100

source /etc/network/interfaces.d/*
IFACES

# cloud-init reads the seed the test writes into /var/lib/cloud/seed/nocloud
# and leaves the network to the image, as on the platform.
cat >"$root/etc/cloud/cloud.cfg.d/90_dpkg.cfg" <<'CFG'
datasource_list: [ NoCloud, None ]
CFG
cat >"$root/etc/cloud/cloud.cfg.d/99_node_test.cfg" <<'CFG'
network: {config: disabled}
CFG

# The probe: once cloud-init is done, it writes the network state as JSON to
# /var/lib/node-probe/boot.json, for the test to read back from the disk.
# With node-probe.rerun=PATH on the kernel command line it then runs PATH
# again, keeping its output and exit status, and writes the state afterwards
# to rerun.json. Then it powers the VM off.
cat >"$root/usr/local/sbin/node-probe" <<'PROBE'
#!/bin/bash
set -uo pipefail
dir=/var/lib/node-probe
mkdir -p "$dir"
rm -f "$dir"/*

snapshot() {
  local files=()
  mapfile -t files < <(find /etc/network /etc/default/kubelet -type f 2>/dev/null | sort)
  jq -n \
    --argjson link "$(ip -j -d link show)" \
    --argjson addr "$(ip -j addr show)" \
    --argjson route4 "$(ip -j -4 route show)" \
    --argjson route6 "$(ip -j -6 route show)" \
    --arg kubelet "$(cat /etc/default/kubelet 2>/dev/null)" \
    --arg files "$(sha256sum "${files[@]}")" \
    '{link: $link, addr: $addr, route4: $route4, route6: $route6, kubelet: $kubelet, files: $files}'
}

{
  echo "node-probe: network state after cloud-init"
  ip -d link show
  ip addr show
  ip -4 route show
  ip -6 route show
} >/dev/console 2>&1
snapshot >"$dir/boot.json"

rerun="$(sed -n 's/.*node-probe\.rerun=\([^ ]*\).*/\1/p' /proc/cmdline)"
if [ -n "$rerun" ]; then
  "$rerun" >"$dir/rerun.log" 2>&1
  echo $? >"$dir/rerun.rc"
  snapshot >"$dir/rerun.json"
fi
sync
systemctl poweroff --no-block
PROBE
chmod 0755 "$root/usr/local/sbin/node-probe"

cat >"$root/etc/systemd/system/node-probe.service" <<'UNIT'
[Unit]
Description=Record the node's network state for the node boot test
After=cloud-final.service
Wants=cloud-final.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/node-probe

# cloud-final comes after multi-user.target: the probe is wanted by it.
[Install]
WantedBy=cloud-final.service
UNIT
chroot "$root" systemctl enable node-probe.service >/dev/null
# containerd's package enables its unit: the qemu scenarios run no
# Kubernetes, and the machines of test/nodeagent start it themselves.
chroot "$root" systemctl disable containerd.service >/dev/null 2>&1

cp "$(readlink -f "$root/vmlinuz")" "$work/vmlinuz"
cp "$(readlink -f "$root/initrd.img")" "$work/initrd.img"
chmod 0644 "$work/vmlinuz" "$work/initrd.img"
rm -rf "$root/var/lib/apt/lists"/* "$root/var/cache/apt"/*.bin "$root/var/cache/apt/archives"/*.deb

truncate -s 2G "$work/rootfs.img"
mkfs.ext4 -q -F -L node -d "$root" "$work/rootfs.img"

mkdir -p "$out"
mv "$work/vmlinuz" "$work/initrd.img" "$out/"
mv "$work/rootfs.img" "$out/rootfs.img"
