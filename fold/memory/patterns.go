package memory

import (
	"encoding/base64"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Pattern is one prompt-injection rule: text that tries to steer the agent
// that will be shown the memory rather than inform it. Rules are data, as
// gitleaks' are: an id, keywords that must appear (a cheap prefilter, any
// one of them, lowercase; none: always run) and a regular expression.
//
// Rules run on the screened form of a text (see Screen): Unicode
// normalised (NFKC), format characters that render as nothing removed,
// lowercased, and, for the rules written in Latin script, lookalike
// letters of other scripts folded to the Latin ones they imitate.
type Pattern struct {
	ID       string
	Keywords []string
	Re       *regexp.Regexp
	// Native runs the rule on the text before lookalikes are folded: for
	// rules written in another script (Cyrillic, CJK).
	Native bool
}

// Languages are the languages whose imperative overrides the screen
// recognises ("ignore the previous instructions", "from now on you...").
var Languages = []string{"en", "fr", "es", "de", "it", "pt", "nl", "ru", "zh", "ja"}

// Patterns are the injection rules. Hidden control characters and
// invisible Unicode are checked separately, and base64 runs are decoded
// and screened again (see Flags).
var Patterns = []Pattern{
	{
		ID: "ignore-instructions",
		Keywords: []string{"ignore", "disregard", "forget", "override", "bypass", "skip", "aside", "abandon", "discard", "dismiss",
			"follow", "obey", "neglect", "drop", "throw out", "scrap"},
		Re: regexp.MustCompile(`(?s)\b(ignore|disregard|forget|override|overrule|bypass|skip|abandon|discard|dismiss|neglect|drop|scrap|throw out|set aside|put aside|stop (following|obeying)|no longer (follow|obey|apply|adhere to)|(do not|don't|dont|never) (follow|obey|adhere to))\b.{0,60}\b(previous|prior|above|earlier|preceding|all|any|every|your|the|these|those|system|safety|existing|original|initial|former|old|current|given|standing|developer'?s?|operator'?s?|user'?s?)\b.{0,60}\b(instructions?|prompts?|rules|directions|guidelines|guidance|guardrails|messages?|directives|constraints|policies|polic(y|ies)|orders|commands|restrictions|programming|context|conversation|setup)\b`),
	},
	{
		ID:       "role-override",
		Keywords: []string{"you are now", "from now on", "new instructions", "system prompt", "developer mode", "henceforth", "going forward", "act as", "pretend", "your new", "your real", "your true", "jailbreak", "dan mode", "whenever"},
		Re:       regexp.MustCompile(`\b(you are now (a|an|in|the|my|no longer|dan|free|unrestricted|unfiltered|jailbroken)\b|from now on\b|henceforth,? (you|always|never|whenever)\b|going forward,? (you|always|never|whenever)\b|new instructions?\s*:|updated instructions?\s*:|(reveal|print|show|repeat|leak|output|dump)\s+(me\s+)?(your|the)\s+(full\s+|entire\s+|hidden\s+)?system prompt|developer mode|jailbreak|dan mode|\bact as (an? )?(unrestricted|unfiltered|different|new|evil)\b|pretend (to be|you are|that you)\b|your (new|real|true) (role|task|instructions?|purpose|goal|objective) (is|are)\b|whenever (you|the user|anyone|someone)\b[^.\n]{0,80}\b(you must|you should|always|instead|make sure to|be sure to|remember to|secretly|silently)\b)`),
	},
	{
		ID:       "fake-markup",
		Keywords: []string{"<", "[inst]", "<<sys>>", "### "},
		Re:       regexp.MustCompile(`(<\s*/?\s*(system|assistant|user|human|developer|memory|memories|instructions?|tool_result|tool_use|tool_call|function_results?|function_calls?|injected_context|context|prompt|admin|im_start|im_end|antml:[\w-]+|antml)(\s+[\w-]+\s*=\s*("[^"]*"|'[^']*'|[\w-]+))*\s*/?\s*>|<\|\s*(im_start|im_end|system|assistant|user|endoftext|eot_id|start_header_id|end_header_id)\s*\|>|\[/?inst\]|<</?sys>>|(^|\n)\s*#{2,}\s*(system|instruction|instructions|new instructions|assistant|developer)\s*(prompt|message)?\s*:?\s*(\n|$))`),
	},
	{
		ID:       "call-tools",
		Keywords: []string{"call", "invoke", "execute", "run", "use", "trigger", "<tool", "<function", "tool_use", `"name"`, `"tool"`, `"function"`},
		Re:       regexp.MustCompile(`(<\s*(tool_call|function_calls?|invoke|antml)\b|"type"\s*:\s*"tool_use"|\b(you must|you should|always|immediately|silently|secretly|automatically|quietly|be sure to|make sure to)\s+(call|invoke|execute|run|use|trigger)\s+(the\s+)?[\w./-]*\s*(tool|function|command)\b|\b(call|invoke|execute|run)\s+(the\s+)?[\w./-]+\s+(tool|function)\s+(without|before)\s+(asking|telling|confirm\w*|informing|the user)|\b(call|invoke|execute|run|use|trigger)\s+(the\s+)?(tool|function)\s+["'\x60]?[\w./-]+["'\x60]?\s+(with|using|passing)\b|\b(call|invoke|execute|trigger|use)\s+(the\s+)?["'\x60]?[\w./-]+["'\x60]?\s+(tool|function)\s+(with|using|passing)\s*(the\s+)?(arguments?|args|input|parameters?|params)?\s*:?\s*[{(\[\x60"']|\{\s*"(name|tool|tool_name|function|recipient_name)"\s*:\s*"[\w./-]+"\s*,\s*"(arguments|args|input|parameters|params)"\s*:)`),
	},
	{
		ID:       "exfiltrate",
		Keywords: []string{"send", "upload", "post", "exfiltrat", "leak", "forward", "transmit", "curl", "wget", "email", "![", "http", "append", "encode", "embed", "include"},
		Re:       regexp.MustCompile(`(?s)(\bexfiltrat\w*|\b(send|upload|post|leak|forward|transmit|email|copy|paste|share|report)\b.{0,60}(\b(secrets?|credentials?|tokens?|api[ _-]?keys?|passwords?|env(ironment)?\s+var\w*|ssh keys?|private keys?|cookies?|conversation|chat history|system prompt|session)\b|\.env\b).{0,60}\b(to|at|into)\s+(https?://|[\w.+-]+@[\w-]+\.|[\w-]+\.[a-z]{2,}\b|an? (external|remote|attacker|third))|\b(curl|wget)\b[^\n]{0,200}\$\{?[a-z_]*(key|token|secret|pass\w*)\b|!\[[^\]\n]{0,100}\]\(\s*<?https?://[^)\s]*\?[^)\s]*(\{|\$|%7b|<|\[)|\bhttps?://[^\s)"'<>]*[?&](data|secret|secrets|token|key|apikey|api_key|password|pwd|creds?|env|conversation|chat|history|context|payload|exfil|leak|dump|memory|prompt|q)=(\{|\$|%7b|<|\[)|\b(append|add|include|put|encode|embed|insert|attach)\b.{0,60}(\b(secrets?|credentials?|tokens?|api[ _-]?keys?|passwords?|conversation|chat history|system prompt|environment)\b|\.env\b).{0,60}\b(to|in|into|as)\s+(the\s+|a\s+|an\s+)?(url|link|image|query|markdown|request)\b)`),
	},
	// Imperative overrides in the other languages of Languages.
	{
		ID:       "ignore-instructions",
		Keywords: []string{"ignor", "oubli", "abstraction", "tiens pas compte", "tenez pas compte", "désormais", "desormais", "à partir de maintenant", "a partir de maintenant"},
		Re:       regexp.MustCompile(`(?s)(\b(ignore[zr]?|oublie[zr]?|ne (tiens|tenez) (plus |pas )?compte|fai(s|tes) abstraction|écarte[zr]?|laisse[zr]? de côté)\b.{0,60}\b(instructions?|consignes?|règles|regles|directives|messages?|indications|ordres)\b|\b(désormais|desormais|à partir de maintenant|a partir de maintenant|dorénavant|dorenavant),? (tu|vous)\b)`),
	},
	{
		ID:       "ignore-instructions",
		Keywords: []string{"ignor", "olvid", "omit", "descart", "caso omiso", "no sigas", "a partir de ahora", "desde ahora"},
		Re:       regexp.MustCompile(`(?s)(\b(ignora[dr]?|ignore[ns]?|olvida[dr]?|olvide[ns]?|omite|omita[ns]?|descarta[dr]?|descarte[ns]?|haz caso omiso|haga caso omiso|no sigas|no siga)\b.{0,60}\b(instrucciones|reglas|indicaciones|directrices|mensajes|[oó]rdenes|normas)\b|\b(a partir de ahora|desde ahora),? (eres|debes|tienes|siempre|nunca|cada vez)\b)`),
	},
	{
		ID:       "ignore-instructions",
		Keywords: []string{"ignorier", "vergiss", "vergessen", "missacht", "übergeh", "ab jetzt", "ab sofort", "von nun an"},
		Re:       regexp.MustCompile(`(?s)(\b(ignorier\w*|vergiss|vergessen sie|missacht\w*|übergeh\w*)\b.{0,60}\b(anweisungen|regeln|richtlinien|anordnungen|vorgaben|instruktionen|nachrichten|befehle)\b|\b(ab jetzt|ab sofort|von nun an),? (bist|sollst|musst|wirst|antwortest|du|immer|nie)\b)`),
	},
	{
		ID:       "ignore-instructions",
		Keywords: []string{"ignor", "dimentic", "trascur", "da ora in poi", "d'ora in poi"},
		Re:       regexp.MustCompile(`(?s)(\b(ignora|ignorate|ignori|dimentica|dimenticate|dimentichi|trascura|trascurate)\b.{0,60}\b(istruzioni|regole|indicazioni|direttive|messaggi|ordini)\b|\b(da ora in poi|d'ora in poi|d'ora in avanti),? (sei|devi|dovrai|rispondi|sempre|mai)\b)`),
	},
	{
		ID:       "ignore-instructions",
		Keywords: []string{"ignor", "esqueç", "esquec", "desconsider", "desprez", "a partir de agora", "de agora em diante"},
		Re:       regexp.MustCompile(`(?s)(\b(ignore|ignora|ignorem|esqueça|esqueca|esqueçam|desconsidere|desconsiderem|despreze)\b.{0,60}\b(instruções|instrucoes|regras|diretrizes|orientações|orientacoes|mensagens|ordens)\b|\b(a partir de agora|de agora em diante),? (você|voce|tu|deve|sempre|nunca)\b)`),
	},
	{
		ID:       "ignore-instructions",
		Keywords: []string{"negeer", "vergeet", "vanaf nu"},
		Re:       regexp.MustCompile(`(?s)(\b(negeer|vergeet)\b.{0,60}\b(instructies|regels|richtlijnen|opdrachten|berichten)\b|\bvanaf nu,? (ben|moet|zal|je|jij|altijd|nooit)\b)`),
	},
	{
		ID:       "ignore-instructions",
		Keywords: []string{"игнорир", "проигнорир", "забудь", "забудьте", "не обращай", "с этого момента", "отныне"},
		Re:       regexp.MustCompile(`(?s)((игнорир\pL*|проигнорир\pL*|забудь\pL*|не обращай\pL* внимания на)[^.\n]{0,60}(инструкци\pL*|правил\pL*|указани\pL*|сообщени\pL*|команд\pL*)|(с этого момента|отныне),? (ты|вы|всегда|никогда))`),
		Native:   true,
	},
	{
		ID:       "ignore-instructions",
		Keywords: []string{"忽略", "无视", "忽视", "不要理会", "忘记", "忘掉", "無視", "忘れ", "從現在開始", "从现在开始", "今後は", "これからは"},
		Re:       regexp.MustCompile(`((忽略|无视|無視|忽视|忽視|不要理会|不要理會|忘记|忘記|忘掉)[^。\n]{0,12}(指令|指示|规则|規則|说明|說明|提示|命令|设定|設定)|(指示|命令|ルール|規則|指令)[^。\n]{0,12}(無視|忘れ)|(無視|忘れ)[^。\n]{0,12}(指示|命令|ルール|規則)|(从现在开始|從現在開始|从今以后|今後は|これからは)[，,、]?\s*(你|您|あなた|常に|必ず))`),
		Native:   true,
	},
}

// Flags returns the ids of the injection patterns text matches, each id
// once, in the order of Patterns, then "encoded-instructions" (a base64
// run whose decoded text matches a pattern), "control-chars" and
// "invisible-unicode". An empty result means the text looks benign.
func Flags(text string) []string {
	var out []string
	add := func(id string) {
		for _, x := range out {
			if x == id {
				return
			}
		}
		out = append(out, id)
	}
	native, folded := Screen(text)
	for _, id := range match(native, folded) {
		add(id)
	}
	if decodedInjection(text) {
		add("encoded-instructions")
	}
	ctrl, invisible, run := false, false, 0
	var prev rune
	rs := []rune(text)
	for i, r := range rs {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			run = 0
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			ctrl = true
			run = 0
		case isHidden(r):
			invisible = true
		case isZeroWidth(r):
			// One zero-width space before a link is how Trac and other
			// trackers mark external links; hidden messages need runs, or
			// a zero-width character splitting a Latin word (which hides
			// it from a filter that reads words).
			if run++; run >= 2 {
				invisible = true
			}
			if splitsWord(r, prev, rs, i) {
				invisible = true
			}
		default:
			run = 0
		}
		prev = r
	}
	if ctrl {
		add("control-chars")
	}
	if invisible {
		add("invisible-unicode")
	}
	return out
}

