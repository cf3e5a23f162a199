#!/usr/bin/env bash
# debs.sh NAME PACKAGE... fetches Debian packages without root: `apt-get download` + `dpkg -x` into
#
#   $FLOTILLA_CACHE/NAME-<key>/    key = hash of the package list
#
# outside the clone, once. Prints that root directory on stdout; run its binaries with
# LD_LIBRARY_PATH=<root>/usr/lib/x86_64-linux-gnu:<root>/lib/x86_64-linux-gnu. Progress goes to
# stderr. FLOTILLA_CACHE defaults to $HOME/.cache/flotilla.
set -euo pipefail
name=$1; shift
cache=${FLOTILLA_CACHE:-$HOME/.cache/flotilla}
key=$(printf '%s\n' "$@" | sha256sum | cut -c1-16)
root=$cache/$name-$key
if [[ ! -f $root/.complete ]]; then
  echo ">> fetching $name from Debian packages ($*) into $root" >&2
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.$name.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # apt's sandbox user cannot write into a root-owned temporary directory; that is only a warning.
  # A machine whose package lists are missing or old gets them first (root only).
  download() { (cd "$tmp" && apt-get download "$@" 2>&1 | sed "/Download is performed unsandboxed/d" >&2; exit "${PIPESTATUS[0]}"); }
  if ! download "$@"; then
    [[ $EUID -eq 0 ]] || { echo "apt-get download failed; as root, apt-get update first" >&2; exit 1; }
    apt-get update -qq >&2
    download "$@"
  fi
  mkdir -p "$tmp/root"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
  touch "$tmp/root/.complete"
  rm -rf "$root" && mv "$tmp/root" "$root"
fi
echo "$root"
