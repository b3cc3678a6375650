package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/outbox"
)

var (
	report   = flag.Bool("report", false, "run the comparison and write report.md (make bench)")
	scale    = flag.Bool("scale", false, "run the scale part (1,000,000-row tables; make bench-scale)")
	outDir   = flag.String("out", ".", "directory of report.md and the plots")
	latDur   = flag.Duration("latency.duration", 125*time.Second, "how long each latency rate sends (two dispatcher schedule periods and a bit)")
	quick    = flag.Bool("quick", false, "smaller sizes and shorter runs (to try the harness, figures not meaningful)")
	started  = time.Now()
	progress sync.Mutex
)

// say prints a progress line with the time since the run started.
func say(format string, args ...any) {
	progress.Lock()
	defer progress.Unlock()
	fmt.Fprintf(os.Stderr, "[bench %5.0fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
}

// repoRoot is the main module's directory (bench/ is inside it).
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "template.yaml")); err != nil {
		t.Fatalf("bench must run in bench/ of the repository: %v", err)
	}
	return root
}

// sized picks the quick or the full size.
func sized[T any](full, small T) T {
	if *quick {
		return small
	}
	return full
}

// insertAgents bulk-inserts agents with their inbox counters (what
// identity.CreateAgent writes for a recipient), 500 per statement.
func insertAgents(t testing.TB, db *mysql.DB, ids []string) {
	t.Helper()
	now := time.Now().UTC()
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		var agents, counters []any
		for _, id := range chunk {
			agents = append(agents, id, id, now)
			counters = append(counters, id)
		}
		rows := func(stmt, tuple string) string { return stmt + strings.Repeat(", "+tuple, len(chunk)-1) }
		if _, err := db.Exec(rows("INSERT INTO agents (agent_id, name, created_at) VALUES (?, ?, ?)", "(?, ?, ?)"), agents...); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(rows("INSERT INTO inbox_counters (recipient, last_seq) VALUES (?, 0)", "(?, 0)"), counters...); err != nil {
			t.Fatal(err)
		}
	}
}

// messageBody is the outbox body of a send (message and task reference).
func messageBody(id, from, to string, at time.Time) json.RawMessage {
	body, _ := json.Marshal(map[string]any{
		"message": map[string]any{"message_id": id, "from": from, "created_at": at,
			"parts": []mesh.Part{{Kind: "text", Text: "Please translate the attached release notes into German."}}},
		"task": map[string]any{"task_id": id, "context_id": "ctx-" + id, "initiator": from, "recipient": to, "status": mesh.TaskSubmitted},
	})
	return body
}

// appendPending appends n message events round-robin over recipients with
// outbox.Append, in transactions of chunk events.
func appendPending(t testing.TB, db *mysql.DB, recipients []string, n, chunk int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	for done := 0; done < n; {
		c := min(chunk, n-done)
		evs := make([]outbox.Event, 0, c)
		for i := range c {
			to := recipients[(done+i)%len(recipients)]
			id := fmt.Sprintf("%s-%d-%d", to, now.UnixNano(), done+i)
			evs = append(evs, outbox.Event{Type: mesh.EventMessage, To: to, From: "bench-sender", TaskID: id, ContextID: "ctx-" + id,
				MessageID: id, OccurredAt: now, Body: messageBody(id, "bench-sender", to, now)})
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error { return outbox.Append(ctx, tx, evs) }); err != nil {
			t.Fatal(err)
		}
		done += c
	}
}

// ids returns n ids prefix-0000...
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%06d", prefix, i)
	}
	return out
}
