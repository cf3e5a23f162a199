package testenv

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// auditPolicy records every request that writes (with its body for Events, whose subject is only
// in the body) and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Request
    verbs: [create, update, patch]
    resources: [{group: "", resources: [events]}, {group: events.k8s.io, resources: [events]}]
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
`

// configureAudit has kube-apiserver write an audit log of every write to path (Options.AuditLog).
func configureAudit(env *envtest.Environment, path string) error {
	policy := filepath.Join(filepath.Dir(path), "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", policy)
	args.Set("audit-log-path", path)
	args.Set("audit-log-format", "json")
	return nil
}

// AuditEvents reads the audit log Options.AuditLog asked for: the writes kube-apiserver finished
// at or after since.
func AuditEvents(path string, since time.Time) ([]auditv1.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []auditv1.Event
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for lines.Scan() {
		var e auditv1.Event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			return nil, err
		}
		if !e.RequestReceivedTimestamp.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out, lines.Err()
}
