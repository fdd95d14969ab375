package policy_test

import (
	"errors"
	"fmt"

	"github.com/foldproxy/foldproxy/policy"
)

// ExampleParse reads the "foldproxy" object of a configuration: what is
// given is kept, every other field gets its default, and a bad value is
// refused with an error that names the field.
func ExampleParse() {
	s, err := policy.Parse([]byte(`{"fold": {"defaultBudget": 4096, "maxDepth": 2}, "memory": {"disabled": true}}`))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("defaultBudget:", s.Fold.DefaultBudget, "maxBudget:", s.Fold.MaxBudget, "maxDepth:", s.Fold.MaxDepth)
	fmt.Println("defaultTimeout:", s.Fold.DefaultTimeout.D(), "encoding:", s.Tokens.Encoding, "memory off:", s.Memory.Disabled)

	_, err = policy.Parse([]byte(`{"fold": {"defaultBudget": 65536}}`))
	fmt.Println(errors.Is(err, policy.ErrInvalid), err)

	_, err = policy.Parse([]byte(`{"fold": {"defaultBuget": 4096}}`))
	fmt.Println(err)
	// Output:
	// defaultBudget: 4096 maxBudget: 32768 maxDepth: 2
	// defaultTimeout: 5m0s encoding: o200k_base memory off: true
	// true invalid configuration: foldproxy.fold.defaultBudget: 65536 exceeds fold.maxBudget 32768
	// invalid configuration: foldproxy: unknown field "defaultBuget" (at foldproxy.fold.defaultBuget)
}
