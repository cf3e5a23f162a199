#!/usr/bin/env bash
# align.sh raises, in the builder modules on the workspace's Kubernetes line (ALIGNED below), every
# module they share with the workspace to the workspace's version, so that the Go build cache
# compiles each shared package once for kube-apiserver, kubectl, helm, … and for the controllers
# (build.sh builds with the flags `make demo` and `make release` use). Never lowers a version: a
# builder module that needs a newer one than the workspace is left as it is, and said. A module
# the workspace replaces is required and replaced alike; one the builder replaces (the Kubernetes
# staging repositories) keeps its replacement and is required at the workspace's version.
# `make verify` runs it: go.mod files it would change are stale. Needs the module proxy only when
# something is to change.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ALIGNED=(kube helm)

# The modules of the packages the workspace builds (the build list's other entries are never
# compiled), and the versions the workspace replaces them with: the compiler's cache key names a
# replaced module by its required version, so a builder module must require and replace it alike.
declare -A workspace replaced
while read -r path ver repl; do workspace[$path]=$ver; replaced[$path]=$repl; done < <(cd "$here/../.." &&
  go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}} {{with .Replace}}{{.Version}}{{else}}-{{end}}{{end}}{{end}}' \
    $(go work edit -json | sed -n 's/^\t*"DiskPath": "\.\/\(.*\)"$/.\/\1\/.../p') | sort -u)

# align MOD: one round; returns 1 when it changed something (which can make another round needed).
align() {
  local mod=$1 raise=() edits=() path ver repl want
  while read -r path ver repl; do
    want=${workspace[$path]:-}
    [[ -z $want ]] && continue
    if [[ ${replaced[$path]} != - ]]; then
      [[ $repl != "${replaced[$path]}" ]] && edits+=("-replace=$path=$path@${replaced[$path]}")
    elif [[ $repl != - ]]; then
      # The builder's own pin (k8s.io/kubernetes requires its staging repositories at v0.0.0):
      # required at the version it is replaced with when that is the workspace's.
      [[ $repl == "$want" && $ver != "$want" ]] && edits+=("-require=$path@$want")
      continue
    fi
    [[ $want == "$ver" ]] && continue
    if [[ $(printf '%s\n%s\n' "$ver" "$want" | sort -V | tail -1) == "$want" ]]; then
      raise+=("$path@$want")
    else
      echo "libs/builder/$mod needs $path $ver, newer than the workspace's $want: not shared" >&2
    fi
  done < <(cd "$here/$mod" && GOWORK=off go list -m -f '{{if not .Main}}{{.Path}} {{.Version}} {{with .Replace}}{{.Version}}{{else}}-{{end}}{{end}}' all)
  [[ ${#raise[@]} -eq 0 && ${#edits[@]} -eq 0 ]] && return 0
  echo "libs/builder/$mod: ${edits[*]} ${raise[*]}" >&2
  (cd "$here/$mod" && { [[ ${#edits[@]} -eq 0 ]] || go mod edit "${edits[@]}"; } && { [[ ${#raise[@]} -eq 0 ]] || GOWORK=off go get "${raise[@]}"; })
  # go.sum as build.sh's build leaves it (its cache key hashes go.sum).
  # shellcheck disable=SC2046 # the module's packages
  (cd "$here/$mod" && GOWORK=off GOFLAGS=-mod=mod go list -deps $(awk -v m="$mod" '$2 == m {print $3}' "$here/binaries.txt") >/dev/null)
  return 1
}

for mod in "${ALIGNED[@]}"; do
  for _ in 1 2 3 4 5; do align "$mod" 2>/dev/null && break; done
  align "$mod" # says what stays apart
done
