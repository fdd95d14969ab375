package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// impFile is one file the import reads and may change.
type impFile struct {
	private bool   // create its folder 0700
	path    string // as shown to the user
	target  string // the path written: path with symlinks resolved
	exists  bool
	data    []byte
	mode    fs.FileMode
	newData []byte // nil: unchanged
	backup  string // set when the file exists and changes
	verb    string // "create", "update" or "rewrite"
	what    string // the rest of the one-line description
	details []string
}

// impReadFile reads path, following symlinks for the write target. A
// missing file is not an error.
func impReadFile(path string) (*impFile, error) {
	f := &impFile{path: path, target: path, mode: 0o644}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	f.exists, f.data = true, data
	if t, err := filepath.EvalSymlinks(path); err == nil {
		f.target = t
	}
	if st, err := os.Stat(f.target); err == nil {
		f.mode = st.Mode().Perm()
	}
	return f, nil
}

// run prints the plan's changes and, with write, applies them: for each
// file, it checks that the file has not changed since it was read, writes
// the backup, then replaces the file atomically.
func (p *importPlan) run(ctx context.Context, w *bytes.Buffer, write bool) error {
	past := map[string]string{"create": "created", "update": "updated", "rewrite": "rewrote"}
	describe := func(f *impFile, dry bool) {
		verb := past[f.verb]
		if dry {
			verb = "would " + f.verb
		}
		fmt.Fprintf(w, "%s: %s %s\n", f.path, verb, f.what)
		for _, d := range f.details {
			fmt.Fprintf(w, "    %s\n", d)
		}
	}
	if len(p.files) == 0 {
		fmt.Fprintln(w, "Nothing to change: foldproxy already serves these servers for this project.")
		p.printWarnings(w)
		p.printRemovals(w, "If not done yet, remove")
		return nil
	}
	if !write {
		for _, f := range p.files {
			describe(f, true)
		}
		if n := p.backups(); n > 0 {
			fmt.Fprintln(w, "Backups it would make:")
			for _, f := range p.files {
				if f.backup != "" {
					fmt.Fprintf(w, "    %s → %s\n", f.target, f.backup)
				}
			}
		}
		p.printWarnings(w)
		p.printRemovals(w, "After --write, remove")
		fmt.Fprintln(w, "Dry run: nothing was changed. Run again with --write to apply.")
		return nil
	}
	for _, f := range p.files {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped before writing %s: %w", f.path, err)
		}
		if err := f.apply(); err != nil {
			return err
		}
		if f.backup != "" {
			fmt.Fprintf(w, "%s: backed up to %s\n", f.path, f.backup)
		}
		describe(f, false)
	}
	// The config written must be one serve accepts.
	if _, err := loadConfig(p.out); err != nil {
		fmt.Fprintf(w, "warning: foldproxy serve will refuse %s as it is: %v\n", p.out, err)
	}
	p.printWarnings(w)
	p.printRemovals(w, "Now remove")
	fmt.Fprintln(w, "Done. Restart Claude Code (it asks once to approve the new project server).")
	return nil
}

// backups counts the backups the plan makes.
func (p *importPlan) backups() int {
	n := 0
	for _, f := range p.files {
		if f.backup != "" {
			n++
		}
	}
	return n
}

// printWarnings prints one line per warning.
func (p *importPlan) printWarnings(w *bytes.Buffer) {
	for _, m := range p.warnings {
		fmt.Fprintf(w, "warning: %s\n", m)
	}
}

// printRemovals prints the claude mcp remove commands for servers that were
// imported from ~/.claude.json, which import never edits.
func (p *importPlan) printRemovals(w *bytes.Buffer, lead string) {
	if len(p.removals) == 0 {
		return
	}
	fmt.Fprintf(w, "%s the imported servers from %s (import does not edit it), or Claude Code runs them beside the proxy; user-scope removals apply to every project:\n", lead, p.from)
	for _, r := range p.removals {
		fmt.Fprintf(w, "    %s\n", r)
	}
}

// apply backs f up and replaces it with its new content.
func (f *impFile) apply() error {
	cur, err := os.ReadFile(f.target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if f.exists {
			return fmt.Errorf("%s was removed while import ran; nothing more written", f.path)
		}
	case err != nil:
		return fmt.Errorf("reading %s again: %w", f.path, err)
	case !f.exists || !bytes.Equal(cur, f.data):
		return fmt.Errorf("%s changed while import ran; nothing more written", f.path)
	}
	if f.backup != "" {
		if err := impWriteNew(f.backup, f.data, f.mode); err != nil {
			return fmt.Errorf("backing up %s: %w", f.path, err)
		}
	}
	if err := impWriteAtomic(f.target, f.newData, f.mode); err != nil {
		if f.backup != "" {
			return fmt.Errorf("writing %s (unchanged; backup at %s): %w", f.path, f.backup, err)
		}
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return nil
}

// impInside reports whether path is inside dir.
func impInside(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// impGitignore returns the project's .gitignore with the lines it lacks
// appended, or nil when it has them all.
func impGitignore(path string, lines []string) (*impFile, error) {
	f, err := impReadFile(path)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(f.data), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	var add []string
	for _, l := range lines {
		if !have[l] && !have[strings.TrimPrefix(l, "/")] {
			add = append(add, l)
		}
	}
	if len(add) == 0 {
		return nil, nil
	}
	data := append([]byte(nil), f.data...)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	data = append(data, "# foldproxy: its state, import's backups and private config\n"...)
	for _, l := range add {
		data = append(data, l+"\n"...)
	}
	f.newData = data
	f.verb, f.what = "update", "to ignore "+strings.Join(add, " ")
	if !f.exists {
		f.verb = "create"
	}
	return f, nil
}

// impBackupName returns <path>.bak-<stamp>, with a counter when that name
// is taken.
func impBackupName(path, stamp string) string {
	name := path + ".bak-" + stamp
	for i := 1; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			return name
		}
		name = fmt.Sprintf("%s.bak-%s-%d", path, stamp, i)
	}
}

// impWriteNew writes a file that must not exist yet, and syncs it.
func impWriteNew(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// impWriteAtomic replaces path with data: it writes a temporary file in the
// same folder, syncs it and renames it over path, so readers see the old or
// the new content, never a mix. The folder is created when missing.
func impWriteAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	dirMode := fs.FileMode(0o755)
	if mode&0o077 == 0 {
		dirMode = 0o700 // a private file gets a private folder
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable. Not every platform can sync a folder.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // best effort: the data itself is already synced
		d.Close()
	}
	return nil
}
