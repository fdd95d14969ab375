package policy

import (
	"time"
)

// Aliases are the configuration keys of the seeds (the design's first
// implementations), accepted at the top of foldproxy's settings object as
// aliases of foldproxy's own keys, with the same defaults:
//
//	default_budget          fold.defaultBudget   (8192)
//	max_budget              fold.maxBudget       (32768)
//	max_depth               fold.maxDepth        (3)
//	default_timeout_seconds fold.defaultTimeout  (300 s)
//	max_timeout_seconds     fold.maxTimeout      (600 s)
//	injection_budget_ratio  memory.injectionRatio (0.2)
//	memory_min_confidence   memory.minConfidence (0.7)
//	memory_max_items        memory.maxItems      (10)
//
// An alias and its key both given with different values is an error that
// names both.
type Aliases struct {
	DefaultBudget         *int     `json:"default_budget,omitempty"`
	MaxBudget             *int     `json:"max_budget,omitempty"`
	MaxDepth              *int     `json:"max_depth,omitempty"`
	DefaultTimeoutSeconds *float64 `json:"default_timeout_seconds,omitempty"`
	MaxTimeoutSeconds     *float64 `json:"max_timeout_seconds,omitempty"`
	InjectionBudgetRatio  *float64 `json:"injection_budget_ratio,omitempty"`
	MemoryMinConfidence   *float64 `json:"memory_min_confidence,omitempty"`
	MemoryMaxItems        *int     `json:"memory_max_items,omitempty"`
}

// apply copies the aliases given onto their keys, before defaults are
// filled.
func (a Aliases) apply(s *Settings) []error {
	var errs []error
	integer := func(alias string, v *int, key string, dst *int) {
		if v == nil {
			return
		}
		if *dst != 0 && *dst != *v {
			errs = append(errs, invalid(alias, "%d differs from %s %d: give one of them", *v, key, *dst))
			return
		}
		*dst = *v
	}
	fraction := func(alias string, v *float64, key string, dst *float64) {
		if v == nil {
			return
		}
		if *dst != 0 && *dst != *v {
			errs = append(errs, invalid(alias, "%v differs from %s %v: give one of them", *v, key, *dst))
			return
		}
		*dst = *v
	}
	seconds := func(alias string, v *float64, key string, dst *Duration) {
		if v == nil {
			return
		}
		d := Duration(*v * float64(time.Second))
		if *v <= 0 {
			errs = append(errs, invalid(alias, "%v must be a positive number of seconds", *v))
			return
		}
		if *dst != 0 && *dst != d {
			errs = append(errs, invalid(alias, "%v s differs from %s %s: give one of them", *v, key, dst.D()))
			return
		}
		*dst = d
	}
	integer("default_budget", a.DefaultBudget, "fold.defaultBudget", &s.Fold.DefaultBudget)
	integer("max_budget", a.MaxBudget, "fold.maxBudget", &s.Fold.MaxBudget)
	integer("max_depth", a.MaxDepth, "fold.maxDepth", &s.Fold.MaxDepth)
	seconds("default_timeout_seconds", a.DefaultTimeoutSeconds, "fold.defaultTimeout", &s.Fold.DefaultTimeout)
	seconds("max_timeout_seconds", a.MaxTimeoutSeconds, "fold.maxTimeout", &s.Fold.MaxTimeout)
	fraction("injection_budget_ratio", a.InjectionBudgetRatio, "memory.injectionRatio", &s.Memory.InjectionRatio)
	fraction("memory_min_confidence", a.MemoryMinConfidence, "memory.minConfidence", &s.Memory.MinConfidence)
	integer("memory_max_items", a.MemoryMaxItems, "memory.maxItems", &s.Memory.MaxItems)
	return errs
}
