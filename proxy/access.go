package proxy

import (
	"fmt"
	"net/http"

	"github.com/foldproxy/foldproxy/proxy/guard"
)

// frontToken is guard.FrontToken: the token's errors worded for a front
// on the HTTP listener.
func frontToken(front, token string, loopback bool) (guard.Token, error) {
	return guard.FrontToken(front, token, loopback)
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
