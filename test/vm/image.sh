#!/bin/sh
# Builds, or finds in the cache, the Debian bookworm image that
# `make test-vm` boots, and prints the directory that holds it:
#
#   disk.raw.zst   ext4 root file system, no partition table (zstd)
#   vmlinuz        the kernel
#   initrd.img     its initramfs (only the modules to mount the root)
#
# The image is keyed by a hash of this script and of the files under
# test/vm/guest/ (copied into the image): a change to either builds a new
# one, and a missing or incomplete cache entry is always rebuilt. Runs as
# root (mmdebstrap --mode=root, mkfs.ext4 -d). Progress goes to stderr.
#
#   KURED_HOST_VM_CACHE   where images are kept (/var/cache/kured-host-vm)
#   KURED_HOST_VM_MIRROR  the Debian mirror (http://deb.debian.org/debian)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
cache=${KURED_HOST_VM_CACHE:-/var/cache/kured-host-vm}
mirror=${KURED_HOST_VM_MIRROR:-http://deb.debian.org/debian}
security=${KURED_HOST_VM_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# The key: this script, then each guest file's path, executable bit and
# content, in a stable order.
key=$(
	{
		cat "$here/image.sh"
		cd "$here/guest"
		find . -type f | LC_ALL=C sort | while read -r f; do
			x=-
			[ -x "$f" ] && x=x
			printf '\n%s %s\n' "$f" "$x"
			cat "$f"
		done
	} | sha256sum | cut -c1-16
)
out=$cache/$key

if [ -f "$out/complete" ]; then
	echo "vm image: cached $out" >&2
	echo "$out"
	exit 0
fi

mkdir -p "$cache"
# One build at a time; a second caller waits and then finds the image.
exec 9>"$cache/.lock"
flock 9
if [ -f "$out/complete" ]; then
	echo "$out"
	exit 0
fi

began=$(date +%s)
work=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
root=$work/root
echo "vm image: building $out (Debian bookworm, mmdebstrap; about 2 minutes)" >&2

# Kernel modules the VM loads: the initramfs's (root disk), the network,
# the 9p share, the random number generator and what systemd asks for.
# overlay, bridge and veth: containerd's snapshotter and the pods' network
# (the CNI bridge plugin), for the real kubelet.
keep_modules="virtio_pci virtio_blk virtio_net virtio_rng 9p 9pnet_virtio ext4 crc32c_generic crc32c_intel autofs4 overlay bridge veth"

# minbase plus what a node runs: systemd as init with logind and networkd,
# D-Bus (logind's bus), udev, the kernel and its initramfs tools, and
# Debian's container runtime (containerd, runc, the CNI plugins) for the
# real kubelet. No
# documentation, manual pages or translations (dpkg skips them during the
# build; the exclusion is removed so that the guest installs packages
# whole).
mmdebstrap --variant=minbase --mode=root \
	--include=systemd,systemd-sysv,dbus,udev,kmod,iproute2,procps,linux-image-amd64,initramfs-tools,zstd,containerd,runc,containernetworking-plugins \
	--aptopt='Acquire::Check-Valid-Until "false"' \
	--aptopt='APT::Install-Recommends "false"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--essential-hook="mkdir -p \"\$1/etc/initramfs-tools\" \"\$1/usr/share/initramfs-tools\"" \
	--essential-hook="sync-in '$here/guest/etc/initramfs-tools' /etc/initramfs-tools" \
	--essential-hook="sync-in '$here/guest/usr/share/initramfs-tools' /usr/share/initramfs-tools" \
	bookworm "$root" \
	"deb $mirror bookworm main" \
	"deb $mirror bookworm-updates main" \
	"deb $security bookworm-security main" >&2

# The guest's own files (test/vm/guest), its services, no timers that
# would try to reach the network, no login prompts (nobody logs in; the
# serial console is the test's log), no trace of the build.
cp -a "$here/guest/." "$root/"
chroot "$root" systemctl enable systemd-networkd.service kubelet.service \
	kured-host-vm-agent.service kured-host-vm-boot.service
# containerd runs only where the real kubelet does: kubelet.service's
# provisioning starts it.
chroot "$root" systemctl disable containerd.service
chroot "$root" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
	getty@tty1.service serial-getty@ttyS0.service
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/*.log \
	"$root/etc/resolv.conf" "$root/etc/dpkg/dpkg.cfg.d/99mmdebstrap" "$root/etc/apt/apt.conf.d/99mmdebstrap"

# A machine ID of its own, so that no boot of the VM is a first boot
# (presets, systemd-firstboot).
od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$root/etc/machine-id"
echo >>"$root/etc/machine-id"

# Keep only the kernel modules the VM uses (and what they depend on):
# most of the image's size otherwise.
kver=$(ls "$root/lib/modules")
for m in $keep_modules; do
	chroot "$root" modprobe -S "$kver" --show-depends "$m"
done | awk '$1 == "insmod" { print $2 }' | sort -u >"$work/keep"
(cd "$root" && find "lib/modules/$kver/kernel" -name '*.ko*' | sed 's|^|/|') |
	grep -Fxv -f "$work/keep" | sed "s|^|$root|" | xargs rm -f
find "$root/lib/modules/$kver/kernel" -type d -empty -delete
chroot "$root" depmod "$kver"
echo "vm image: kernel $kver, $(wc -l <"$work/keep") modules kept" >&2

mkdir -p "$work/image"
cp "$root/boot/vmlinuz-$kver" "$work/image/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$work/image/initrd.img"
truncate -s 2G "$work/disk.raw"
mkfs.ext4 -q -F -L root -d "$root" "$work/disk.raw"
zstd -q -T0 --rm "$work/disk.raw" -o "$work/image/disk.raw.zst"
# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' >"$work/image/packages"
du -sh "$root" | sed 's/^/vm image: root file system /' >&2
echo "built in $(($(date +%s) - began))s from $mirror" >"$work/image/complete"

rm -rf "$out"
mv "$work/image" "$out"
# Keep the three most recent images (other branches may use them).
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%T@ %p\n' |
	sort -rn | tail -n +4 | cut -d' ' -f2- | while read -r old; do rm -rf "$old"; done
echo "vm image: built $out in $(($(date +%s) - began))s ($(du -sh "$out" | cut -f1))" >&2
echo "$out"
