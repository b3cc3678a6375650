package meshd

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
)

func TestPushReconnectBackoffIsJitteredAndBounded(t *testing.T) {
	p := pushBackoff(DefaultPushRetryBase, DefaultPushRetryMax)
	t.Run("the first reconnect is spread over the whole window", func(t *testing.T) {
		lo, hi := DefaultPushRetryBase, time.Duration(0)
		for range 1000 {
			d := p.Delay(1)
			if d < 0 || d > DefaultPushRetryBase {
				t.Fatalf("first reconnect after %v, outside [0, %v]", d, DefaultPushRetryBase)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// 10,000 hosts dropped together must not come back together.
		if hi-lo < DefaultPushRetryBase/2 {
			t.Errorf("1000 first reconnects all within [%v, %v]: not spread over the %v window", lo, hi, DefaultPushRetryBase)
		}
	})
	t.Run("later reconnects never wait longer than the cap", func(t *testing.T) {
		for attempt := 1; attempt <= 100; attempt++ {
			if d := p.Delay(attempt); d > DefaultPushRetryMax {
				t.Fatalf("attempt %d waits %v, over the cap %v", attempt, d, DefaultPushRetryMax)
			}
		}
	})
	t.Run("the window doubles per failure", func(t *testing.T) {
		var top time.Duration
		for range 1000 {
			top = max(top, p.Delay(3))
		}
		if top <= DefaultPushRetryBase {
			t.Errorf("the third attempt never waited beyond the first window (%v): no backoff", top)
		}
	})
}

func TestPushHandshakesAreCappedPerMinute(t *testing.T) {
	l := dialLimiter{per: 3, window: time.Minute}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		now := t0.Add(time.Duration(i) * time.Second)
		if w := l.wait(now); w != 0 {
			t.Fatalf("handshake %d had to wait %v within the budget", i+1, w)
		}
		l.record(now)
	}
	t.Run("one more within the minute waits until the oldest is a minute old", func(t *testing.T) {
		if w := l.wait(t0.Add(10 * time.Second)); w != 50*time.Second {
			t.Errorf("wait %v, want 50s", w)
		}
	})
	t.Run("a minute after the oldest another is allowed", func(t *testing.T) {
		now := t0.Add(time.Minute)
		if w := l.wait(now); w > 0 {
			t.Errorf("wait %v, want none", w)
		}
		l.record(now)
		if len(l.times) != 3 {
			t.Errorf("the limiter keeps %d times, want 3 (bounded)", len(l.times))
		}
	})
}

// pushRunner is a runner with just what a push session needs.
func pushRunner(base, max time.Duration) *runner {
	return &runner{cfg: Config{
		PushRetryBase: base, PushRetryMax: max, ProbeEvery: base,
		PushQueue: 4, PushDialsPerMinute: 1000,
		PushPingEvery: time.Hour, PushPingTimeout: time.Second,
	}, log: slog.New(slog.DiscardHandler)}
}

func TestPushDialErrorsAreClassified(t *testing.T) {
	now := time.Now()
	t.Run("no HTTP answer is an unreachable channel", func(t *testing.T) {
		if e := newPushDialError(nil, errors.New("connection refused"), now); e.status != 0 || e.retryAfter != 0 {
			t.Errorf("got status %d, retry after %v; want 0, 0", e.status, e.retryAfter)
		}
	})
	t.Run("an answer keeps its status and Retry-After", func(t *testing.T) {
		resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"7"}}}
		if e := newPushDialError(resp, errors.New("refused"), now); e.status != 429 || e.retryAfter != 7*time.Second {
			t.Errorf("got status %d, retry after %v; want 429, 7s", e.status, e.retryAfter)
		}
	})
}

func TestPushRetryWaitHonoursRetryAfterWithinTheCap(t *testing.T) {
	ps := newPushSession(pushRunner(time.Millisecond, time.Minute), "")
	defer ps.close()
	busy := func(ra time.Duration) error {
		return &pushDialError{status: http.StatusTooManyRequests, retryAfter: ra, err: errors.New("refused")}
	}
	for _, tc := range []struct {
		name     string
		err      error
		min, max time.Duration
	}{
		{"without Retry-After the jittered backoff applies", busy(0), 0, time.Millisecond},
		{"a Retry-After longer than the backoff is waited out", busy(45 * time.Second), 45 * time.Second, 45 * time.Second},
		{"a Retry-After beyond PushRetryMax waits PushRetryMax", busy(time.Hour), time.Minute, time.Minute},
		{"an unreachable channel has no Retry-After", &pushDialError{err: errors.New("connection refused")}, 0, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 100 {
				if d := ps.retryWait(1, tc.err); d < tc.min || d > tc.max {
					t.Fatalf("wait %v, want within [%v, %v]", d, tc.min, tc.max)
				}
			}
		})
	}
}

