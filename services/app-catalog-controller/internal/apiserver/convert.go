package apiserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/libs/apis/meta"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// An app is stored as its HelmRelease and nothing else:
//
//	app metadata.name            label apps.flotilla.dev/name (HelmRelease name: <prefix><name>)
//	app metadata.namespace       spec.targetNamespace; the HelmRelease itself is in the tenant's
//	                               delivery namespace (tenancyv1.DeliveryNamespace), out of its reach
//	app kind                     label apps.flotilla.dev/kind
//	app labels, annotations      the HelmRelease's, minus the apps.flotilla.dev/ ones
//	app managedFields            annotation apps.flotilla.dev/managed-fields
//	app uid, resourceVersion,    the HelmRelease's
//	  generation, timestamps
//	app spec (the values)        spec.values, minus the platform's "flotilla" key
//	spec.deletionProtection      label apps.flotilla.dev/deletion-protection (libs/apis/meta)
//	spec.volumePolicy            annotation apps.flotilla.dev/volume-policy
//	app status                   computed from the HelmRelease's status on every read

// toApp converts a HelmRelease into its app. It never modifies hr (it comes from a shared cache).
func toApp(k *catalog.Kind, hr *helmv2.HelmRelease) (*unstructured.Unstructured, error) {
	spec := map[string]any{}
	if hr.Spec.Values != nil && len(hr.Spec.Values.Raw) > 0 {
		// utiljson keeps integers int64, as the apiserver's decoder does for requests.
		if err := utiljson.Unmarshal(hr.Spec.Values.Raw, &spec); err != nil {
			return nil, fmt.Errorf("HelmRelease %s/%s has unreadable values: %w", hr.Namespace, hr.Name, err)
		}
	}
	delete(spec, catalogv1.PlatformValuesKey)
	if hr.Labels[catalogv1.LabelDeletionProtection] == "true" {
		spec[catalog.DeletionProtectionField] = true
	}
	if p := hr.Annotations[catalogv1.AnnotationVolumePolicy]; p != "" {
		spec[catalog.VolumePolicyField] = p
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(k.GVK)
	u.SetName(hr.Labels[catalogv1.LabelAppName])
	u.SetNamespace(catalog.AppNamespace(hr))
	u.SetUID(hr.UID)
	u.SetResourceVersion(hr.ResourceVersion)
	u.SetGeneration(hr.Generation)
	u.SetCreationTimestamp(hr.CreationTimestamp)
	u.SetDeletionTimestamp(hr.DeletionTimestamp)
	u.SetLabels(userKeys(hr.Labels))
	u.SetAnnotations(userKeys(hr.Annotations))
	if mf := hr.Annotations[catalogv1.AnnotationManagedFields]; mf != "" {
		var fields []metav1.ManagedFieldsEntry
		if err := json.Unmarshal([]byte(mf), &fields); err == nil {
			u.SetManagedFields(fields)
		}
	}
	status, err := runtimeStatus(k, hr)
	if err != nil {
		return nil, err
	}
	u.Object["status"] = status
	return u, nil
}

// userKeys returns the labels or annotations that belong to the customer.
func userKeys(in map[string]string) map[string]string {
	var out map[string]string
	for key, v := range in {
		if strings.HasPrefix(key, catalogv1.AppsPrefix) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(in))
		}
		out[key] = v
	}
	return out
}

// AppStatus is the status of an app, derived from its HelmRelease.
type AppStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	Version            string             `json:"version,omitempty"`
	Message            string             `json:"message,omitempty"`
	ReleaseName        string             `json:"releaseName,omitempty"`
	Outputs            []Output           `json:"outputs,omitempty"`
}

// Output is a Secret or Service of the app the tenant may use.
type Output struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

func runtimeStatus(k *catalog.Kind, hr *helmv2.HelmRelease) (map[string]any, error) {
	st := appStatus(k, hr)
	return runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
}

