#!/usr/bin/env bash
# ovn.sh fetches OVN (ovsdb-server, ovn-northd, ovn-nbctl, ovn-sbctl, ovn-trace and the NB/SB
# schemas) from Debian's packages without root: `apt-get download` + `dpkg -x` into
#
#   $FLOTILLA_CACHE/ovn-<key>/    key = hash of the package list below
#
# outside the clone, once. Prints the root directory on stdout; run its binaries with
# LD_LIBRARY_PATH=<root>/usr/lib/x86_64-linux-gnu:<root>/lib/x86_64-linux-gnu. Progress goes to
# stderr. FLOTILLA_CACHE defaults to $HOME/.cache/flotilla.
set -euo pipefail
cache=${FLOTILLA_CACHE:-$HOME/.cache/flotilla}
# The packages, and the versions verified with Debian 12 (bookworm): OVN 23.03, Open vSwitch 3.1.
pkgs=(ovn-central ovn-common openvswitch-common libxdp1 libbpf1)
key=$(printf '%s\n' "${pkgs[@]}" | sha256sum | cut -c1-16)
root=$cache/ovn-$key
if [[ ! -x $root/usr/sbin/ovsdb-server || ! -x $root/usr/bin/ovn-northd ]]; then
  echo ">> fetching OVN from Debian packages (${pkgs[*]}) into $root" >&2
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.ovn.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # apt's sandbox user cannot write into a root-owned temporary directory; that is only a warning.
  (cd "$tmp" && apt-get download "${pkgs[@]}" 2>&1 | sed "/Download is performed unsandboxed/d" >&2)
  mkdir -p "$tmp/root"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
  rm -rf "$root" && mv "$tmp/root" "$root"
fi
echo "$root"
