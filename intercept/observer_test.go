package intercept

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

// A relayed message that had secrets removed leaves one KindRelay audit
// record naming its upstream, method and redactions.
func TestObserverRecordsRelayed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	auditor, err := NewAuditor(policy.Default().Audit, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := Parts{Auditor: auditor, Metrics: NewMetrics()}.Observer(nil)
	o.SessionOpened()
	o.Relayed("gh", "notifications/message", map[string]int{"github-pat": 2})
	o.SessionClosed()
	if err := auditor.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("audit log %q: %v", b, err)
	}
	if rec.Kind != KindRelay || rec.Upstream != "gh" || rec.Method != "notifications/message" || rec.Redactions["github-pat"] != 2 || rec.Outcome != OutcomeOK {
		t.Errorf("record = %+v", rec)
	}
}