// match runs the patterns on a screened text's two forms.
func match(native, folded string) []string {
	var out []string
	for _, p := range Patterns {
		s := folded
		if p.Native {
			s = native
		}
		if !hasKeyword(s, p.Keywords) || !p.Re.MatchString(s) {
			continue
		}
		dup := false
		for _, x := range out {
			dup = dup || x == p.ID
		}
		if !dup {
			out = append(out, p.ID)
		}
	}
	return out
}

func hasKeyword(s string, keys []string) bool {
	if len(keys) == 0 {
		return true
	}
	for _, k := range keys {
		if strings.Contains(s, k) {
			return true
		}
	}
	return false
}

// splitsWord reports a zero-width space, word joiner or byte order mark
// between two Latin letters (zero-width joiners and non-joiners are left
// alone: scripts such as Persian and Devanagari use them inside words).
func splitsWord(r, prev rune, rs []rune, i int) bool {
	if r != 0x200b && r != 0x2060 && r != 0xfeff && r != 0x00ad {
		return false
	}
	if i+1 >= len(rs) || r == 0x00ad { // a soft hyphen inside a word is ordinary
		return false
	}
	latin := func(c rune) bool { return c < 0x250 && unicode.IsLetter(c) }
	return latin(prev) && latin(rs[i+1])
}

