package modelwire

import (
	"encoding/json"
	"path"
	"regexp"
	"strings"
	"unicode"
)

// What a tool call read or ran, for the superseded rule and for stubs.
//
// A call's input is read as JSON (an Anthropic tool_use input, an OpenAI
// call's arguments). A read names a file: a tool whose name says it reads
// or views (Claude Code's Read, OpenCode's read, an MCP read_text_file)
// with a path argument, or a shell command that is one `cat FILE` or
// `sed -n 'A,Bp' FILE`; its range is the part it read ("" for the whole
// file). A run is a shell command: the command argument of any tool
// (Claude Code's Bash, Codex's shell and exec_command, OpenCode's bash).

// callSpec is what a call read or ran.
type callSpec struct {
	path, rng string // a read: the file and the range ("" for all of it)
	cmd       string // a run: the command as given
}

// supersession finds, for each result, whether a later call read the same
// file over at least the same range, or ran the same command.
type supersession struct {
	lastFull  map[string]int // path -> the last whole read
	lastRange map[string]int // path + "\x00" + range -> the last read of it
	lastCmd   map[string]int // command -> its last run
}

func (s *supersession) add(x int, sp callSpec) {
	if s.lastFull == nil {
		s.lastFull, s.lastRange, s.lastCmd = map[string]int{}, map[string]int{}, map[string]int{}
	}
	if sp.path != "" {
		if sp.rng == "" {
			s.lastFull[sp.path] = x
		}
		s.lastRange[sp.path+"\x00"+sp.rng] = x
	}
	if sp.cmd != "" {
		s.lastCmd[sp.cmd] = x
	}
}

func (s *supersession) superseded(x int, sp callSpec) bool {
	if s.lastFull == nil {
		return false
	}
	if sp.path != "" {
		if y, ok := s.lastFull[sp.path]; ok && y > x {
			return true
		}
		if y, ok := s.lastRange[sp.path+"\x00"+sp.rng]; ok && y > x {
			return true
		}
	}
	if sp.cmd != "" {
		if y, ok := s.lastCmd[sp.cmd]; ok && y > x {
			return true
		}
	}
	return false
}

// inputFields decodes a call's input into its top-level members; nil when
// it is not a JSON object.
func inputFields(input string) map[string]any {
	input = strings.TrimSpace(input)
	if !strings.HasPrefix(input, "{") {
		return nil
	}
	var m map[string]any
	if json.Unmarshal([]byte(input), &m) != nil {
		return nil
	}
	return m
}

func str(m map[string]any, keys ...string) string {
	for _, k := range keys {
		switch v := m[k].(type) {
		case string:
			if v != "" {
				return v
			}
		case []any: // an argv (Codex's shell)
			var parts []string
			for _, p := range v {
				if s, ok := p.(string); ok {
					parts = append(parts, s)
				}
			}
			if len(parts) > 0 {
				// bash -lc "<script>" runs the script.
				if len(parts) == 3 && (parts[0] == "bash" || parts[0] == "sh" || parts[0] == "zsh") && strings.HasPrefix(parts[1], "-") && strings.Contains(parts[1], "c") {
					return parts[2]
				}
				return strings.Join(parts, " ")
			}
		}
	}
	return ""
}

func num(m map[string]any, keys ...string) string {
	var out []string
	for _, k := range keys {
		if v, ok := m[k]; ok && v != nil {
			b, _ := json.Marshal(v)
			out = append(out, k+"="+string(b))
		}
	}
	return strings.Join(out, ",")
}

// specOf reads what a call of tool name with input read or ran.
func specOf(name, input string) callSpec {
	m := inputFields(input)
	if m == nil {
		return callSpec{}
	}
	var sp callSpec
	if cmd := strings.TrimSpace(str(m, "command", "cmd")); cmd != "" {
		sp.cmd = cmd
		sp.path, sp.rng = shellRead(cmd)
		return sp
	}
	label := strings.ToLower(toolLabel(name))
	if strings.Contains(label, "read") || strings.Contains(label, "view") || label == "cat" {
		if p := str(m, "file_path", "filePath", "path", "file", "absolute_path"); p != "" {
			sp.path = path.Clean(p)
			sp.rng = num(m, "offset", "limit", "head", "tail", "line_range", "view_range", "start_line", "end_line", "pages")
		}
	}
	return sp
}

var reSedRange = regexp.MustCompile(`^sed\s+-n\s+['"]?(\d+)\s*,\s*(\d+)\s*p['"]?\s+(\S+)$`)

// shellRead recognises a command that only reads one file: `cat FILE` or
// `sed -n 'A,Bp' FILE` (after `cd DIR &&`, which does not change the file
// when FILE is absolute; a relative FILE keeps the directory in its key).
func shellRead(cmd string) (file, rng string) {
	dir := ""
	for strings.HasPrefix(cmd, "cd ") {
		i := strings.Index(cmd, "&&")
		if i < 0 {
			return "", ""
		}
		dir = strings.TrimSpace(cmd[3:i])
		cmd = strings.TrimSpace(cmd[i+2:])
	}
	if strings.ContainsAny(cmd, "|;&<>`$*?") {
		return "", ""
	}
	f := strings.Fields(cmd)
	switch {
	case len(f) == 2 && f[0] == "cat":
		file = f[1]
	default:
		if m := reSedRange.FindStringSubmatch(cmd); m != nil {
			file, rng = m[3], m[1]+","+m[2]
		}
	}
	if file == "" {
		return "", ""
	}
	file = strings.Trim(file, `'"`)
	if !strings.HasPrefix(file, "/") && dir != "" {
		file = dir + "/" + file
	}
	return path.Clean(file), rng
}

// briefOf is a call's input in brief, for a stub: its command (first
// line), path, pattern, query or first string argument, at most 40
// characters (the call itself, just before the result, holds all of it).
func briefOf(input string) string {
	m := inputFields(input)
	var s string
	if m != nil {
		s = str(m, "command", "cmd", "file_path", "filePath", "path", "pattern", "query", "url", "file", "absolute_path")
		if s == "" {
			// The first string argument, by name, for a deterministic pick.
			var best string
			for k, v := range m {
				if sv, ok := v.(string); ok && sv != "" && (best == "" || k < best) {
					best, s = k, sv
				}
			}
		}
	} else {
		s = input
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		if r == '"' {
			return '\''
		}
		return r
	}, strings.TrimSpace(s))
	if r := []rune(s); len(r) > 40 {
		s = string(r[:39]) + "…"
	}
	return s
}

// quoteBrief puts a brief in quotes for a stub.
func quoteBrief(s string) string { return `"` + s + `"` }
