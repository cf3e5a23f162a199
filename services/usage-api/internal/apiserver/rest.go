package apiserver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/apis/meta"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/usage"
)

// reporter makes a report; usage.Engine is one.
type reporter interface {
	Report(ctx context.Context, s usage.Scope, p usage.Period) (usagev1.Report, error)
}

// reports is the usagereports resource: create only, nothing stored.
type reports struct {
	reporter reporter
	limits   limits
	reader   client.Reader // namespaces and HelmReleases, from the cache
	now      func() time.Time
}

var (
	_ rest.Creater              = &reports{}
	_ rest.Scoper               = &reports{}
	_ rest.SingularNameProvider = &reports{}
)

func (r *reports) New() runtime.Object     { return &usagev1.UsageReport{} }
func (r *reports) Destroy()                {}
func (r *reports) NamespaceScoped() bool   { return true }
func (r *reports) GetSingularName() string { return "usagereport" }

// Create answers a report. Authorization (create usagereports in the namespace) was done by the
// generic server; the report covers only the namespace's tenant and its descendants.
func (r *reports) Create(ctx context.Context, obj runtime.Object, validate rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	in, ok := obj.(*usagev1.UsageReport)
	if !ok {
		return nil, apierrors.NewBadRequest("not a UsageReport")
	}
	if validate != nil {
		if err := validate(ctx, obj); err != nil {
			return nil, err
		}
	}
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	errs := r.limits.validate(&in.Spec, r.now())
	scope, scopeErrs, err := r.scope(ctx, namespace, &in.Spec)
	if err != nil {
		return nil, err
	}
	if errs = append(errs, scopeErrs...); len(errs) > 0 {
		return nil, apierrors.NewInvalid(usagev1.GroupVersion.WithKind("UsageReport").GroupKind(), in.Name, errs)
	}
	period := usage.Period{Start: in.Spec.StartTimestamp.Time, End: in.Spec.EndTimestamp.Time}
	period.Step = period.End.Sub(period.Start)
	if in.Spec.Step != nil {
		period.Step = in.Spec.Step.Duration
	}
	report, err := r.reporter.Report(ctx, scope, period)
	if errors.Is(err, usage.ErrUnavailable) {
		return nil, apierrors.NewServiceUnavailable(err.Error())
	}
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := in.DeepCopy()
	out.Namespace, out.ManagedFields = namespace, nil
	out.Spec.Tenant = scope.Tenants[0].Name
	out.Report = report
	return out, nil
}

// scope is the namespace's tenant, its descendants and their apps.
func (r *reports) scope(ctx context.Context, namespace string, spec *usagev1.UsageReportSpec) (usage.Scope, field.ErrorList, error) {
	var s usage.Scope
	ns := &corev1.Namespace{}
	if err := r.reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); client.IgnoreNotFound(err) != nil {
		return s, nil, apierrors.NewInternalError(err)
	}
	tenant, path := ns.Labels[tenancyv1.LabelTenant], ns.Labels[tenancyv1.LabelPath]
	if tenant == "" || path == "" {
		return s, field.ErrorList{field.Invalid(field.NewPath("metadata", "namespace"), namespace, "is not a tenant's namespace")}, nil
	}
	if spec.Tenant != "" && spec.Tenant != tenant {
		return s, field.ErrorList{field.Invalid(field.NewPath("spec", "tenant"), spec.Tenant,
			"must be the namespace's tenant, "+tenant+" (or be left out)")}, nil
	}
	var nss corev1.NamespaceList
	if err := r.reader.List(ctx, &nss, client.HasLabels{tenancyv1.LabelTenant}); err != nil {
		return s, nil, apierrors.NewInternalError(err)
	}
	type member struct{ path, name, namespace string }
	var members []member
	for _, n := range nss.Items {
		p := n.Labels[tenancyv1.LabelPath]
		if p == path || strings.HasPrefix(p, path+".") {
			members = append(members, member{p, n.Labels[tenancyv1.LabelTenant], n.Name})
		}
	}
	// The tenant first, then its descendants depth first, as the tree reads.
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.path, b.path) })
	inScope := map[string]bool{}
	for _, m := range members {
		s.Tenants = append(s.Tenants, usage.Tenant{Name: m.name, Namespace: m.namespace, Delivery: tenancyv1.DeliveryNamespace(m.namespace)})
		inScope[m.namespace] = true
	}
	var hrs helmv2.HelmReleaseList
	if err := r.reader.List(ctx, &hrs, client.HasLabels{meta.LabelAppKind}); err != nil {
		return s, nil, apierrors.NewInternalError(err)
	}
	s.Apps = map[usage.Release]usagev1.WorkloadReference{}
	for _, hr := range hrs.Items {
		// Only as the apps API stores an app: in its target's delivery namespace, which tenants
		// cannot write. A HelmRelease elsewhere names nothing. (Apps deleted since are found by
		// the engine in the metrics store's history, under the same rule.)
		if target := hr.GetReleaseNamespace(); inScope[target] && hr.Namespace == tenancyv1.DeliveryNamespace(target) {
			s.Apps[usage.Release{Namespace: target, Name: hr.GetReleaseName()}] = usagev1.WorkloadReference{
				Kind: hr.Labels[meta.LabelAppKind], Name: hr.Labels[meta.LabelAppName],
			}
		}
	}
	s.Workload = spec.Workload
	return s, nil, nil
}