// Screen returns the two forms of text the patterns run on: native is
// text normalised to NFKC (fullwidth and styled letters become plain
// ones), with the format characters that render as nothing removed and
// lowercased; folded is native with the letters of other scripts that
// imitate Latin ones (Cyrillic "а", Greek "ο"...) replaced by them.
func Screen(text string) (native, folded string) {
	s := norm.NFKC.String(text)
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if isZeroWidth(r) || isHidden(r) || unicode.Is(unicode.Cf, r) {
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	native = b.String()
	b.Reset()
	changed := false
	for _, r := range native {
		if l, ok := lookalikes[r]; ok {
			b.WriteRune(l)
			changed = true
			continue
		}
		b.WriteRune(r)
	}
	if !changed {
		return native, native
	}
	return native, b.String()
}

// lookalikes maps lowercase letters of the Cyrillic, Greek and Armenian
// scripts to the Latin letters they are drawn like (after NFKC, which
// already maps fullwidth, mathematical and other styled letters). It is
// the part of Unicode's confusables (UTS #39) that spells English words.
var lookalikes = map[rune]rune{
	// Cyrillic
	'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'e', 'һ': 'h', 'і': 'i', 'ї': 'i', 'ј': 'j', 'к': 'k', 'м': 'm', 'н': 'h',
	'о': 'o', 'р': 'p', 'с': 'c', 'т': 't', 'у': 'y', 'х': 'x', 'ѕ': 's', 'ԁ': 'd', 'ԛ': 'q', 'ԝ': 'w', 'ɡ': 'g',
	'ӏ': 'l', 'ү': 'y', 'ѵ': 'v', 'ԍ': 'g', 'ц': 'u', 'п': 'n', 'г': 'r', 'ь': 'b', 'ы': 'b', 'ш': 'w', 'ѡ': 'w',
	// Greek
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u',
	'χ': 'x', 'γ': 'y', 'ϲ': 'c', 'ϳ': 'j', 'ω': 'w', 'μ': 'u', 'ς': 's', 'ɩ': 'i',
	// Armenian
	'օ': 'o', 'ս': 'u', 'ց': 'g', 'հ': 'h', 'ո': 'n', 'ռ': 'n', 'զ': 'q', 'ա': 'w',
	// Latin letters that stand in for others
	'ı': 'i', 'ȷ': 'j', 'ℓ': 'l', 'ƅ': 'b', 'ǀ': 'l',
}

// maxDecodedRuns bounds how many base64 runs one text has decoded.
const maxDecodedRuns = 64

// decodedInjection reports a base64 run of text (at least 24 characters of
// the standard or URL alphabet, optionally padded; base64 is
// case-sensitive, so runs are taken from text as it is) whose decoded
// bytes are readable text that matches an injection pattern.
func decodedInjection(text string) bool {
	runs := base64RunCase.FindAllString(text, maxDecodedRuns)
	for _, r := range runs {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			dec, err := enc.DecodeString(r)
			if err != nil || !readable(dec) {
				continue
			}
			native, folded := Screen(string(dec))
			if len(match(native, folded)) > 0 {
				return true
			}
			break
		}
	}
	return false
}

