// Package trajectory reads the recorded coding-agent trajectories that the
// tests, the replay server and the bench run on: gzip-compressed JSON
// lines, one trajectory a line,
// {"id": "...", "task": "...", "steps": [{"command": "...", "returncode": 0, "output": "..."}]}.
// The repository holds one such file (File, real agent tool output
// described in its README).
package trajectory

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// File is the repository's trajectory file, relative to its root.
const File = "e2e/testdata/trajectories/swe-dev.jsonl.gz"

// Step is one recorded shell step.
type Step struct {
	Command    string `json:"command"`
	ReturnCode int    `json:"returncode"`
	Output     string `json:"output"`
}

// Trajectory is one recorded agent run.
type Trajectory struct {
	ID    string `json:"id"`
	Task  string `json:"task"`
	Steps []Step `json:"steps"`
}

// RepoFile returns the absolute path of File in the source tree this
// package was compiled from (for tests, whatever their package's folder).
func RepoFile() (string, error) {
	_, src, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("trajectory: the source folder cannot be located")
	}
	return filepath.Join(filepath.Dir(src), "..", "..", filepath.FromSlash(File)), nil
}

// LoadRepo reads the repository's trajectory file (RepoFile).
func LoadRepo() ([]Trajectory, error) {
	p, err := RepoFile()
	if err != nil {
		return nil, err
	}
	return Load(p)
}

// Load reads the trajectories of a file; an error names the file.
func Load(path string) ([]Trajectory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening trajectories: %w", err)
	}
	defer f.Close()
	trajs, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return trajs, nil
}

// Read reads gzip-compressed JSON-lines trajectories. Blank lines are
// skipped; a line that is not a trajectory, one without an id or with the
// id of an earlier one, or no trajectory at all, is an error naming it.
func Read(r io.Reader) ([]Trajectory, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not gzip data: %w", err)
	}
	defer zr.Close()
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	var out []Trajectory
	seen := map[string]bool{}
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var t Trajectory
		if err := json.Unmarshal([]byte(text), &t); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if t.ID == "" {
			return nil, fmt.Errorf("line %d: trajectory without an id", line)
		}
		if seen[t.ID] {
			return nil, fmt.Errorf("line %d: duplicate trajectory id %q", line, t.ID)
		}
		seen[t.ID] = true
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("no trajectories")
	}
	return out, nil
}
