package tenancy

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	netv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	"github.com/flotilla-dev/flotilla/libs/apis/quantity"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// FieldOwner is the server-side-apply field manager of everything the controller writes.
const FieldOwner = "flotilla-tenant-controller"

// Names of the objects the controller writes into a tenant namespace.
const (
	QuotaName         = "flotilla-tenant"
	LimitRangeName    = "flotilla-tenant"
	IsolationPolicy   = "flotilla-tenant-isolation"
	servicePolicyStem = "flotilla-tenant-"
)

// ManagedLabels mark every object the controller creates, so it finds (and only ever deletes) its own.
var ManagedLabels = map[string]string{"app.kubernetes.io/managed-by": FieldOwner}

// ClusterRoleName is the ClusterRole granting a tenant role (shipped with the chart).
func ClusterRoleName(r tenancyv1.TenantRole) string { return "flotilla:tenant:" + string(r) }

// RoleBindingName is the RoleBinding of role r in a tenant namespace.
func RoleBindingName(r tenancyv1.TenantRole) string { return "flotilla-tenant-" + string(r) }

// GroupName is the default OIDC group granted role r on the tenant owning namespace ns.
func GroupName(prefix, ns string, r tenancyv1.TenantRole) string {
	return prefix + ns + "-" + string(r)
}

// Effective is what a tenant inherits or derives from its ancestors.
type Effective struct {
	Host            string
	SchedulingClass string
	Services        tenancyv1.SharedServices
	// PodSecurity is the level enforced in the tenant's namespace.
	PodSecurity tenancyv1.PodSecurityLevel
}

// Pod Security Admission labels (k8s.io/pod-security-admission/api, spelled out here rather than
// importing that module for six strings).
const (
	podSecurityPrefix = "pod-security.kubernetes.io/"
	// podSecurityVersion follows the cluster's Kubernetes version, so a standard tightened upstream
	// applies after an upgrade without a change here.
	podSecurityVersion = "latest"
)

// PodSecurityLabels are the Pod Security Admission labels of a tenant namespace: enforce the
// tenant's level, and always warn and audit against restricted, so that tenants see what a
// tightening would refuse before it does.
func PodSecurityLabels(enforce tenancyv1.PodSecurityLevel) map[string]string {
	return map[string]string{
		podSecurityPrefix + "enforce":         string(enforce),
		podSecurityPrefix + "enforce-version": podSecurityVersion,
		podSecurityPrefix + "warn":            string(tenancyv1.PodSecurityRestricted),
		podSecurityPrefix + "warn-version":    podSecurityVersion,
		podSecurityPrefix + "audit":           string(tenancyv1.PodSecurityRestricted),
		podSecurityPrefix + "audit-version":   podSecurityVersion,
	}
}

// Resolve computes the effective host, scheduling class and shared-service providers along chain
// (the ancestors, root first, then the tenant itself).
func Resolve(chain []*tenancyv1.Tenant) Effective {
	e := Effective{PodSecurity: tenancyv1.DefaultPodSecurity}
	for _, c := range chain {
		if c.Spec.PodSecurity != nil && c.Spec.PodSecurity.Enforce != "" {
			e.PodSecurity = c.Spec.PodSecurity.Enforce
		}
		switch {
		case c.Spec.Host != "":
			e.Host = c.Spec.Host
		case e.Host != "":
			e.Host = c.Name + "." + e.Host
		}
		ns := OwnNamespace(keyOf(c))
		if c.Spec.Ingress {
			e.Services.Ingress = ns
		}
		if c.Spec.Monitoring {
			e.Services.Monitoring = ns
		}
		if c.Spec.Etcd {
			e.Services.Etcd = ns
		}
	}
	_, e.SchedulingClass = InheritedSchedulingClass(chain)
	return e
}