// appStatus mirrors the HelmRelease's Ready condition in kstatus terms. The HelmRelease's
// condition counts only once it is about the HelmRelease's current generation. Pods that cannot
// start (the workloads annotation) keep an app from being Ready whatever its release says; an
// installed release whose definition asks for readiness is Ready once the app-catalog-controller
// has found what it waits for ready (it removes the starting annotation).
func appStatus(k *catalog.Kind, hr *helmv2.HelmRelease) AppStatus {
	st := AppStatus{ReleaseName: hr.Name}
	if latest := hr.Status.History.Latest(); latest != nil {
		st.Version = latest.ChartVersion
	}
	for _, s := range k.Definition.Spec.Expose.Secrets {
		st.Outputs = append(st.Outputs, Output{Kind: "Secret", Name: strings.ReplaceAll(s, "$(release)", hr.Name)})
	}
	for _, s := range k.Definition.Spec.Expose.Services {
		st.Outputs = append(st.Outputs, Output{Kind: "Service", Name: strings.ReplaceAll(s, "$(release)", hr.Name)})
	}
	ready := apimeta.FindStatusCondition(hr.Status.Conditions, fluxmeta.ReadyCondition)
	stalled := apimeta.FindStatusCondition(hr.Status.Conditions, fluxmeta.StalledCondition)
	cond := func(t string, s metav1.ConditionStatus, reason, msg string, at metav1.Time) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: hr.Generation, LastTransitionTime: at}
	}
	at := hr.CreationTimestamp
	if ready != nil {
		at = ready.LastTransitionTime
	}
	observed := ready != nil && hr.Status.ObservedGeneration == hr.Generation
	switch {
	case hr.DeletionTimestamp != nil:
		st.Message = "the app is being deleted: its Helm release is uninstalled"
		st.Conditions = []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionFalse, meta.DeletingReason, st.Message, *hr.DeletionTimestamp),
			cond(meta.ReconcilingCondition, metav1.ConditionTrue, meta.DeletingReason, st.Message, *hr.DeletionTimestamp),
		}
	case hr.Annotations[catalogv1.AnnotationWorkloads] != "":
		// Its pods cannot start: not Ready until they can (or its spec changes).
		st.Message = hr.Annotations[catalogv1.AnnotationWorkloads]
		st.Conditions = []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionFalse, catalogv1.PodsCannotStartReason, st.Message, at),
			cond(meta.ReconcilingCondition, metav1.ConditionTrue, catalogv1.PodsCannotStartReason, st.Message, at),
		}
	case !observed && ready != nil && ready.ObservedGeneration == hr.Generation:
		// helm-controller is acting on this generation (installing or upgrading its release)
		// and says so.
		st.Message = ready.Message
		st.Conditions = []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionUnknown, ready.Reason, st.Message, at),
			cond(meta.ReconcilingCondition, metav1.ConditionTrue, ready.Reason, st.Message, at),
		}
	case !observed:
		st.Message = fmt.Sprintf("waiting for helm-controller to act on generation %d", hr.Generation)
		st.Conditions = []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionUnknown, meta.ProgressingReason, st.Message, at),
			cond(meta.ReconcilingCondition, metav1.ConditionTrue, meta.ProgressingReason, st.Message, at),
		}
	case ready.Status == metav1.ConditionTrue && hr.Annotations[catalogv1.AnnotationStarting] != "":
		// Installed; its definition asks for its workloads (or what its health checks judge) to be ready.
		st.Message = hr.Annotations[catalogv1.AnnotationStarting]
		st.Conditions = []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionFalse, catalogv1.PodsStartingReason, st.Message, at),
			cond(meta.ReconcilingCondition, metav1.ConditionTrue, catalogv1.PodsStartingReason, st.Message, at),
		}
	case ready.Status == metav1.ConditionTrue:
		st.ObservedGeneration = hr.Generation
		st.Message = ready.Message
		st.Conditions = []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, ready.Reason, ready.Message, at)}
	case stalled != nil && stalled.Status == metav1.ConditionTrue:
		st.ObservedGeneration = hr.Generation
		st.Message = stalled.Message
		st.Conditions = []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionFalse, ready.Reason, ready.Message, at),
			cond(meta.StalledCondition, metav1.ConditionTrue, stalled.Reason, stalled.Message, stalled.LastTransitionTime),
		}
	default:
		st.Message = ready.Message
		st.Conditions = []metav1.Condition{
			cond(meta.ReadyCondition, ready.Status, ready.Reason, ready.Message, at),
			cond(meta.ReconcilingCondition, metav1.ConditionTrue, ready.Reason, ready.Message, at),
		}
	}
	return st
}

// platformValues are the values the platform adds under the "flotilla" key: who the app
// belongs to and which shared services its tenant uses, read from the tenant's namespace, and the
// registry its images come from.
func platformValues(k *catalog.Kind, name string, ns *corev1.Namespace, registry string) map[string]any {
	services := map[string]any{}
	for key, label := range map[string]string{
		"ingress": tenancyv1.LabelIngress, "monitoring": tenancyv1.LabelMonitoring, "etcd": tenancyv1.LabelEtcd,
	} {
		if v := ns.Labels[label]; v != "" {
			services[key] = v
		}
	}
	v := map[string]any{
		"app":       map[string]any{"kind": k.GVK.Kind, "name": name, "release": k.ReleasePrefix + name},
		"namespace": ns.Name,
		"services":  services,
	}
	if t := ns.Labels[tenancyv1.LabelTenant]; t != "" {
		v["tenant"] = t
	}
	if h := ns.Annotations[tenancyv1.AnnotationHost]; h != "" {
		v["host"] = h
	}
	if s := ns.Labels[tenancyv1.LabelSchedulingClass]; s != "" {
		v["schedulingClass"] = s
	}
	if registry != "" {
		v["registry"] = registry
	}
	return v
}

