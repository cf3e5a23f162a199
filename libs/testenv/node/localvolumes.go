package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// LocalVolumes is the StorageClass of volumes on the node's own disk (StartLocalVolumes).
const LocalVolumes = "local-path"

// localPathNamespace is where the provisioner and its helper pods run.
const localPathNamespace = "local-path-storage"

// StartLocalVolumes runs Rancher's local-path-provisioner (built by libs/builder) on the node: a
// claim of the StorageClass local-path gets a directory under <Dir>/volumes, made and removed by a
// helper pod (a static busybox) on this node. The class's topology is this node only, so that a
// pod with such a claim is placed here and not on a Node a demo or a test made by hand. Like
// CoreDNS, the provisioner is a DaemonSet pinned to the node (the demo runs no deployment
// controller). It returns once the provisioner runs.
func (n *Node) StartLocalVolumes(ctx context.Context) error {
	bin, err := testenv.BinDir()
	if err != nil {
		return err
	}
	debs, err := testenv.NodeDebsRoot()
	if err != nil {
		return err
	}
	provisioner, err := n.PushImage(ctx, "local-path-provisioner", map[string]string{
		"/local-path-provisioner": filepath.Join(bin, "local-path-provisioner")}, "/local-path-provisioner")
	if err != nil {
		return err
	}
	busybox := filepath.Join(debs, "bin", "busybox") // the applet is its name: sh, mkdir, rm
	helper, err := n.PushImage(ctx, "local-path-helper", map[string]string{"/bin/sh": busybox, "/bin/mkdir": busybox, "/bin/rm": busybox}, "/bin/sh")
	if err != nil {
		return err
	}
	volumes := filepath.Join(n.Dir, "volumes")
	if err := os.MkdirAll(volumes, 0o755); err != nil {
		return err
	}

	const name = "local-path-provisioner"
	labels := map[string]string{"app": name}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: localPathNamespace, Labels: labels}
	}
	// The helper pod makes and removes a volume's directory as root (the directory is then open to
	// the pod's user, whichever it is: a hostPath volume takes no fsGroup).
	config := map[string]string{
		"config.json": fmt.Sprintf(`{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [%q]}]}`, volumes),
		"setup":       "set -eu\nmkdir -m 0777 -p \"$VOL_DIR\"\n",
		"teardown":    "set -eu\nrm -rf \"$VOL_DIR\"\n",
		"helperPod.yaml": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: helper-pod}
spec:
  securityContext: {runAsUser: 0}
  containers: [{name: helper-pod, image: %q}]
`, helper),
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: localPathNamespace}},
		&corev1.ServiceAccount{ObjectMeta: meta(name)},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "flotilla:" + name}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{storagev1.GroupName}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "flotilla:" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla:" + name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: localPathNamespace}}},
		// Its helper pods, in its own namespace only.
		&rbacv1.Role{ObjectMeta: meta(name), Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: meta(name),
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: localPathNamespace}}},
		&corev1.ConfigMap{ObjectMeta: meta("local-path-config"), Data: config},
		&appsv1.DaemonSet{ObjectMeta: meta(name), Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: name,
				NodeSelector:       map[string]string{corev1.LabelHostname: n.Name},
				Containers: []corev1.Container{{
					Name: name, Image: provisioner,
					Args: []string{"start", "--config", "/etc/config/config.json", "--service-account-name", name},
					Env: []corev1.EnvVar{
						{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
						{Name: "CONFIG_MOUNT_PATH", Value: "/etc/config/"},
					},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/config", ReadOnly: true}},
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
				}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "local-path-config"}}}}},
			}},
		}},
		&storagev1.StorageClass{
			ObjectMeta:        metav1.ObjectMeta{Name: LocalVolumes},
			Provisioner:       "rancher.io/local-path",
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
			AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
				{Key: corev1.LabelHostname, Values: []string{n.Name}}}}},
		},
	}
	for _, o := range objs {
		if err := ensure(ctx, n.env.Client, o); err != nil {
			return err
		}
	}
	return waitFor(ctx, "the local-path provisioner to run", filepath.Join(n.Dir, "logs", "kubelet.log"), 3*time.Minute, func(ctx context.Context) (bool, error) {
		d := &appsv1.DaemonSet{}
		if err := n.env.Client.Get(ctx, types.NamespacedName{Namespace: localPathNamespace, Name: name}, d); err != nil {
			return false, err
		}
		return d.Status.NumberAvailable > 0, nil
	})
}