// Namespace is the tenant's namespace with the labels other services read. ownerUID is set only
// on a namespace the controller creates (or created) for this tenant.
func Namespace(p Placement, t *tenancyv1.Tenant, e Effective, ownerUID string) *corev1ac.NamespaceApplyConfiguration {
	labels := map[string]string{
		tenancyv1.LabelTenant: t.Name,
		tenancyv1.LabelDepth:  DepthLabel(p.Depth),
		tenancyv1.LabelPath:   p.Path,
	}
	for k, v := range ManagedLabels {
		labels[k] = v
	}
	for k, v := range PodSecurityLabels(e.PodSecurity) {
		labels[k] = v
	}
	if len(p.Ancestors) > 0 {
		labels[tenancyv1.LabelParent] = p.Ancestors[len(p.Ancestors)-1]
	}
	for _, a := range p.Ancestors {
		labels[tenancyv1.AncestorLabel(a)] = "true"
	}
	for k, v := range map[string]string{
		tenancyv1.LabelIngress:         e.Services.Ingress,
		tenancyv1.LabelMonitoring:      e.Services.Monitoring,
		tenancyv1.LabelEtcd:            e.Services.Etcd,
		tenancyv1.LabelSchedulingClass: e.SchedulingClass,
	} {
		if v != "" {
			labels[k] = v
		}
	}
	ns := corev1ac.Namespace(p.Namespace).WithLabels(labels)
	annotations := map[string]string{}
	if e.Host != "" {
		annotations[tenancyv1.AnnotationHost] = e.Host
	}
	if ownerUID != "" {
		annotations[tenancyv1.AnnotationOwnerUID] = ownerUID
	}
	if len(annotations) > 0 {
		ns.WithAnnotations(annotations)
	}
	return ns
}

// RoleBindings binds each tenant role, in namespace ns, to the groups and extra subjects of every
// tenant in chain (the ancestors, root first, then the tenant owning ns): ancestors see down.
func RoleBindings(ns string, chain []*tenancyv1.Tenant, groupPrefix string) []*rbacv1ac.RoleBindingApplyConfiguration {
	out := make([]*rbacv1ac.RoleBindingApplyConfiguration, 0, len(tenancyv1.Roles))
	for _, role := range tenancyv1.Roles {
		rb := rbacv1ac.RoleBinding(RoleBindingName(role), ns).
			WithLabels(ManagedLabels).
			WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(ClusterRoleName(role)))
		for _, c := range chain {
			rb.WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.GroupKind).WithAPIGroup(rbacv1.GroupName).
				WithName(GroupName(groupPrefix, OwnNamespace(keyOf(c)), role)))
			for _, a := range c.Spec.Access {
				if a.Role != role {
					continue
				}
				for _, s := range a.Subjects {
					sub := rbacv1ac.Subject().WithKind(s.Kind).WithName(s.Name)
					if s.Kind == rbacv1.ServiceAccountKind {
						sub.WithNamespace(s.Namespace)
					} else {
						sub.WithAPIGroup(rbacv1.GroupName)
					}
					rb.WithSubjects(sub)
				}
			}
		}
		out = append(out, rb)
	}
	return out
}

// NamespaceGrant gives a platform component's ServiceAccount the rights of a ClusterRole in every
// tenant namespace, the root tenant's included, and nowhere else: what a component needs where
// tenants order what it serves (namespaces RBAC cannot name in advance), without a cluster-wide
// grant that would reach the platform's own namespaces too.
type NamespaceGrant struct {
	ClusterRole    string
	ServiceAccount types.NamespacedName
}

// GrantRoleBindingName is the RoleBinding of a NamespaceGrant in a tenant namespace.
func GrantRoleBindingName(g NamespaceGrant) string { return "flotilla-grant-" + g.ClusterRole }