// base64RunCase finds the runs that may be base64.
var base64RunCase = regexp.MustCompile(`[A-Za-z0-9+/_-]{24,}={0,2}`)

// readable reports whether decoded bytes are text: valid UTF-8, mostly
// letters, digits, spaces and punctuation.
func readable(b []byte) bool {
	if !utf8.Valid(b) || len(b) < 12 {
		return false
	}
	good, n := 0, 0
	for _, r := range string(b) {
		n++
		if unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsSpace(r) || unicode.IsPunct(r) || unicode.IsSymbol(r) {
			good++
		}
	}
	return good*10 >= n*9
}

// isHidden reports characters that have no business in a lesson: Unicode
// tag characters (which can smuggle ASCII invisibly) and the bidirectional
// embeddings, overrides and isolates (which reorder what a reader sees).
func isHidden(r rune) bool {
	return (r >= 0xe0000 && r <= 0xe007f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// isZeroWidth reports format characters that render as nothing: zero-width
// spaces and joiners, marks, word joiners, the byte order mark, the soft
// hyphen and similar. Two or more in a row are flagged.
func isZeroWidth(r rune) bool {
	switch {
	case r == 0x00ad, r == 0x034f, r == 0x061c, r == 0x180e, r == 0xfeff:
		return true
	case r >= 0x200b && r <= 0x200f:
		return true
	case r >= 0x2060 && r <= 0x2064:
		return true
	}
	return false
}
