package storetest

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/memory"
)

// trajectoryFile is the repository's trajectory data (recorded coding-agent
// runs, described in its README), relative to the repository's root. The
// suite reads the file itself rather than through e2e/trajectory: a
// library package imports nothing of the e2e tree.
const trajectoryFile = "e2e/testdata/trajectories/swe-dev.jsonl.gz"

// Step is one recorded shell step of a trajectory.
type Step struct {
	Command    string `json:"command"`
	ReturnCode int    `json:"returncode"`
	Output     string `json:"output"`
}

// Trajectory is one recorded task of the trajectory data.
type Trajectory struct {
	ID    string `json:"id"`
	Task  string `json:"task"`
	Steps []Step `json:"steps"`
}

// Trajectories reads the repository's trajectory data: gzip-compressed
// JSON lines, one trajectory a line. It fails t, naming the file and the
// line, on data it cannot read.
func Trajectories(t testing.TB) []Trajectory {
	t.Helper()
	_, src, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("storetest: the source folder cannot be located")
	}
	path := filepath.Join(filepath.Dir(src), "..", "..", "..", filepath.FromSlash(trajectoryFile))
	trajs, err := readTrajectories(path)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return trajs
}

// readTrajectories reads the trajectories of a file; an error names the
// file and, for a bad line, the line.
func readTrajectories(path string) ([]Trajectory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening trajectories: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: not gzip data: %w", path, err)
	}
	defer zr.Close()
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	var out []Trajectory
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var tr Trajectory
		if err := json.Unmarshal([]byte(text), &tr); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, line, err)
		}
		if tr.ID == "" {
			return nil, fmt.Errorf("%s: line %d: trajectory without an id", path, line)
		}
		out = append(out, tr)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: reading: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no trajectories", path)
	}
	return out, nil
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
