package node

import (
	"context"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// corefile serves cluster.local from the Kubernetes API and nothing else (there is no upstream
// here), on an unprivileged port: the image runs as a non-root user.
const corefile = `.:1053 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
    loop
    loadbalance
}
`

// startDNS deploys CoreDNS (kube-system/coredns behind the kube-dns Service at the cluster DNS
// address kubelet hands every pod) as a DaemonSet on this node, and waits for it to be available:
// a DaemonSet, so that it runs on this node and no other (the Nodes tests make by hand run nothing).
func (n *Node) startDNS(ctx context.Context) error {
	labels := map[string]string{"k8s-app": "kube-dns"}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem, Labels: labels}
	}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	probe := func(path string, port int) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port)}}, PeriodSeconds: 2}
	}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: meta("coredns")},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "coredns", Namespace: metav1.NamespaceSystem}}},
		&corev1.ConfigMap{ObjectMeta: meta("coredns"), Data: map[string]string{"Corefile": corefile}},
		&appsv1.DaemonSet{ObjectMeta: meta("coredns"), Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: "coredns",
				// On this node: the Nodes a demo or a test makes by hand run nothing.
				NodeSelector:      map[string]string{corev1.LabelHostname: n.Name},
				DNSPolicy:         corev1.DNSDefault,
				PriorityClassName: "system-cluster-critical",
				Containers: []corev1.Container{{
					Name: "coredns", Image: n.Images["coredns"], Args: []string{"-conf", "/etc/coredns/Corefile"},
					Ports:           []corev1.ContainerPort{{Name: "dns", ContainerPort: 1053, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: 1053, Protocol: corev1.ProtocolTCP}},
					VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
					LivenessProbe:   probe("/health", 8080),
					ReadinessProbe:  probe("/ready", 8181),
					SecurityContext: restricted,
				}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}}},
			}},
		}},
		&corev1.Service{ObjectMeta: meta("kube-dns"), Spec: corev1.ServiceSpec{
			Selector: labels, ClusterIP: n.Net.DNSIP().String(),
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, TargetPort: intstr.FromInt(1053), Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt(1053), Protocol: corev1.ProtocolTCP},
			},
		}},
	}
	for _, o := range objs {
		if err := ensure(ctx, n.env.Client, o); err != nil {
			return err
		}
	}
	return waitFor(ctx, "CoreDNS to be available", filepath.Join(n.Dir, "logs", "kubelet.log"), 3*time.Minute, func(ctx context.Context) (bool, error) {
		d := &appsv1.DaemonSet{}
		if err := n.env.Client.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceSystem, Name: "coredns"}, d); err != nil {
			return false, err
		}
		return d.Status.NumberAvailable > 0, nil
	})
}
