#!/usr/bin/env bash
# ovn.sh fetches OVN (ovsdb-server, ovn-northd, ovn-nbctl, ovn-sbctl, ovn-trace and the NB/SB
# schemas) from Debian's packages without root (debs.sh), once, and prints its root directory.
# The versions verified with Debian 12 (bookworm): OVN 23.03, Open vSwitch 3.1.
exec "$(dirname "${BASH_SOURCE[0]}")/debs.sh" ovn ovn-central ovn-common openvswitch-common libxdp1 libbpf1