func TestPushFallBackToPoll(t *testing.T) {
	unreachable := &pushDialError{err: errors.New("dial tcp: connection refused")}
	for _, tc := range []struct {
		name  string
		err   error
		fails int
		want  bool
	}{
		{"an unreachable channel is polled around at once", unreachable, 1, true},
		{"a 503 is retried on push", &pushDialError{status: 503}, 1, false},
		{"a 429 is retried on push", &pushDialError{status: 429}, 1, false},
		{"a 503 one short of the limit is still retried on push", &pushDialError{status: 503}, pushFallbackAfter - 1, false},
		{"the limit of handshakes failed in a row is polled around", &pushDialError{status: 503}, pushFallbackAfter, true},
		{"a token exchange that failed is retried on push", errors.New("mesh API unreachable"), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pushFallBack(tc.err, tc.fails); got != tc.want {
				t.Errorf("pushFallBack(%v, %d) = %v, want %v", tc.err, tc.fails, got, tc.want)
			}
		})
	}
}

func TestPushProbeBacksOff(t *testing.T) {
	// probes dials with a fake dial that fails n times (with err), then
	// connects; it returns the (fake clock) times of the dials.
	probes := func(t *testing.T, ps *pushSession, n int, err error) ([]time.Time, int) {
		var at []time.Time
		dial := func(context.Context) (*pushConn, error) {
			at = append(at, time.Now())
			if len(at) <= n {
				return nil, err
			}
			return &pushConn{}, nil
		}
		start := time.Now()
		pc, attempts, perr := ps.probe(t.Context(), dial, 1, err)
		if pc == nil || perr != nil {
			t.Fatalf("probe returned %v, %v", pc, perr)
		}
		if attempts != 1+n {
			t.Errorf("probe counted %d failures, want %d", attempts, 1+n)
		}
		return append([]time.Time{start}, at...), attempts
	}
	t.Run("the wait between probes grows, and never passes PushRetryMax", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			base, limit := time.Second, 64*time.Second
			ps := newPushSession(pushRunner(base, limit), "")
			defer ps.close()
			at, _ := probes(t, ps, 12, &pushDialError{err: errors.New("connection refused")})
			var longest time.Duration
			for i := 1; i < len(at); i++ {
				d := at[i].Sub(at[i-1])
				if d > limit {
					t.Errorf("probe %d after %v, over PushRetryMax %v", i, d, limit)
				}
				longest = max(longest, d)
			}
			// Windows 2 s, 4 s, ... 64 s: all 13 waits within 2 s is
			// (2/4 * 2/8 * ...) less likely than 1e-12.
			if longest <= 2*base {
				t.Errorf("13 probes, none waited over %v: the probe does not back off", 2*base)
			}
		})
	})
	t.Run("a probe refused with Retry-After waits it out, up to PushRetryMax", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			limit := time.Minute
			ps := newPushSession(pushRunner(time.Millisecond, limit), "")
			defer ps.close()
			at, _ := probes(t, ps, 5, &pushDialError{status: 429, retryAfter: 45 * time.Second})
			for i := 1; i < len(at); i++ {
				if d := at[i].Sub(at[i-1]); d < 45*time.Second || d > limit {
					t.Errorf("probe %d after %v, want within [45s, %v]", i, d, limit)
				}
			}
		})
	})
}

// A connection the server or the network ends leaves the session: only
// retired ones used to, so a host whose connections kept dropping
// accumulated one entry (and maybe one socket) per drop for its whole life.
func TestPushConnectionsThatEndOnTheirOwnLeaveTheSession(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		if r.URL.Query().Has("abrupt") {
			_ = c.CloseNow()
			return
		}
		_ = c.Close(websocket.StatusGoingAway, "server going away")
	}))
	defer srv.Close()
	ps := newPushSession(pushRunner(time.Millisecond, time.Second), "")
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	for i, q := range []string{"", "?abrupt", "", "?abrupt"} {
		c, _, err := websocket.Dial(t.Context(), url+q, nil)
		if err != nil {
			t.Fatal(err)
		}
		pc := ps.start(c)
		<-pc.done
		ps.mu.Lock()
		n := len(ps.conns)
		ps.mu.Unlock()
		if n != 0 {
			t.Fatalf("after %d connections ended on their own the session holds %d", i+1, n)
		}
	}
	ps.close()
}
