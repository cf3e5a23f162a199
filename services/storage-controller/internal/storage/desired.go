package storage

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagev1ac "k8s.io/client-go/applyconfigurations/storage/v1"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// FieldOwner is the field manager of everything the storage-controller applies.
const FieldOwner = "storage-controller"

// LINSTOR properties of a resource group the storage-controller manages.
const (
	// PropPolicy marks a resource group Flotilla created, with its policy's name. Resource
	// groups without it are never touched, even when their name looks like Flotilla's.
	PropPolicy                  = "Aux/flotilla.dev/policy"
	PropAutoDiskful             = "DrbdOptions/auto-diskful"
	PropAutoDiskfulAllowCleanup = "DrbdOptions/auto-diskful-allow-cleanup"
	PropFileSystem              = "FileSystem/Type"
	// AuxPrefix is how LINSTOR node properties copied from Kubernetes node labels begin.
	AuxPrefix = "Aux/"
)

// managedProps are the properties the storage-controller sets or removes; others on the group
// (set by an operator with the linstor client) are left alone.
var managedProps = []string{PropPolicy, PropAutoDiskful, PropAutoDiskfulAllowCleanup, PropFileSystem}

// Filter is the part of a LINSTOR select filter a policy decides. Every list is sent, empty
// when unused, so that a modify clears what the policy no longer asks for (LINSTOR leaves a
// field that is absent from a modify as it was).
type Filter struct {
	PlaceCount          int32    `json:"place_count"`
	StoragePoolList     []string `json:"storage_pool_list"`
	ReplicasOnSame      []string `json:"replicas_on_same"`
	ReplicasOnDifferent []string `json:"replicas_on_different"`
}

// ResourceGroup is a LINSTOR resource group as a policy wants it.
type ResourceGroup struct {
	Name        string
	Description string
	// Props are the managed properties the group must carry; managed properties absent here
	// must be absent from the group.
	Props  map[string]string
	Filter Filter
}

// DesiredResourceGroup is the resource group of p. Node labels select nodes through the Aux/
// properties the LINSTOR operator copies from them (replicas_on_same with a value keeps every
// replica on nodes carrying it); the topology key spreads replicas (replicas_on_different).
func DesiredResourceGroup(p *storagepolicyv1.StoragePolicy) ResourceGroup {
	rg := ResourceGroup{
		Name:        storagepolicyv1.ResourceGroupName(p.Name),
		Description: fmt.Sprintf("StoragePolicy %s (managed by Flotilla's storage-controller)", p.Name),
		Props: map[string]string{
			PropPolicy:     p.Name,
			PropFileSystem: filesystem(p),
		},
		Filter: Filter{
			PlaceCount:          p.Spec.Replicas,
			StoragePoolList:     slices.Sorted(slices.Values(p.Spec.StoragePools)),
			ReplicasOnSame:      []string{},
			ReplicasOnDifferent: []string{},
		},
	}
	for _, k := range slices.Sorted(maps.Keys(p.Spec.NodeSelector)) {
		rg.Filter.ReplicasOnSame = append(rg.Filter.ReplicasOnSame, AuxPrefix+k+"="+p.Spec.NodeSelector[k])
	}
	if p.Spec.TopologyKey != "" {
		rg.Filter.ReplicasOnDifferent = []string{AuxPrefix + p.Spec.TopologyKey}
	}
	if ad := p.Spec.AutoDiskful; ad != nil && ad.Enabled {
		minutes := 30
		if ad.After != nil {
			minutes = int(ad.After.Minutes())
		}
		rg.Props[PropAutoDiskful] = strconv.Itoa(minutes)
		rg.Props[PropAutoDiskfulAllowCleanup] = strconv.FormatBool(ad.AllowCleanup)
	}
	return rg
}

// Change is what must be sent to make a resource group what a policy wants.
type Change struct {
	// Props to set, and managed props to delete.
	Set    map[string]string
	Delete []string
	// Filter differs and must be sent whole.
	Filter bool
	// Grow: the place count rose, so existing volumes need more replicas (LINSTOR's adjust).
	Grow bool
}

// Empty reports whether nothing needs sending.
func (c Change) Empty() bool { return len(c.Set) == 0 && len(c.Delete) == 0 && !c.Filter && !c.Grow }

// Modifies reports whether the group itself must change (Grow alone only places replicas).
func (c Change) Modifies() bool { return len(c.Set) != 0 || len(c.Delete) != 0 || c.Filter }

