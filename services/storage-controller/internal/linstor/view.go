package linstor

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
)

// View is an in-memory copy of LINSTOR's nodes, storage pools and resources, polled every
// Interval (never more often), for the capacity in policies' status and for admission, which must
// answer without a LINSTOR call per request. Changes of capacity are announced on Changed.
type View struct {
	Client   *Client
	Interval time.Duration
	Log      logr.Logger
	// Changed receives an event whenever what the view holds, or whether LINSTOR answers,
	// changes. Nothing is sent for polls that find everything as it was.
	Changed chan event.GenericEvent

	mu      sync.RWMutex
	nodes   []storage.Node
	byName  map[string]*storage.Node
	props   map[string]map[string]string // NodeProps' answers since the last poll, by key
	volumes map[string]storage.Volume
	err     error
	fetched bool
	poll    sync.Mutex
}

// NewView returns a view of c polled every interval.
func NewView(c *Client, interval time.Duration, log logr.Logger) *View {
	return &View{Client: c, Interval: interval, Log: log, Changed: make(chan event.GenericEvent, 1)}
}

// Start polls until ctx ends (a manager.Runnable).
func (v *View) Start(ctx context.Context) error {
	t := time.NewTicker(v.Interval)
	defer t.Stop()
	for {
		v.Refresh(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection: every replica keeps its own view, for its admission webhook.
func (v *View) NeedLeaderElection() bool { return false }

// Refresh polls LINSTOR now.
func (v *View) Refresh(ctx context.Context) {
	v.poll.Lock()
	defer v.poll.Unlock()
	// Volumes first: a volume made between the two reads is then unknown until the next poll
	// (admission fails closed on it) instead of held with the free space from before it, which
	// would let a resize through that its replicas' pools cannot take.
	volumes, err := v.Client.Volumes(ctx)
	var nodes []storage.Node
	if err == nil {
		nodes, err = v.Client.Nodes(ctx)
	}
	if ctx.Err() != nil {
		return
	}
	v.mu.Lock()
	changed := !v.fetched || (err == nil) != (v.err == nil) || (err == nil && !reflect.DeepEqual(nodes, v.nodes))
	if err == nil {
		v.nodes, v.volumes = nodes, volumes
		v.byName = make(map[string]*storage.Node, len(nodes))
		for i := range nodes {
			v.byName[nodes[i].Name] = &nodes[i]
		}
		v.props = nil
	}
	v.err, v.fetched = err, true
	v.mu.Unlock()
	if err != nil && changed {
		v.Log.Error(err, "LINSTOR did not answer")
	}
	if changed {
		select {
		case v.Changed <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{}}:
		default: // one pending announcement is enough: it makes every policy look again
		}
	}
}

// Nodes returns the nodes as last polled (polling first if it never has), or the error of the
// last poll.
func (v *View) Nodes(ctx context.Context) ([]storage.Node, error) {
	v.mu.RLock()
	fetched := v.fetched
	v.mu.RUnlock()
	if !fetched {
		v.Refresh(ctx)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.nodes, v.err
}

// NodesByName returns the nodes as last polled, by name, for many lookups under one lock. Each poll
// makes a new map: the caller must not change it.
func (v *View) NodesByName() map[string]*storage.Node {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.byName
}

// NodeProps returns every node's value of the LINSTOR property key (a node without it is left out),
// as last polled: worked out once per poll and key, for many lookups (the extender's zones). The
// caller must not change it.
func (v *View) NodeProps(key string) map[string]string {
	v.mu.RLock()
	m, ok := v.props[key]
	v.mu.RUnlock()
	if ok {
		return m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if m, ok := v.props[key]; ok {
		return m
	}
	m = make(map[string]string, len(v.nodes))
	for _, n := range v.nodes {
		if val, ok := n.Props[key]; ok {
			m[n.Name] = val
		}
	}
	if v.props == nil {
		v.props = map[string]map[string]string{}
	}
	v.props[key] = m
	return m
}

// Volume returns the volume name as last polled.
func (v *View) Volume(name string) (storage.Volume, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	vol, ok := v.volumes[name]
	return vol, ok
}

// Volumes returns every volume as last polled.
func (v *View) Volumes() map[string]storage.Volume {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.volumes
}
