package ovn

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/flotilla-dev/flotilla/services/net-controller/internal/ovn/nbdb"
)

// external_ids keys and values marking the controller's rows.
const (
	// OwnerKey marks every row the controller made; it deletes no row without it.
	OwnerKey = "flotilla.dev/owner"
	// Owner is OwnerKey's value.
	Owner = "net-controller"
	// NetworkKey names the TenantNetwork (namespace/name) a row belongs to.
	NetworkKey = "flotilla.dev/network"
	// TransitSwitch is the logical switch of the platform's transit network.
	TransitSwitch = "flotilla-transit"
	// GatewayChassis is the chassis the gateway routers are bound to (options:chassis): what makes
	// OVN a router a gateway router, on which NAT is done.
	GatewayChassis = "flotilla-gateway"
)

// Network is a TenantNetwork as OVN needs it.
type Network struct {
	// Key is namespace/name.
	Key string
	// CIDR is the tenant's range; the router takes its first address.
	CIDR netip.Prefix
	// Transit is the router's address on the transit network (with the transit prefix length),
	// invalid when the network has no way out.
	Transit netip.Prefix
	// SNAT sends the network's traffic out as the Transit address.
	SNAT bool
	// Floating maps platform addresses (on the transit network) to addresses inside CIDR.
	Floating []Floating
}

// Floating is one DNAT floating address.
type Floating struct {
	External, Internal netip.Addr
}

// Rows are the northbound rows of one network. UUIDs are empty: Programmer fills them in.
type Rows struct {
	Key        string
	Switch     nbdb.LogicalSwitch
	SwitchPort nbdb.LogicalSwitchPort // the switch's port toward the router
	Router     nbdb.LogicalRouter
	RouterPort nbdb.LogicalRouterPort // the router's port on the switch
	// TransitRouterPort and TransitSwitchPort attach the router to the transit switch; nil when the
	// network has no way out.
	TransitRouterPort *nbdb.LogicalRouterPort
	TransitSwitchPort *nbdb.LogicalSwitchPort
	NATs              []nbdb.NAT
}

// Names of a network's rows: readable in ovn-nbctl show and ovn-trace, unique per namespace/name.
func switchName(key string) string     { return "ls." + key }
func routerName(key string) string     { return "lr." + key }
func routerPortName(key string) string { return "lrp." + key }
func switchPortName(key string) string { return "lsp." + key }
func transitLRPName(key string) string { return "lrp-transit." + key }
func transitLSPName(key string) string { return "lsp-transit." + key }
func ids(key string) map[string]string { return map[string]string{OwnerKey: Owner, NetworkKey: key} }

// RouterName is the name of a network's logical router.
func RouterName(key string) string { return routerName(key) }

// SwitchName is the name of a network's logical switch.
func SwitchName(key string) string { return switchName(key) }

// Desired returns the rows of n.
func Desired(n Network) Rows {
	k := n.Key
	gw := netip.PrefixFrom(n.CIDR.Addr().Next(), n.CIDR.Bits())
	r := Rows{
		Key:    k,
		Switch: nbdb.LogicalSwitch{Name: switchName(k), ExternalIDs: ids(k), OtherConfig: map[string]string{"subnet": n.CIDR.String()}},
		SwitchPort: nbdb.LogicalSwitchPort{Name: switchPortName(k), Type: "router", Addresses: []string{"router"},
			Options: map[string]string{"router-port": routerPortName(k)}, ExternalIDs: ids(k)},
		Router:     nbdb.LogicalRouter{Name: routerName(k), ExternalIDs: ids(k), Options: map[string]string{"chassis": GatewayChassis}},
		RouterPort: nbdb.LogicalRouterPort{Name: routerPortName(k), MAC: mac(k, "lan"), Networks: []string{gw.String()}, ExternalIDs: ids(k)},
	}
	if n.Transit.IsValid() {
		r.TransitRouterPort = &nbdb.LogicalRouterPort{Name: transitLRPName(k), MAC: mac(k, "transit"),
			Networks: []string{n.Transit.String()}, ExternalIDs: ids(k)}
		r.TransitSwitchPort = &nbdb.LogicalSwitchPort{Name: transitLSPName(k), Type: "router", Addresses: []string{"router"},
			Options: map[string]string{"router-port": transitLRPName(k)}, ExternalIDs: ids(k)}
		if n.SNAT {
			r.NATs = append(r.NATs, nbdb.NAT{Type: nbdb.NATTypeSNAT, ExternalIP: n.Transit.Addr().String(),
				LogicalIP: n.CIDR.String(), ExternalIDs: ids(k)})
		}
		for _, f := range n.Floating {
			r.NATs = append(r.NATs, nbdb.NAT{Type: nbdb.NATTypeDNATAndSNAT, ExternalIP: f.External.String(),
				LogicalIP: f.Internal.String(), ExternalIDs: ids(k)})
		}
	}
	slices.SortFunc(r.NATs, func(a, b nbdb.NAT) int { return cmpNAT(natKey(a), natKey(b)) })
	return r
}

// mac is a stable, locally administered MAC address for one port of a network.
func mac(key, port string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key + "/" + port))
	s := h.Sum32()
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", byte(s>>24), byte(s>>16), byte(s>>8), byte(s))
}

func natKey(n nbdb.NAT) string { return string(n.Type) + "|" + n.ExternalIP + "|" + n.LogicalIP }

func cmpNAT(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
