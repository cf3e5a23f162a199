package deliverysource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// AnnotationSecretsOf, on a copy, holds a digest of the versions of the original's Secrets that its
// Secret copies hold (namespace, name, uid and resourceVersion of each; nothing of their content):
// they are written again only when it changes. A Secret copy deleted by hand is made again with
// its source copy (delete that too), or at the original's next change.
const AnnotationSecretsOf = "catalog.flotilla.dev/secrets-of"

// secretRefs are where a Flux source names a Secret of its namespace (source.toolkit.fluxcd.io/v1:
// credentials, a CA, a proxy, a verification key), each with the suffix its copy's name takes.
var secretRefs = []struct {
	path   []string
	suffix string
}{
	{[]string{"spec", "secretRef", "name"}, "auth"},
	{[]string{"spec", "certSecretRef", "name"}, "cert"},
	{[]string{"spec", "proxySecretRef", "name"}, "proxy"},
	{[]string{"spec", "verify", "secretRef", "name"}, "verify"},
}

// secretCopyName is the name of the copy, in a delivery namespace, of the Secret a source copy
// names for suffix.
func secretCopyName(copyName, suffix string) string { return copyName + "-" + suffix }

// secretCopiesOf are the Secret copies the source copy c names: the ones copySecrets made for it.
// The copy's spec is the record; a name there that is not its own Secret copy's (secretCopyName)
// was not written by copySecrets, and is not the catalog's to delete.
func secretCopiesOf(c *unstructured.Unstructured) []string {
	var names []string
	for _, ref := range secretRefs {
		name := secretCopyName(c.GetName(), ref.suffix)
		if got, _, _ := unstructured.NestedString(c.Object, ref.path...); got == name {
			names = append(names, name)
		}
	}
	return names
}

// copySecrets points copied (a source copy, its spec the original's) at copies, in its own
// namespace, of the Secrets the original names, and writes them unless live (the copy as it is,
// or nil) says they hold the originals' current versions. Copies that live names of Secrets the
// original no longer names are deleted. A private catalog thus works for apps: helm-controller,
// locked down to its HelmReleases' namespace, reads the copies; tenants, who cannot read their
// delivery namespace, never do.
func (r *Reconciler) copySecrets(ctx context.Context, orig, copied, live *unstructured.Unstructured) error {
	made := map[string]bool{}
	if live != nil {
		for _, name := range secretCopiesOf(live) {
			made[name] = true
		}
	}
	var versions []string
	var wanted []*corev1ac.SecretApplyConfiguration
	var unwanted []string
	for _, ref := range secretRefs {
		name := secretCopyName(copied.GetName(), ref.suffix)
		src, _, _ := unstructured.NestedString(orig.Object, ref.path...)
		if src == "" {
			if made[name] {
				unwanted = append(unwanted, name)
			}
			continue
		}
		secret := &corev1.Secret{}
		if r.Secrets == nil {
			return fmt.Errorf("%s %s/%s names Secret %s, and the catalog may read no Secret (--catalog-secret-namespaces is empty)",
				orig.GetKind(), orig.GetNamespace(), orig.GetName(), src)
		}
		if err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: orig.GetNamespace(), Name: src}, secret); err != nil {
			return fmt.Errorf("%s %s/%s names Secret %s, which the catalog cannot read (only in the namespaces of --catalog-secret-namespaces): %w",
				orig.GetKind(), orig.GetNamespace(), orig.GetName(), src, err)
		}
		versions = append(versions, fmt.Sprintf("%s/%s@%s/%s", secret.Namespace, secret.Name, secret.UID, secret.ResourceVersion))
		if err := unstructured.SetNestedField(copied.Object, name, ref.path...); err != nil {
			return err
		}
		wanted = append(wanted, corev1ac.Secret(name, copied.GetNamespace()).
			WithLabels(map[string]string{catalogv1.LabelSourceCopy: "true"}).
			WithAnnotations(map[string]string{catalogv1.AnnotationSourceCopyOf: secret.Namespace + "/" + secret.Name}).
			WithType(secret.Type).WithData(secret.Data))
	}
	if len(versions) == 0 && (live == nil || live.GetAnnotations()[AnnotationSecretsOf] == "") {
		return nil // no credentials, now or before
	}
	sum := sha256.Sum256([]byte(strings.Join(versions, ",")))
	digest := hex.EncodeToString(sum[:])[:16]
	ann := copied.GetAnnotations()
	ann[AnnotationSecretsOf] = digest
	copied.SetAnnotations(ann)
	if live != nil && live.GetAnnotations()[AnnotationSecretsOf] == digest {
		return nil
	}
	for _, s := range wanted {
		if err := r.Client.Apply(ctx, s, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("copying Secret %s into %s: %w", *s.Name, copied.GetNamespace(), err)
		}
	}
	return r.deleteSecretCopies(ctx, copied.GetNamespace(), unwanted)
}

// deleteSecretCopies deletes the named Secret copies of namespace ns; one already gone (deleted by
// hand) is no error. The names are those a source copy records (secretCopiesOf), each a Secret the
// catalog made, so Forbidden is an error: a missing RBAC grant, or the admission policy refusing a
// Secret that is not a copy, must be seen.
func (r *Reconciler) deleteSecretCopies(ctx context.Context, ns string, names []string) error {
	for _, name := range names {
		s := &corev1.Secret{}
		s.Namespace, s.Name = ns, name
		if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}
