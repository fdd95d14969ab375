package guard

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrTokenRequired is NewToken's error for an empty token off loopback:
// a front reachable by other hosts must not serve without one.
var ErrTokenRequired = errors.New("a token is required when the listen address is not loopback")

// ErrTokenMalformed is NewToken's error for a token with spaces at its
// ends or a line break: it could not travel in a header unchanged.
var ErrTokenMalformed = errors.New("the token must not contain spaces at its ends or line breaks")

// Token is a front's bearer token. The zero Token requires nothing (a
// loopback front without a token). It keeps the token's SHA-256 only.
type Token struct {
	need bool
	sum  [sha256.Size]byte
}

// NewToken checks token for a front whose listen address is loopback or
// not. An empty token is accepted on loopback only (ErrTokenRequired);
// a token with spaces at its ends or line breaks never
// (ErrTokenMalformed).
func NewToken(token string, loopback bool) (Token, error) {
	if token == "" && !loopback {
		return Token{}, ErrTokenRequired
	}
	if token == "" {
		return Token{}, nil
	}
	if strings.TrimSpace(token) != token || strings.ContainsAny(token, "\r\n") {
		return Token{}, ErrTokenMalformed
	}
	return Token{need: true, sum: sha256.Sum256([]byte(token))}, nil
}

// FrontToken is NewToken with its errors worded for the front named
// front, whose options call the field Token: the MCP front (package proxy)
// and the model front (package proxy/modelfront) word them alike.
func FrontToken(front, token string, loopback bool) (Token, error) {
	t, err := NewToken(token, loopback)
	switch {
	case errors.Is(err, ErrTokenRequired):
		return t, fmt.Errorf("%s: Token is required when the listen address is not loopback", front)
	case errors.Is(err, ErrTokenMalformed):
		return t, fmt.Errorf("%s: Token must not contain spaces at its ends or line breaks", front)
	}
	return t, err
}

// Required reports whether requests must carry the token.
func (t Token) Required() bool { return t.need }

// Match reports whether got, with spaces at its ends trimmed, is the
// token, or whether no token is required. The comparison takes the same
// time whatever got is.
func (t Token) Match(got string) bool {
	if !t.need {
		return true
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1
}

// Bearer reports whether r carries the token in "Authorization: Bearer
// <token>" (the scheme's case ignored), or whether none is required.
func (t Token) Bearer(r *http.Request) bool {
	if !t.need {
		return true
	}
	const prefix = "bearer "
	auth := r.Header.Get("Authorization")
	return len(auth) > len(prefix) && strings.EqualFold(auth[:len(prefix)], prefix) && t.Match(auth[len(prefix):])
}

// Proxy reports whether r carries the token in Proxy-Authorization:
// Bearer, or Basic with the token as the password (what
// HTTPS_PROXY=http://user:<token>@host:port makes clients send), or
// whether none is required.
func (t Token) Proxy(r *http.Request) bool {
	if !t.need {
		return true
	}
	auth := strings.TrimSpace(r.Header.Get("Proxy-Authorization"))
	scheme, cred, _ := strings.Cut(auth, " ")
	cred = strings.TrimSpace(cred)
	switch strings.ToLower(scheme) {
	case "bearer":
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return false
		}
		_, cred, _ = strings.Cut(string(raw), ":")
		// The password is compared as sent: Match trims only what a
		// header would have lost anyway.
		if strings.TrimSpace(cred) != cred {
			return false
		}
	default:
		return false
	}
	return t.Match(cred)
}

// MatchSum is Match for a front that keeps the token's hash itself (need,
// sum as a Token holds them).
func MatchSum(need bool, sum [sha256.Size]byte, got string) bool {
	return Token{need: need, sum: sum}.Match(got)
}

// Sum returns whether the token is required and its SHA-256, for a front
// that keeps them itself (see MatchSum).
func (t Token) Sum() (bool, [sha256.Size]byte) { return t.need, t.sum }
