package linstor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/go-logr/logr"

	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
)

const gib = 1024 * 1024 // KiB

// A volume made while the view polls (between its requests) is never held with the free space
// from before it: the view then lets a resize through that its replicas' pools cannot take (CI
// saw TestOversizeResizeIsRefused admit one). The view reads the volumes first, so a volume it
// holds is always accounted for in the free space it holds; one made after that read is unknown
// until the next poll, and admission fails closed on an unknown volume.
func TestAVolumeMadeDuringAPollIsHeldWithTheSpaceItTakes(t *testing.T) {
	ctx := context.Background()
	d := linstordouble.New(linstordouble.Options{})
	for _, n := range []string{"node-1", "node-2"} {
		d.AddNode(n, nil, linstordouble.Pool{Name: "ssd", Kind: "LVM_THIN", TotalKiB: 100 * gib, FreeKiB: 100 * gib})
	}
	var raw *lapi.Client
	var spawn sync.Once
	// The volume is made right after the first of the poll's two reads (nodes, or volumes) is
	// answered, before the second.
	first := map[string]bool{"/v1/view/storage-pools": true, "/v1/view/resources": true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.Handler().ServeHTTP(w, r)
		if first[r.URL.Path] {
			spawn.Do(func() {
				if err := raw.ResourceGroups.Spawn(ctx, "rg", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-new", VolumeSizes: []int64{50 * gib}}); err != nil {
					t.Error(err)
				}
			})
		}
	}))
	t.Cleanup(srv.Close)
	base, _ := url.Parse(srv.URL)
	c, err := linstor.NewWithHTTPClient(base, srv.Client(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = lapi.NewClient(lapi.BaseURL(base), lapi.HTTPClient(srv.Client()), lapi.Log(discard{})); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateResourceGroup(ctx, storage.ResourceGroup{Name: "rg", Filter: storage.Filter{PlaceCount: 2, StoragePoolList: []string{"ssd"}}}); err != nil {
		t.Fatal(err)
	}

	v := linstor.NewView(c, time.Hour, logr.Discard())
	v.Refresh(ctx)
	nodes, err := v.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vol, ok := v.Volume("pvc-new")
	if !ok {
		return // made after the view read the volumes: unknown until the next poll
	}
	if fits, _ := storage.GrowFits(nodes, vol, 70*gib); fits {
		t.Errorf("the view holds pvc-new (50Gi on each of two 100Gi pools) with room to grow it by 70Gi: its free space is from before the volume")
	}
}

type discard struct{}

func (discard) Printf(string, ...any) {}
