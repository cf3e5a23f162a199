package integration_test

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	"github.com/flotilla-dev/flotilla/libs/testenv"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// A Ready policy's filesystem changes, and kube-apiserver refuses the StorageClass made anew for
// it: every reconcile of the new generation fails after LINSTOR's resource group, before the
// StorageClass and the capacity are evaluated again. kstatus, the judge of Flux, kubectl wait and
// Argo CD, must not call the policy Current for that generation; once the StorageClass is
// admitted, it is.
func TestAFailedReconcileIsNeverReadyForTheNewSpec(t *testing.T) {
	ctx := context.Background()
	ownLINSTOR(t)
	create(t, replicated("refused"))
	p := condition(t, "refused", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	if s := testenv.KStatusOf(t, p); s != kstatus.CurrentStatus {
		t.Fatalf("a Ready policy: kstatus %s", s)
	}

	const message = "the test refuses this StorageClass"
	lift, err := testenv.Refuse(ctx, k8s, "test-refuse-storageclass", admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"storage.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"storageclasses"}},
	}, "object.metadata.name.startsWith('refused')", message, func(ctx context.Context) error {
		probe := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "refused-probe"}, Provisioner: "example.com/probe"}
		return k8s.Create(ctx, probe, client.DryRunAll)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lift(context.Background()) })

	patchSpec(t, "refused", func(p *storagepolicyv1.StoragePolicy) { p.Spec.Filesystem = "xfs" })
	// A reconcile of generation 2 wrote its verdict once Ready is about generation 2.
	eventually(t, 30*time.Second, "a verdict on generation 2", func() (bool, error) {
		if err := k8s.Get(ctx, types.NamespacedName{Name: "refused"}, p); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, fmeta.ReadyCondition)
		return p.Generation == 2 && c != nil && c.ObservedGeneration == 2, nil
	})
	for range 10 { // and so it stays while the reconciles fail
		if s := testenv.KStatusOf(t, p); s != kstatus.InProgressStatus {
			t.Fatalf("generation %d, its reconciles failing: kstatus %s, want %s (observedGeneration %d, %+v)",
				p.Generation, s, kstatus.InProgressStatus, p.Status.ObservedGeneration, p.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
		if err := k8s.Get(ctx, types.NamespacedName{Name: "refused"}, p); err != nil {
			t.Fatal(err)
		}
	}

	if err := lift(ctx); err != nil {
		t.Fatal(err)
	}
	p = condition(t, "refused", fmeta.ReadyCondition, metav1.ConditionTrue, "")
	if s := testenv.KStatusOf(t, p); s != kstatus.CurrentStatus {
		t.Errorf("generation 2 reconciled: kstatus %s", s)
	}
	sc := &storagev1.StorageClass{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "refused"}, sc); err != nil || sc.Parameters[storagepolicyv1.ParamFSType] != "xfs" {
		t.Errorf("the StorageClass of generation 2: %v %v", err, sc.Parameters)
	}
}
