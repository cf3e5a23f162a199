#!/usr/bin/env bash
# build.sh builds the binaries listed in binaries.txt (all of them, or those named as arguments)
# from the Go module proxy, hash-pinned by each module's go.sum, and caches them outside the clone:
#
#   $FLOTILLA_CACHE/builds/<name>-<key>/<name>   one build, key = hash of its line + go.mod + go.sum
#   $FLOTILLA_CACHE/bin/<name>                   symlink to the build this checkout wants
#
# A binary is rebuilt only when its build is missing. Prints the bin directory on stdout; progress
# goes to stderr. FLOTILLA_CACHE defaults to $HOME/.cache/flotilla. With --link first, only the
# links are made: a binary not built yet is a dangling link until a later build.sh builds it (so
# that whoever waits for it never finds an older build there).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${FLOTILLA_CACHE:-$HOME/.cache/flotilla}
bindir=$cache/bin
mkdir -p "$bindir" "$cache/builds"
link_only=false
if [[ ${1:-} == --link ]]; then link_only=true; shift; fi

# The flags of `make demo`'s and `make release`'s controller builds: with them, and with the
# workspace's versions of the modules they share (align.sh), a package of the Kubernetes libraries
# is compiled once for every binary on that line. Static binaries: nothing here needs cgo.
export CGO_ENABLED=0
flags="CGO_ENABLED=0 -trimpath"

# Collect the wanted lines, grouped by module so each module is compiled in one `go build`.
declare -A want_pkgs want_names
while read -r name mod pkg ver; do
  [[ -z $name || $name == \#* ]] && continue
  if [[ $# -gt 0 ]] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  key=$(cat <(echo "$name $mod $pkg $ver $flags") "$here/$mod/go.mod" "$here/$mod/go.sum" | sha256sum | cut -c1-16)
  out=$cache/builds/$name-$key
  if [[ ! -x $out/$name ]]; then
    want_pkgs[$mod]+=" $pkg"
    want_names[$mod]+=" $name:$pkg:$ver:$out"
  fi
  ln -sfn "$out/$name" "$bindir/$name"
done < "$here/binaries.txt"
if $link_only; then echo "$bindir"; exit 0; fi

for mod in "${!want_pkgs[@]}"; do
  names=$(for e in ${want_names[$mod]}; do echo -n "${e%%:*} "; done)
  echo ">> building $names(module libs/builder/$mod; a cold build takes minutes)" >&2
  tmp=$(mktemp -d "$cache/builds/.tmp.XXXXXX")
  # Version stamps: Kubernetes binaries report v0.0.0 without them; -X on a missing symbol is a no-op.
  ver=
  for e in ${want_names[$mod]}; do IFS=: read -r _ _ v _ <<<"$e"; if [[ -z $ver && $v == v1.* ]]; then ver=$v; fi; done
  ldflags="-s -w"
  if [[ -n $ver ]]; then
    major=${ver#v}; major=${major%%.*}; minor=${ver#v*.}; minor=${minor%%.*}
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $p.gitVersion=$ver -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    done
  fi
  start=$SECONDS
  (cd "$here/$mod" && GOWORK=off GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$tmp/" ${want_pkgs[$mod]})
  for e in ${want_names[$mod]}; do
    IFS=: read -r name pkg _ out <<<"$e"
    base=${pkg##*/}
    [[ $base =~ ^v[0-9]+$ ]] && { base=${pkg%/*}; base=${base##*/}; }
    mkdir -p "$out" && mv "$tmp/$base" "$out/$name"
  done
  rm -rf "$tmp"
  echo ">> built $names in $((SECONDS - start))s" >&2
done
echo "$bindir"