// UnderReplicated names the volumes of group that have fewer diskful replicas than placeCount:
// a grown place count that has not reached them yet (LINSTOR's adjust stopped midway, say).
func UnderReplicated(volumes map[string]Volume, group string, placeCount int32) []string {
	var out []string
	for _, v := range volumes {
		if v.Group == group && v.Diskful() < int(placeCount) {
			out = append(out, v.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Diff compares the group LINSTOR holds (props and filter as it reports them) with desired.
func Diff(props map[string]string, filter Filter, desired ResourceGroup) Change {
	var c Change
	for _, k := range managedProps {
		want, wanted := desired.Props[k]
		have, has := props[k]
		switch {
		case wanted && (!has || have != want):
			if c.Set == nil {
				c.Set = map[string]string{}
			}
			c.Set[k] = want
		case !wanted && has:
			c.Delete = append(c.Delete, k)
		}
	}
	norm := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
	if filter.PlaceCount != desired.Filter.PlaceCount ||
		!slices.Equal(norm(filter.StoragePoolList), desired.Filter.StoragePoolList) ||
		!slices.Equal(norm(filter.ReplicasOnSame), desired.Filter.ReplicasOnSame) ||
		!slices.Equal(norm(filter.ReplicasOnDifferent), desired.Filter.ReplicasOnDifferent) {
		c.Filter = true
	}
	c.Grow = desired.Filter.PlaceCount > filter.PlaceCount
	return c
}

func filesystem(p *storagepolicyv1.StoragePolicy) string {
	if p.Spec.Filesystem == "" {
		return "ext4"
	}
	return p.Spec.Filesystem
}

func bindingMode(p *storagepolicyv1.StoragePolicy) storagev1.VolumeBindingMode {
	if p.Spec.VolumeBindingMode == "" {
		return storagev1.VolumeBindingWaitForFirstConsumer
	}
	return storagev1.VolumeBindingMode(p.Spec.VolumeBindingMode)
}

// StorageClass is the StorageClass of p for the LINSTOR CSI driver.
func StorageClass(p *storagepolicyv1.StoragePolicy) *storagev1ac.StorageClassApplyConfiguration {
	return storagev1ac.StorageClass(p.Name).
		WithLabels(map[string]string{storagepolicyv1.LabelPolicy: p.Name}).
		WithProvisioner(storagepolicyv1.CSIDriver).
		WithParameters(map[string]string{
			storagepolicyv1.ParamResourceGroup: storagepolicyv1.ResourceGroupName(p.Name),
			storagepolicyv1.ParamFSType:        filesystem(p),
		}).
		WithReclaimPolicy(corev1.PersistentVolumeReclaimDelete).
		WithVolumeBindingMode(bindingMode(p)).
		WithAllowVolumeExpansion(true)
}

// ImmutableMismatch names the first field of p whose StorageClass setting differs from sc's,
// where a StorageClass cannot change: "spec.filesystem: … has csi.storage.k8s.io/fstype=ext4",
// or "" when sc matches.
func ImmutableMismatch(p *storagepolicyv1.StoragePolicy, sc *storagev1.StorageClass) string {
	switch {
	case sc.Provisioner != storagepolicyv1.CSIDriver:
		return fmt.Sprintf("provisioner: the StorageClass %s has provisioner %s, not %s", sc.Name, sc.Provisioner, storagepolicyv1.CSIDriver)
	case sc.Parameters[storagepolicyv1.ParamFSType] != filesystem(p):
		return fmt.Sprintf("spec.filesystem: the StorageClass %s was made with %s=%s", sc.Name, storagepolicyv1.ParamFSType, sc.Parameters[storagepolicyv1.ParamFSType])
	case sc.Parameters[storagepolicyv1.ParamResourceGroup] != storagepolicyv1.ResourceGroupName(p.Name):
		return fmt.Sprintf("metadata.name: the StorageClass %s names resource group %s", sc.Name, sc.Parameters[storagepolicyv1.ParamResourceGroup])
	case sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != bindingMode(p):
		have := "none"
		if sc.VolumeBindingMode != nil {
			have = string(*sc.VolumeBindingMode)
		}
		return fmt.Sprintf("spec.volumeBindingMode: the StorageClass %s was made with volumeBindingMode %s", sc.Name, have)
	case len(sc.Parameters) != 2:
		return fmt.Sprintf("parameters: the StorageClass %s has parameters Flotilla did not set", sc.Name)
	}
	return ""
}

// Owned reports whether the storage-controller created sc for policy.
func Owned(sc metav1.Object, policy string) bool {
	return sc.GetLabels()[storagepolicyv1.LabelPolicy] == policy
}

// MatchConditionName names the claim webhook's match condition.
const MatchConditionName = "flotilla-storage-classes"

// MatchClasses is the CEL match condition that sends a claim to the claim webhook when its
// StorageClass is one of the policies' (policy names are DNS labels: no quoting is needed).
func MatchClasses(policies []string) string {
	names := slices.Compact(slices.Sorted(slices.Values(policies)))
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'"
	}
	return "has(object.spec.storageClassName) && object.spec.storageClassName in [" + strings.Join(quoted, ", ") + "]"
}
