package dispatch_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// refusingPublisher fails every record with err, as a broker refusing them
// (or not reachable) would.
type refusingPublisher struct{ err error }

func (p refusingPublisher) Publish(_ context.Context, recs []*kgo.Record) []error {
	errs := make([]error, len(recs))
	for i := range errs {
		errs[i] = p.err
	}
	return errs
}

// A publish error longer than last_error holds is cut to fit; under strict
// sql_mode a cut through a multi-byte character would make MariaDB refuse the
// UPDATE, rolling back the recipient's whole batch at every run.
func TestALongPublishErrorIsStoredCutBeforeAMultiByteCharacter(t *testing.T) {
	// The error's 500th byte is the first of "é": a cut at byte 500 splits it.
	long := strings.Repeat("x", 499) + "é and the rest of a long broker answer"
	cut := strings.Repeat("x", 499)
	for _, c := range []struct {
		name        string
		err         error
		maxAttempts int
		want        string
		deadLetter  bool
	}{
		{"a refused record backs its recipient off with the error stored", errors.New(long), 10, cut, false},
		{"an unreachable broker backs its recipient off with the error stored", fmt.Errorf("%s: %w", long, context.DeadlineExceeded), 10, cut, false},
		{"a dead-lettered event keeps the error on the event and on its recipient", errors.New(long), 1, cut, true},
		{"an error holding a byte that is not UTF-8 is stored with it replaced", errors.New("broker said \xff"), 10, "broker said \uFFFD", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newDispFixture(t, 1)
			var mode string
			if err := f.db.QueryRow("SELECT @@SESSION.sql_mode").Scan(&mode); err != nil || !strings.Contains(mode, "STRICT_") {
				t.Fatalf("sql_mode %q (%v): this test needs the strict mode production runs with", mode, err)
			}
			f.agents(t, "bob")
			f.send(t, "x", "bob", 1)
			d := f.dispatcher(refusingPublisher{c.err}, nil)
			d.MaxAttempts = c.maxAttempts
			d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
			st, err := d.RunOnce(context.Background())
			if err != nil {
				t.Fatalf("RunOnce = %v: the batch was rolled back", err)
			}
			if st.Failed != 1 {
				t.Fatalf("stats %+v, want one failed publish", st)
			}
			var stateErr sql.NullString
			if err := f.db.QueryRow("SELECT last_error FROM dispatch_state WHERE recipient = 'bob'").Scan(&stateErr); err != nil {
				t.Fatal(err)
			}
			if stateErr.String != c.want {
				t.Fatalf("dispatch_state.last_error = %.40q… (%d bytes), want %.40q… (%d bytes)", stateErr.String, len(stateErr.String), c.want, len(c.want))
			}
			if !c.deadLetter {
				return
			}
			var delivery string
			var eventErr sql.NullString
			if err := f.db.QueryRow("SELECT delivery, last_error FROM outbox_events WHERE recipient = 'bob' AND seq = 1").Scan(&delivery, &eventErr); err != nil {
				t.Fatal(err)
			}
			if delivery != "failed" || eventErr.String != c.want {
				t.Fatalf("the event is %s with last_error %.40q… (%d bytes), want failed with %.40q… (%d bytes)", delivery, eventErr.String, len(eventErr.String), c.want, len(c.want))
			}
		})
	}
}
