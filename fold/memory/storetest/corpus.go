package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/fold/memory"
)

// Trajectory is one recorded task of the trajectory data.
type Trajectory = trajectory.Trajectory

// Trajectories reads the repository's trajectory data.
func Trajectories(t testing.TB) []Trajectory {
	t.Helper()
	trajs, err := trajectory.LoadRepo()
	if err != nil {
		t.Fatal(err)
	}
	return trajs
}

// Corpus returns n memories of project made from real tool output: windows
// of lines of the trajectories' step outputs (10 lines, then 16, sliding by
// one line), titled by their trajectory and command.
func Corpus(t testing.TB, trajs []Trajectory, project string, n int) []*memory.Memory {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]*memory.Memory, 0, n)
	for _, size := range []int{10, 16, 24, 40} {
		for _, tr := range trajs {
			for si, st := range tr.Steps {
				lines := strings.Split(st.Output, "\n")
				cmd, _, _ := strings.Cut(st.Command, "\n")
				for i := 0; i+size <= len(lines) || (i == 0 && len(lines) > 0); i++ {
					if len(out) == n {
						return out
					}
					content := strings.Join(lines[i:min(i+size, len(lines))], "\n")
					if strings.TrimSpace(content) == "" {
						continue
					}
					m := Mem(fmt.Sprintf("mem-%07d", len(out)), project, fmt.Sprintf("%s: %s", tr.ID, cmd), content, 0.8)
					m.Created = t0.Add(time.Duration(len(out)) * time.Second)
					m.Provenance.Branch = fmt.Sprintf("b-%s-%d-%d", tr.ID, si, size)
					out = append(out, m)
				}
			}
		}
	}
	if len(out) < n {
		t.Fatalf("storetest: the trajectories give %d memories, fewer than %d", len(out), n)
	}
	return out
}
