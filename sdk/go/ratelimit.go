package queuecore

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RateLimit is the key's rate-limit state for one category, as an answer reported it: from the IETF
// draft's structured fields (RateLimit-Policy: "publish";q=100;w=1 and RateLimit: "publish";r=37;t=1)
// when present, else from RateLimit-Limit, -Remaining and -Reset. Every QueueCore SDK reads it the same
// way. A field the answer did not carry is -1 (Limit, Remaining) or 0 (Reset, Window).
type RateLimit struct {
	// Policy is the limit's category ("publish", "consume", "admin"); "" when only the older fields came.
	Policy string
	// Limit is the requests allowed per window.
	Limit int
	// Remaining is the requests left in the current window.
	Remaining int
	// Reset is the time until the window resets.
	Reset time.Duration
	// Window is the window's length (w), 0 when not sent.
	Window time.Duration
}

// rateLimitState is the last RateLimit a client saw, shared by a client and its WithOptions copies.
type rateLimitState struct {
	mu   sync.Mutex
	last *RateLimit
}

func (s *rateLimitState) set(rl *RateLimit) {
	if rl == nil {
		return
	}
	s.mu.Lock()
	s.last = rl
	s.mu.Unlock()
}

func (s *rateLimitState) get() *RateLimit {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return nil
	}
	copied := *s.last
	return &copied
}

// RateLimit is the key's rate-limit state as the last answer that carried one reported it (nil before
// any).
func (c *Client) RateLimit() *RateLimit { return c.rateLimit.get() }

// ParseRateLimit reads the rate-limit state of an answer's headers; nil when it carries none.
func ParseRateLimit(h http.Header) *RateLimit {
	if structured := h.Get("RateLimit"); structured != "" {
		if members := sfMembers(structured); len(members) > 0 {
			rl := &RateLimit{Policy: members[0].name, Limit: -1, Remaining: sfInt(members[0].params["r"]),
				Reset: sfSeconds(members[0].params["t"])}
			found := false
			for _, p := range sfMembers(h.Get("RateLimit-Policy")) {
				if p.name == rl.Policy {
					rl.Limit, rl.Window, found = sfInt(p.params["q"]), sfSeconds(p.params["w"]), true
					break
				}
			}
			if !found {
				rl.Limit = sfInt(h.Get("RateLimit-Limit"))
			}
			return rl
		}
	}
	limit, remaining, reset := h.Values("RateLimit-Limit"), h.Values("RateLimit-Remaining"), h.Values("RateLimit-Reset")
	if len(limit) == 0 && len(remaining) == 0 && len(reset) == 0 {
		return nil
	}
	return &RateLimit{Limit: sfInt(h.Get("RateLimit-Limit")), Remaining: sfInt(h.Get("RateLimit-Remaining")),
		Reset: sfSeconds(h.Get("RateLimit-Reset"))}
}

type sfMember struct {
	name   string
	params map[string]string
}

// sfSplit splits s on sep outside double-quoted strings.
func sfSplit(s string, sep rune) []string {
	var parts []string
	var cur strings.Builder
	quoted, escaped := false, false
	for _, r := range s {
		switch {
		case escaped:
			escaped = false
		case r == '\\' && quoted:
			escaped = true
		case r == '"':
			quoted = !quoted
		case r == sep && !quoted:
			parts = append(parts, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(parts, strings.TrimSpace(cur.String()))
}

func sfMembers(value string) []sfMember {
	var out []sfMember
	for _, member := range sfSplit(value, ',') {
		if member == "" {
			continue
		}
		items := sfSplit(member, ';')
		name := items[0]
		if len(name) >= 2 && name[0] == '"' && name[len(name)-1] == '"' {
			name = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(name[1 : len(name)-1])
		}
		params := map[string]string{}
		for _, p := range items[1:] {
			k, v, _ := strings.Cut(p, "=")
			params[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
		out = append(out, sfMember{name: name, params: params})
	}
	return out
}

func sfInt(v string) int {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 || f > 1<<53 {
		return -1
	}
	return int(f)
}

func sfSeconds(v string) time.Duration {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 || f > 1e9 {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}
