package intercept

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// AuditFiles lists the audit log at path and its rotated files, oldest
// first (<path>.N … <path>.1, then path). It fails, naming path, when
// neither the log nor any rotated file exists.
func AuditFiles(path string) ([]string, error) {
	matches, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	type numbered struct {
		path string
		n    int
	}
	var rot []numbered
	for _, m := range matches {
		n, err := strconv.Atoi(strings.TrimPrefix(m, path+"."))
		if err != nil || n < 1 {
			continue
		}
		rot = append(rot, numbered{m, n})
	}
	sort.Slice(rot, func(i, j int) bool { return rot[i].n > rot[j].n })
	files := make([]string, 0, len(rot)+1)
	for _, r := range rot {
		files = append(files, r.path)
	}
	if _, err := os.Stat(path); err == nil {
		files = append(files, path)
	} else if !errors.Is(err, os.ErrNotExist) || len(files) == 0 {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return files, nil
}

// globEscape escapes the characters filepath.Match treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ReadStats tells what ReadAuditStats read.
type ReadStats struct {
	Files   int // files read
	Records int // records handed to fn
	// Skipped counts lines that were not records: torn by a crash,
	// garbled, or longer than any record foldproxy writes. Blank lines
	// are not counted.
	Skipped int
	// FirstSkipped locates the first skipped line as "file:line".
	FirstSkipped string
}

// ReadAudit calls fn with every record of the given files in order,
// skipping lines that are not records. It stops at the first error of fn
// or of reading a file, and returns it.
func ReadAudit(paths []string, fn func(Record) error) error {
	_, err := ReadAuditStats(paths, fn)
	return err
}

// ReadAuditStats is ReadAudit that also reports how many records it read
// and how many lines it skipped, so that the caller can warn about them.
func ReadAuditStats(paths []string, fn func(Record) error) (ReadStats, error) {
	var st ReadStats
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return st, fmt.Errorf("audit log: %w", err)
		}
		err = readRecords(f, p, &st, fn)
		f.Close()
		if err != nil {
			return st, err
		}
		st.Files++
	}
	return st, nil
}

// readRecords reads the records of r, named name, into fn.
func readRecords(r io.Reader, name string, st *ReadStats, fn func(Record) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for lineNo := 1; ; lineNo++ {
		var tooLong bool
		line = line[:0]
		var readErr error
		for {
			chunk, err := br.ReadSlice('\n')
			if !tooLong {
				if len(line)+len(chunk) > maxLineLen {
					tooLong, line = true, line[:0]
				} else {
					line = append(line, chunk...)
				}
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			readErr = err
			break
		}
		if readErr != nil && readErr != io.EOF {
			return fmt.Errorf("audit log %s: line %d: %w", name, lineNo, readErr)
		}
		trimmed := bytes.TrimSpace(line)
		switch {
		case tooLong:
			st.skip(name, lineNo)
		case len(trimmed) == 0:
		default:
			rec, ok := parseRecord(trimmed)
			if !ok {
				st.skip(name, lineNo)
				break
			}
			st.Records++
			if err := fn(rec); err != nil {
				return err
			}
		}
		if readErr == io.EOF {
			return nil
		}
	}
}

func (st *ReadStats) skip(name string, line int) {
	if st.Skipped == 0 {
		st.FirstSkipped = name + ":" + strconv.Itoa(line)
	}
	st.Skipped++
}

// parseRecord decodes one line. A line is a record when it is one JSON
// object of the Record shape with a kind; unknown fields are allowed so that
// logs of later versions still read.
func parseRecord(line []byte) (Record, bool) {
	var rec Record
	if line[0] != '{' {
		return rec, false
	}
	if err := json.Unmarshal(line, &rec); err != nil || rec.Kind == "" {
		return Record{}, false
	}
	return rec, true
}
