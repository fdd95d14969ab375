package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// A record written before CutCount was kept lists every cut: it is read as
// the latest ListedCuts and their count.
func TestDecodeBranchOldCuts(t *testing.T) {
	var all []string
	for i := range 40 {
		all = append(all, fmt.Sprintf("root-s1~%012d", i))
	}
	old, err := json.Marshal(map[string]any{"id": "root-s1", "session": "s1", "status": "active", "cuts": all})
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeBranch(old)
	if err != nil {
		t.Fatal(err)
	}
	if b.CutCount != 40 || !slices.Equal(b.Cuts, all[40-ListedCuts:]) || cap(b.Cuts) >= len(all) {
		t.Errorf("count %d, cuts %v (cap %d)", b.CutCount, b.Cuts, cap(b.Cuts))
	}
	few, _ := json.Marshal(map[string]any{"id": "b-1", "session": "s1", "status": "forced", "cuts": all[:1]})
	if b, err := decodeBranch(few); err != nil || b.CutCount != 1 || len(b.Cuts) != 1 {
		t.Errorf("one cut: %+v, %v", b, err)
	}
}