// ParseNamespaceGrants reads <clusterrole>=<namespace>/<serviceaccount>, comma-separated.
func ParseNamespaceGrants(v string) ([]NamespaceGrant, error) {
	var out []NamespaceGrant
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		role, sa, _ := strings.Cut(item, "=")
		ns, name, _ := strings.Cut(sa, "/")
		g := NamespaceGrant{ClusterRole: role, ServiceAccount: types.NamespacedName{Namespace: ns, Name: name}}
		if role == "" || len(path.IsValidPathSegmentName(role)) > 0 || len(GrantRoleBindingName(g)) > validation.DNS1123SubdomainMaxLength ||
			len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return nil, fmt.Errorf("%q: want <clusterrole>=<namespace>/<serviceaccount>", item)
		}
		out = append(out, g)
	}
	return out, nil
}

// GrantRoleBindings binds, in namespace ns, each grant's ClusterRole to its ServiceAccount.
func GrantRoleBindings(ns string, grants []NamespaceGrant) []*rbacv1ac.RoleBindingApplyConfiguration {
	out := make([]*rbacv1ac.RoleBindingApplyConfiguration, 0, len(grants))
	for _, g := range grants {
		out = append(out, rbacv1ac.RoleBinding(GrantRoleBindingName(g), ns).
			WithLabels(ManagedLabels).
			WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(g.ClusterRole)).
			WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).
				WithNamespace(g.ServiceAccount.Namespace).WithName(g.ServiceAccount.Name)))
	}
	return out
}

// OwnQuota is what is left of a tenant's declared quota for its own namespace once its children's
// reservations are taken out (never below zero), and, for each object count in counts that it does
// not declare, the value counts gives: the provider's cap on every tenant namespace (nil for the
// root's).
func OwnQuota(t *tenancyv1.Tenant, children []tenancyv1.Tenant, counts corev1.ResourceList) corev1.ResourceList {
	if len(t.Spec.ResourceQuotas) == 0 && len(counts) == 0 {
		return nil
	}
	hard := corev1.ResourceList{}
	for name, limit := range counts {
		hard[name] = limit.DeepCopy()
	}
	for name := range t.Spec.ResourceQuotas {
		left, _ := quotaOf(t, name)
		left = left.DeepCopy()
		for i := range children {
			if r, ok := quotaOf(&children[i], name); ok {
				left.Sub(r)
			}
		}
		if left.Sign() < 0 {
			left = resource.Quantity{}
		}
		hard[name] = left
	}
	return hard
}

