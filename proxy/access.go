package proxy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"

	"github.com/foldproxy/foldproxy/proxy/guard"
)

// frontToken is guard.NewToken with the errors worded for a front on the
// HTTP listener.
func frontToken(front, token string, loopback bool) (guard.Token, error) {
	t, err := guard.NewToken(token, loopback)
	switch {
	case errors.Is(err, guard.ErrTokenRequired):
		return t, fmt.Errorf("%s: Token is required when the listen address is not loopback", front)
	case errors.Is(err, guard.ErrTokenMalformed):
		return t, fmt.Errorf("%s: Token must not contain spaces at its ends or line breaks", front)
	}
	return t, err
}

// httpTokenSum is frontToken for the model front, which keeps the token's
// hash itself (it checks it with guard.MatchSum).
func httpTokenSum(front, token string, loopback bool) (bool, [sha256.Size]byte, error) {
	t, err := frontToken(front, token, loopback)
	need, sum := t.Sum()
	return need, sum, err
}

// httpOrigins normalizes a front's AllowedOrigins into a set.
func httpOrigins(front string, origins []string) (guard.Origins, error) {
	set, err := guard.NewOrigins(origins)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", front, err)
	}
	return set, nil
}

// httpOriginRefusal is guard.Refusal: every front on the HTTP listener
// applies it against DNS rebinding.
func httpOriginRefusal(r *http.Request, loopback bool, allowed guard.Origins) string {
	return guard.Refusal(r, loopback, allowed)
}
