package catalog

import (
	helmv2 "github.com/fluxcd/helm-controller/api/v2"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// ReleaseLabel is Helm's convention for the release an object belongs to, which the catalog's
// charts follow: an app's volumes, pods and workloads carry it with the app's release name.
const ReleaseLabel = "app.kubernetes.io/instance"

// SourceCopyName names a catalog source's copy in a tenant's delivery namespace. Under Flux's
// multi-tenancy lockdown (--no-cross-namespace-refs) a HelmRelease may use only sources in its own
// namespace, so each delivery namespace holds copies of the sources its apps' charts come from;
// the deliverysource controller keeps them.
func SourceCopyName(ref catalogv1.SourceReference) string {
	return ref.Namespace + "." + ref.Name
}

// AppNamespace is the namespace of the app a HelmRelease holds: the tenant namespace it installs
// into (the HelmRelease itself lives in the tenant's delivery namespace).
func AppNamespace(hr *helmv2.HelmRelease) string {
	if hr.Spec.TargetNamespace != "" {
		return hr.Spec.TargetNamespace
	}
	return hr.Namespace
}
