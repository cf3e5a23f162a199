#!/usr/bin/env bash
# node-debs.sh fetches what the real node takes from Debian's packages without root (debs.sh), once,
# and prints its root directory: runc (containerd's runtime), iptables (kube-proxy's and
# kube-router's rules; no alternatives are installed, so testenv links iptables to xtables-nft-multi
# itself), ipset (kube-router's sets of pods) and a static busybox (the e2e tests' pods). Running the
# node needs root; fetching it does not.
# Verified with Debian 12 (bookworm): runc 1.1.5, iptables 1.8.9, ipset 7.17, busybox 1.35.
exec "$(dirname "${BASH_SOURCE[0]}")/debs.sh" node runc libseccomp2 iptables libip4tc2 libip6tc2 libxtables12 \
  libmnl0 libnetfilter-conntrack3 libnfnetlink0 libnftnl11 ipset libipset13 busybox-static
