package cost

import (
	"strings"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
)

// Step is one step of a recorded agent trajectory: the shell command the
// agent ran and the output it read.
type Step struct {
	Command string `json:"command"`
	Output  string `json:"output"`
}

// Exploring reports whether a command only reads (lists, views, searches
// files or the repository's history): the work an agent would do in a
// branch and fold. Commands that write (redirects, heredocs, sed -i, rm,
// git checkout...), run code or tests are the main thread's own work.
func Exploring(cmd string) bool {
	cmd = strings.TrimSpace(cmd)
	// A leading "cd dir &&" does not change what the command does.
	for strings.HasPrefix(cmd, "cd ") {
		i := strings.Index(cmd, "&&")
		if i < 0 {
			return false
		}
		cmd = strings.TrimSpace(cmd[i+2:])
	}
	if cmd == "" || strings.Contains(cmd, "<<") || writesFile(cmd) {
		return false
	}
	for _, seg := range splitCommands(cmd) {
		f := strings.Fields(seg)
		if len(f) == 0 {
			return false
		}
		switch f[0] {
		case "ls", "cat", "grep", "egrep", "rg", "find", "head", "tail", "wc", "nl", "tree", "less", "file", "stat", "pwd", "du", "which", "sort", "uniq", "cut", "awk", "xargs", "true":
			if f[0] == "xargs" && !readsOnly(f[1:]) {
				return false
			}
		case "sed":
			if strings.HasPrefix(strings.Join(f[1:], " "), "-i") || strings.Contains(seg, " -i ") || strings.Contains(seg, " -i'") || strings.Contains(seg, " --in-place") {
				return false
			}
		case "git":
			if len(f) < 2 {
				return false
			}
			switch f[1] {
			case "diff", "log", "show", "status", "grep", "blame", "ls-files":
			default:
				return false
			}
		default:
			return false
		}
	}
	return true
}

// readsOnly reports whether xargs runs a reading command.
func readsOnly(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		switch a {
		case "grep", "cat", "head", "wc", "ls", "sed":
			return true
		}
		return false
	}
	return false
}

// splitCommands splits a command line at pipes and command separators.
func splitCommands(cmd string) []string {
	return strings.FieldsFunc(strings.NewReplacer("&&", "|", "||", "|", ";", "|").Replace(cmd), func(r rune) bool { return r == '|' })
}

// writesFile reports whether a command redirects its output to a file
// (">" or ">>", but not 2>&1 or to /dev/null).
func writesFile(cmd string) bool {
	for i := 0; i < len(cmd); i++ {
		if cmd[i] != '>' {
			continue
		}
		rest := strings.TrimLeft(cmd[i+1:], "> ")
		if strings.HasPrefix(cmd[i+1:], "&") || strings.HasPrefix(rest, "/dev/null") {
			continue
		}
		return true
	}
	return false
}

// Fold is what a branch and the fold tools cost the main thread: the
// question the share answers is how much of the main thread folding saves
// when these are what foldproxy's own words cost.
type Fold struct {
	BranchFixed int // a branch's create and return answers besides its message
	Summary     int // the return message (the summary the main thread keeps)
	Tools       int // the fold tool definitions, once per conversation
}

// Share is the main thread of a set of trajectories inline and with every
// exploration phase folded into a branch.
type Share struct {
	Trajectories, Steps, Phases int
	// CheaperInline counts the phases that cost less inline than folded.
	CheaperInline int
	// Inline is the main thread with every step in it: each command and
	// its output. Folded is the same with each exploration phase (a run of
	// consecutive Exploring steps) replaced by its branch (fixed cost and
	// summary), plus the fold tool definitions once per trajectory.
	Inline, Folded int
}

// Saved is the share of the main thread that folding saves.
func (s Share) Saved() float64 {
	if s.Inline == 0 {
		return 0
	}
	return float64(s.Inline-s.Folded) / float64(s.Inline)
}

// ReplayShare folds every exploration phase of the trajectories into a
// branch that costs f, and counts the main thread before and after.
func ReplayShare(c Counter, trajectories [][]Step, f Fold) Share {
	var s Share
	perBranch := f.BranchFixed + f.Summary
	for _, steps := range trajectories {
		s.Trajectories++
		s.Folded += f.Tools
		phase, inPhase := 0, false
		end := func() {
			if !inPhase {
				return
			}
			s.Phases++
			s.Folded += perBranch
			if phase < perBranch {
				s.CheaperInline++
			}
			phase, inPhase = 0, false
		}
		for _, st := range steps {
			s.Steps++
			n := c.CountText(st.Command) + c.CountText(st.Output)
			s.Inline += n
			if Exploring(st.Command) {
				phase += n
				inPhase = true
				continue
			}
			end()
			s.Folded += n
		}
		end()
	}
	return s
}

// LoadTrajectories reads the steps of every trajectory of a trajectory
// file (trajectory.File).
func LoadTrajectories(path string) ([][]Step, error) {
	trajs, err := trajectory.Load(path)
	if err != nil {
		return nil, err
	}
	out := make([][]Step, len(trajs))
	for i, tr := range trajs {
		out[i] = make([]Step, len(tr.Steps))
		for j, st := range tr.Steps {
			out[i][j] = Step{Command: st.Command, Output: st.Output}
		}
	}
	return out, nil
}