// toHelmRelease writes an app (already defaulted and validated) into hr: a new HelmRelease, or
// the app's current one on update, whose status and foreign fields are kept.
func toHelmRelease(k *catalog.Kind, app *unstructured.Unstructured, ns *corev1.Namespace, registry string, hr *helmv2.HelmRelease) error {
	def := k.Definition.Spec
	before := hr.Spec.DeepCopy()
	spec, _ := app.Object["spec"].(map[string]any)
	values := maps.Clone(spec)
	if values == nil {
		values = map[string]any{}
	}
	protect, _ := values[catalog.DeletionProtectionField].(bool)
	policy, _ := values[catalog.VolumePolicyField].(string)
	delete(values, catalog.DeletionProtectionField)
	delete(values, catalog.VolumePolicyField)
	values[catalogv1.PlatformValuesKey] = platformValues(k, app.GetName(), ns, registry)
	raw, err := json.Marshal(values)
	if err != nil {
		return err
	}

	if hr.Name == "" {
		hr.Name = k.ReleasePrefix + app.GetName()
		hr.Namespace = tenancyv1.DeliveryNamespace(app.GetNamespace())
	}
	hr.Labels = userKeys(app.GetLabels())
	if hr.Labels == nil {
		hr.Labels = map[string]string{}
	}
	hr.Labels[catalogv1.LabelAppKind] = k.GVK.Kind
	hr.Labels[catalogv1.LabelAppName] = app.GetName()
	hr.Labels[catalogv1.LabelDefinition] = k.Definition.Name
	kept := hr.Annotations // the app-catalog-controller's, kept across updates
	hr.Annotations = userKeys(app.GetAnnotations())
	if hr.Annotations == nil {
		hr.Annotations = map[string]string{}
	}
	for _, key := range []string{catalogv1.AnnotationWorkloads, catalogv1.AnnotationStarting} {
		if v := kept[key]; v != "" {
			hr.Annotations[key] = v
		}
	}
	if protect {
		hr.Labels[catalogv1.LabelDeletionProtection] = "true"
	}
	if policy != "" {
		hr.Annotations[catalogv1.AnnotationVolumePolicy] = policy
	}
	if mf := app.GetManagedFields(); len(mf) > 0 {
		b, err := json.Marshal(mf)
		if err != nil {
			return err
		}
		hr.Annotations[catalogv1.AnnotationManagedFields] = string(b)
	}

	interval := durationOr(def.Release.Interval, 10*time.Minute)
	hr.Spec.ReleaseName = hr.Name
	hr.Spec.Interval = interval
	// Installed into the tenant's namespace as the app's own identity (the ServiceAccount name of
	// the delivery namespace that is its HelmRelease's), held to the objects of its own release;
	// Helm's records and the chart's source are kept in the delivery namespace (see
	// tenancyv1.DeliveryNamespace).
	hr.Spec.TargetNamespace = app.GetNamespace()
	hr.Spec.StorageNamespace = hr.Namespace
	hr.Spec.ServiceAccountName = hr.Name
	hr.Spec.Chart = &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{
		Chart: def.Chart.Name, Version: def.Chart.Version,
		SourceRef: helmv2.CrossNamespaceObjectReference{
			Kind: def.Chart.SourceRef.Kind, Name: catalog.SourceCopyName(def.Chart.SourceRef), Namespace: hr.Namespace,
		},
	}}
	// Never uninstall: a failed install is retried as it is, a failed upgrade is rolled back to
	// the last good release. An app's data must not disappear because a release failed. Helm
	// never waits for the release's objects: that would hold one of helm-controller's workers for
	// as long as an app cannot start (its readiness is judged by the app-catalog-controller).
	hr.Spec.Install = &helmv2.Install{
		Timeout:     ptr.To(durationOr(def.Release.InstallTimeout, 5*time.Minute)),
		CRDs:        helmv2.CreateReplace,
		DisableWait: true,
		// An object that exists and is not this release's is never taken over (Flux takes
		// ownership by default): the install fails naming it, and the object is left alone.
		DisableTakeOwnership: true,
		Strategy:             &helmv2.InstallStrategy{Name: string(helmv2.ActionStrategyRetryOnFailure), RetryInterval: &metav1.Duration{Duration: time.Minute}},
	}
	hr.Spec.Upgrade = &helmv2.Upgrade{
		Timeout:              ptr.To(durationOr(def.Release.UpgradeTimeout, 5*time.Minute)),
		CRDs:                 helmv2.CreateReplace,
		DisableWait:          true,
		DisableTakeOwnership: true,
		Remediation: &helmv2.UpgradeRemediation{
			Retries: 1, RemediateLastFailure: ptr.To(true), Strategy: ptr.To(helmv2.RollbackRemediationStrategy),
		},
	}
	hr.Spec.Values = &apiextensionsv1.JSON{Raw: raw}
	if def.Readiness.Waits() && !equality.Semantic.DeepEqual(before, &hr.Spec) {
		// A new generation starts anew; the app-catalog-controller says when it is ready.
		hr.Annotations[catalogv1.AnnotationStarting] = StartingMessage
	}
	return nil
}

// StartingMessage is what an app whose definition asks for readiness says until the
// app-catalog-controller has judged its installed release.
const StartingMessage = "waiting for its release to be installed and its pods to start"

func durationOr(d *metav1.Duration, def time.Duration) metav1.Duration {
	if d != nil {
		return *d
	}
	return metav1.Duration{Duration: def}
}
