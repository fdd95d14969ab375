package policy

// Level is a budget warning level.
type Level int

// The warning levels, in order. A branch is at Caution from the first
// threshold (70% by default), Warning from the second (85%) and Critical from
// the third (95%).
const (
	Normal Level = iota
	Caution
	Warning
	Critical
)

var levelNames = [...]string{"normal", "caution", "warning", "critical"}

// String returns the level's name as it appears on the wire.
func (l Level) String() string {
	if l < Normal || l > Critical {
		return "unknown"
	}
	return levelNames[l]
}

// LevelOf returns the warning level of a budget with used of total tokens
// spent, given the three ascending thresholds. A total of zero or less means
// an unlimited budget, which is always Normal.
func LevelOf(used, total int, thresholds []float64) Level {
	if total <= 0 {
		return Normal
	}
	frac := float64(used) / float64(total)
	l := Normal
	for i, t := range thresholds {
		if frac >= t {
			l = Level(i + 1)
		}
	}
	if l > Critical {
		l = Critical
	}
	return l
}

// ParseLevel returns the level named name (as String writes it) and true,
// or Normal and false for a name that is no level (an empty one included).
// It is the one parser of level names: a branch's stored level is a name.
func ParseLevel(name string) (Level, bool) {
	for l := Normal; l <= Critical; l++ {
		if levelNames[l] == name {
			return l, true
		}
	}
	return Normal, false
}
