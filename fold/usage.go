package fold

import (
	"context"
	"fmt"
	"strings"
)

// The usage breakdown of a detailed branch_status: the design's
// categories beside the per-tool and per-upstream maps. file_reads,
// searches and tool_calls split what the branch was charged (its budget's
// tokens) by the kind of tool that brought it; reasoning is the model's
// own output on the model wire (RecordModelOutput), which is not charged.
const (
	UsageFileReads = "file_reads"
	UsageSearches  = "searches"
	UsageToolCalls = "tool_calls"
	UsageReasoning = "reasoning"
)

// UsageKind sorts a tool ("<upstream>/<tool>" of Branch.ByTool, or a tool
// name alone) into file_reads, searches or tool_calls by its name: tools
// that read a file or resource (read_file, read_text_file, Read, view,
// get_file_contents, resources/read), tools that search or list (grep,
// glob, search_files, list_directory, directory_tree, find, WebSearch,
// memory_search), and everything else.
func UsageKind(tool string) string {
	name := strings.ToLower(tool)
	if i := strings.LastIndexAny(name, "/"); i >= 0 && !strings.HasSuffix(name, "resources/read") {
		name = name[i+1:]
	}
	if i := strings.LastIndex(name, "__"); i >= 0 {
		name = name[i+2:]
	}
	switch {
	case strings.Contains(name, "search") || strings.Contains(name, "grep") || strings.Contains(name, "glob") ||
		strings.HasPrefix(name, "find") || strings.HasPrefix(name, "list_dir") || strings.Contains(name, "directory_tree") || name == "ls":
		return UsageSearches
	case name == "read" || name == "view" || name == "cat" || name == "notebookread" || strings.HasSuffix(name, "resources/read") ||
		(strings.Contains(name, "read") && (strings.Contains(name, "file") || strings.Contains(name, "resource") || strings.Contains(name, "notebook"))) ||
		strings.Contains(name, "file_contents"):
		return UsageFileReads
	}
	return UsageToolCalls
}

// usageByKind is a branch's usage in the design's categories.
func usageByKind(b *Branch) map[string]int {
	out := map[string]int{UsageFileReads: 0, UsageSearches: 0, UsageToolCalls: 0, UsageReasoning: b.Reasoning}
	for t, n := range b.ByTool {
		out[UsageKind(t)] += n
	}
	return out
}

// RecordModelOutput adds tokens of the model's own output on the model
// wire (an answer's output tokens, as its usage reports them) to the
// reasoning figure of branch branchID: the branch whose span the answer
// belongs to (the session's root for the main thread). When that branch
// has closed meanwhile, its nearest active ancestor gets them. The
// figure is shown in the usage breakdown of a detailed branch_status; it
// is not charged to the budget, which counts what the model receives. It
// returns an error wrapping ErrBranchNotFound for a branch not loaded
// here and ErrInvalidArgument for negative tokens; the record is in the
// store when it returns nil.
func (m *Manager) RecordModelOutput(ctx context.Context, branchID string, tokens int) error {
	if tokens < 0 {
		return fmt.Errorf("%w: fold: RecordModelOutput: %d tokens is negative", ErrInvalidArgument, tokens)
	}
	n := m.lookup(branchID)
	if n == nil {
		return fmt.Errorf("%w: fold: RecordModelOutput: branch %q is not open in this proxy", ErrBranchNotFound, branchID)
	}
	if tokens == 0 {
		return nil
	}
	for range 2 * (m.set.MaxDepth + 2) {
		for !n.active() && n.parent != "" {
			p := m.lookup(n.parent)
			if p == nil {
				break
			}
			n = p
		}
		if err := n.lock(ctx); err != nil {
			return err
		}
		b := n.cur.Load()
		if b.Status != StatusActive && n.parent != "" {
			n.unlock() // it closed meanwhile: go up again
			continue
		}
		nb := b.Clone()
		nb.Reasoning += tokens
		err := m.put(context.WithoutCancel(ctx), n, nb)
		n.unlock()
		if err != nil {
			return fmt.Errorf("fold: record model output of %s: %w", b.ID, err)
		}
		return nil
	}
	return fmt.Errorf("%w: fold: RecordModelOutput: no active branch above %s", ErrBranchClosed, branchID)
}
