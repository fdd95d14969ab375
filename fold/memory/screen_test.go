package memory_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/fold/memory/storetest"
)

// loadInjections reads testdata/injections.txt: one planted injection a
// line, Go-quoted when it starts with a double quote.
func loadInjections(t testing.TB) []string {
	t.Helper()
	f, err := os.Open("testdata/injections.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, `"`) {
			if line, err = strconv.Unquote(line); err != nil {
				t.Fatalf("injections.txt: %q: %v", sc.Text(), err)
			}
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInjectionCorpus is issue 27's bound on the screen: of a corpus of at
// least 50 planted injections (the ten that passed the earlier filter,
// and more in the same styles), at least 95% are flagged; of the memories
// derived from the trajectory data (the lessons and anti-patterns its
// branches leave, and windows of its real tool output), at most 2%.
func TestInjectionCorpus(t *testing.T) {
	inj := loadInjections(t)
	if len(inj) < 50 {
		t.Fatalf("the corpus has %d injections, want at least 50", len(inj))
	}
	missed := 0
	for _, s := range inj {
		if len(memory.Flags(s)) == 0 {
			missed++
			t.Logf("not flagged: %q", s)
		}
	}
	caught := float64(len(inj)-missed) / float64(len(inj))
	t.Logf("injections flagged: %d of %d (%.1f%%)", len(inj)-missed, len(inj), 100*caught)
	if caught < 0.95 {
		t.Errorf("%.1f%% of the injections flagged, want at least 95%%", 100*caught)
	}

	// False positives: the memories branches on the trajectory data leave.
	var benign []string
	for _, tk := range loadTasks(t) {
		body := tk.Body[:min(len(tk.Body), 1500)]
		benign = append(benign,
			tk.Title+"\nTask: "+body+"\n"+tk.Outcome,
			"Failed: "+tk.Title+"\nTask: "+body+"\nBranch was force-returned: budget exhausted. Calls made: 4; tokens used: 2048 of 2048.")
	}
	fp, flagged := falsePositives(benign)
	t.Logf("trajectory lessons and anti-patterns flagged: %d of %d (%.2f%%) %v", fp, len(benign), 100*float64(fp)/float64(len(benign)), flagged)
	if 50*fp > len(benign) {
		t.Errorf("%d of %d trajectory-derived memories flagged, over 2%%", fp, len(benign))
	}
	// Windows of real tool output (source, logs, listings) as memories.
	var windows []string
	for _, m := range storetest.Corpus(t, storetest.Trajectories(t), "p", 3000) {
		windows = append(windows, m.Title+"\n"+m.Content)
	}
	fp, flagged = falsePositives(windows)
	t.Logf("tool-output windows flagged: %d of %d (%.2f%%) %v", fp, len(windows), 100*float64(fp)/float64(len(windows)), flagged)
	if 50*fp > len(windows) {
		t.Errorf("%d of %d tool-output windows flagged, over 2%%", fp, len(windows))
	}
}

// falsePositives counts the flagged texts and the rules that flagged them.
func falsePositives(texts []string) (int, map[string]int) {
	n, by := 0, map[string]int{}
	for _, s := range texts {
		f := memory.Flags(s)
		if len(f) > 0 {
			n++
		}
		for _, id := range f {
			by[id]++
		}
	}
	return n, by
}