// ParseObjectCounts reads the provider's object counts (the controller's -object-counts flag):
// count/<resource>[.<group>]=<n>, comma-separated.
func ParseObjectCounts(v string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, n, ok := strings.Cut(item, "=")
		if !ok || !strings.HasPrefix(name, "count/") || len(name) == len("count/") {
			return nil, fmt.Errorf("%q: want count/<resource>[.<group>]=<n>", item)
		}
		q, err := resource.ParseQuantity(n)
		if err != nil || q.Sign() < 0 || q.MilliValue()%1000 != 0 {
			return nil, fmt.Errorf("%q: the count must be a whole number, not below zero", item)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

// ZeroQuota is the quota of a tenant that does not fit its parent's: zero for everything the
// tenant declares, the parent caps or counts names, so that nothing counted can be added to its
// namespace.
func ZeroQuota(t, parent *tenancyv1.Tenant, counts corev1.ResourceList) corev1.ResourceList {
	hard := corev1.ResourceList{}
	for _, rl := range []corev1.ResourceList{t.Spec.ResourceQuotas, parent.Spec.ResourceQuotas, counts} {
		for name := range rl {
			hard[name] = resource.Quantity{}
		}
	}
	return hard
}

// ResourceQuota is the tenant namespace's quota, or nil when the tenant declares none.
func ResourceQuota(ns string, hard corev1.ResourceList) *corev1ac.ResourceQuotaApplyConfiguration {
	if len(hard) == 0 {
		return nil
	}
	return corev1ac.ResourceQuota(QuotaName, ns).WithLabels(ManagedLabels).
		WithSpec(corev1ac.ResourceQuotaSpec().WithHard(hard))
}

// LimitRange is the tenant namespace's container defaults, or nil when the tenant declares none.
func LimitRange(ns string, t *tenancyv1.Tenant) *corev1ac.LimitRangeApplyConfiguration {
	lr := t.Spec.LimitRange
	if lr == nil || (len(lr.Default) == 0 && len(lr.DefaultRequest) == 0) {
		return nil
	}
	item := corev1ac.LimitRangeItem().WithType(corev1.LimitTypeContainer)
	if len(lr.Default) > 0 {
		item.WithDefault(quantity.CapAll(lr.Default))
	}
	if len(lr.DefaultRequest) > 0 {
		item.WithDefaultRequest(quantity.CapAll(lr.DefaultRequest))
	}
	return corev1ac.LimitRange(LimitRangeName, ns).WithLabels(ManagedLabels).
		WithSpec(corev1ac.LimitRangeSpec().WithLimits(item))
}

// NetworkPolicies isolate a tenant namespace: its pods accept traffic from the namespace itself,
// from its ancestors' and its descendants' namespaces (its own line of the tree, up and down) and
// from platform namespaces, never from siblings or their subtrees. The root tenant is the
// platform's own: every tenant descends from it, so its descendants reach only the shared
// services it provides. For each shared service the tenant provides, a second policy lets the service's pods
// (labelled tenancy.flotilla.dev/service=<service>) accept traffic from every namespace using it.
func NetworkPolicies(p Placement, t *tenancyv1.Tenant) []*netv1ac.NetworkPolicyApplyConfiguration {
	rules := []*netv1ac.NetworkPolicyIngressRuleApplyConfiguration{
		netv1ac.NetworkPolicyIngressRule().WithFrom(netv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector())),
		netv1ac.NetworkPolicyIngressRule().WithFrom(netv1ac.NetworkPolicyPeer().WithNamespaceSelector(
			metav1ac.LabelSelector().WithMatchLabels(map[string]string{tenancyv1.LabelPlatform: "true"}))),
	}
	if len(p.Ancestors) > 0 {
		rules = append(rules,
			netv1ac.NetworkPolicyIngressRule().WithFrom(netv1ac.NetworkPolicyPeer().WithNamespaceSelector(
				metav1ac.LabelSelector().WithMatchExpressions(metav1ac.LabelSelectorRequirement().
					WithKey(corev1.LabelMetadataName).WithOperator(metav1.LabelSelectorOpIn).WithValues(p.Ancestors...)))),
			netv1ac.NetworkPolicyIngressRule().WithFrom(netv1ac.NetworkPolicyPeer().WithNamespaceSelector(
				metav1ac.LabelSelector().WithMatchLabels(map[string]string{tenancyv1.AncestorLabel(p.Namespace): "true"}))))
	}
	out := []*netv1ac.NetworkPolicyApplyConfiguration{
		netv1ac.NetworkPolicy(IsolationPolicy, p.Namespace).WithLabels(ManagedLabels).WithSpec(
			netv1ac.NetworkPolicySpec().WithPodSelector(metav1ac.LabelSelector()).
				WithPolicyTypes(networkingv1.PolicyTypeIngress).WithIngress(rules...)),
	}
	for _, s := range []struct {
		name, label string
		on          bool
	}{
		{"ingress", tenancyv1.LabelIngress, t.Spec.Ingress},
		{"monitoring", tenancyv1.LabelMonitoring, t.Spec.Monitoring},
		{"etcd", tenancyv1.LabelEtcd, t.Spec.Etcd},
	} {
		if !s.on {
			continue
		}
		out = append(out, netv1ac.NetworkPolicy(servicePolicyStem+s.name, p.Namespace).WithLabels(ManagedLabels).WithSpec(
			netv1ac.NetworkPolicySpec().
				WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{tenancyv1.LabelService: s.name})).
				WithPolicyTypes(networkingv1.PolicyTypeIngress).
				WithIngress(netv1ac.NetworkPolicyIngressRule().WithFrom(netv1ac.NetworkPolicyPeer().WithNamespaceSelector(
					metav1ac.LabelSelector().WithMatchLabels(map[string]string{s.label: p.Namespace}))))))
	}
	return out
}
