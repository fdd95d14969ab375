package memory_test

import (
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/fold/memory/storetest"
)

// task is one trajectory of e2e/testdata/trajectories, as a memory source.
type task struct {
	ID, Repo, Title, Body, Outcome string
}

// loadTasks reads the trajectory data: a task's title is the first line
// of its issue, its outcome the commands its agent ran (what a branch's
// return message would name: files, symbols, commands).
func loadTasks(t testing.TB) []task {
	t.Helper()
	var out []task
	for _, tr := range storetest.Trajectories(t) {
		body := strings.TrimPrefix(tr.Task, "Consider the following PR description:\n")
		title, rest, _ := strings.Cut(body, "\n")
		var cmds []string
		for _, s := range tr.Steps[:min(8, len(tr.Steps))] {
			c, _, _ := strings.Cut(s.Command, "\n")
			cmds = append(cmds, c[:min(len(c), 120)])
		}
		out = append(out, task{
			ID: tr.ID, Repo: strings.SplitN(tr.ID, "__", 2)[0], Title: strings.TrimSpace(title), Body: rest,
			Outcome: "Explored with: " + strings.Join(cmds, "; "),
		})
	}
	if len(out) < 40 {
		t.Fatalf("%d trajectories", len(out))
	}
	return out
}

// TestRetrievalQuality is the labelled set made from the trajectory data:
// every task's memory is stored; for each task (its own memory left out)
// the top 5 of a search by its title and issue text should come from its
// own repository. It reports precision at 1 and at 5 (against the most
// that repository can give: min(5, its other tasks)) and holds them above
// fixed floors.
func TestRetrievalQuality(t *testing.T) {
	svc, _ := newService(t, nil)
	ctx := t.Context()
	tasks := loadTasks(t)
	repoOf := map[string]string{}
	perRepo := map[string]int{}
	for _, tk := range tasks {
		m, merged, err := svc.Add(ctx, memory.Candidate{Kind: memory.KindLesson, Title: tk.Title,
			Content: "Task: " + tk.Body[:min(len(tk.Body), 1500)] + "\n" + tk.Outcome})
		if err != nil || merged {
			t.Fatalf("%s: %v (merged %v)", tk.ID, err, merged)
		}
		repoOf[m.ID] = tk.Repo
		repoOf[tk.ID] = m.ID
		perRepo[tk.Repo]++
	}
	var p1, p5, queries float64
	for _, tk := range tasks {
		others := perRepo[tk.Repo] - 1
		if others == 0 {
			continue
		}
		items, err := svc.Search(ctx, tk.Title+"\n"+tk.Body, 6, nil)
		if err != nil {
			t.Fatal(err)
		}
		var top []memory.Item
		for _, it := range items {
			if it.ID != repoOf[tk.ID] && len(top) < 5 {
				top = append(top, it)
			}
		}
		same := 0
		for i, it := range top {
			if repoOf[it.ID] == tk.Repo {
				same++
				if i == 0 {
					p1++
				}
			}
		}
		p5 += float64(same) / float64(min(5, others))
		queries++
	}
	p1, p5 = p1/queries, p5/queries
	t.Logf("retrieval on %d trajectory tasks (%d queries, own memory left out): precision@1 %.3f, precision@5 (of what the repository can give) %.3f", len(tasks), int(queries), p1, p5)
	if p1 < 0.7 || p5 < 0.65 {
		t.Errorf("precision@1 %.3f (floor 0.7), precision@5 %.3f (floor 0.65)", p1, p5)
	}
}
