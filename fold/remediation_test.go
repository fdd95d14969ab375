package fold

import (
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/fold/memory"
)

// TestRemediationRecordInjected: remediation_record stores a remediation
// memory (problem, root cause, solution), a later branch that resembles it
// receives it with the solution as its lesson, and a branch that resembles
// nothing receives nothing.
func TestRemediationRecordInjected(t *testing.T) {
	e, svc := newMemEnv(t, nil)
	ans := e.mustCall(t, "s1", ToolRemediationRecord, map[string]any{
		"title":      "django migrations fail on sqlite with a renamed field",
		"problem":    "makemigrations then migrate fails on sqlite after renaming a model field used in a unique_together",
		"root_cause": "sqlite rebuilds the table and the old unique_together still names the old field",
		"solution":   "update unique_together in the same migration before the RenameField operation",
	})
	id, _ := ans["memory_id"].(string)
	if id == "" {
		t.Fatalf("remediation_record answered %v, want a memory_id", ans)
	}
	got, err := svc.Store().Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != memory.KindRemediation || !strings.Contains(got.Content, "Root cause: sqlite rebuilds") || got.Provenance.Origin != memory.OriginRecorded {
		t.Fatalf("stored %+v, want a recorded remediation with its root cause", got)
	}

	// A branch that resembles it gets it, the solution as its lesson.
	ans = e.mustCall(t, "s1", ToolCreate, map[string]any{
		"description": "django migrations fail on sqlite with a renamed field",
		"prompt":      "migrate fails on sqlite after renaming a model field used in a unique_together",
		"budget":      2000,
	})
	items := injectedOf(t, ans)
	if len(items) != 1 || items[0].ID != id || !strings.Contains(items[0].Lesson, "unique_together") {
		t.Fatalf("a resembling branch got %+v, want the remediation %s", items, id)
	}
	e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "done"})

	// A branch that resembles nothing gets nothing.
	ans = e.mustCall(t, "s1", ToolCreate, map[string]any{
		"description": "tune the kubernetes ingress tls certificates",
		"budget":      2000,
	})
	if items := injectedOf(t, ans); len(items) != 0 {
		t.Fatalf("an unrelated branch got %+v", items)
	}
}
