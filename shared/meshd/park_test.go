package meshd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAFailingEventIsParkedAndDeliveryMovesOn(t *testing.T) {
	taskTerminal := &meshclient.APIError{Status: 409, Code: "task_terminal", Detail: "the task is finished"}
	cases := []struct {
		name         string
		fail         error // what seq 2 returns on every attempt
		wantAttempts int
		wantReason   string
	}{
		{"a transient failure is tried HandlerAttempts times, then parked", errors.New("the LLM is down"), 3, meshd.ReasonExhausted},
		{"an error marked Permanent is parked at the first attempt", meshd.Permanent(errors.New("this request can never work")), 1, meshd.ReasonPermanent},
		{"a 409 task_terminal from a call made for the event is parked at the first attempt", fmt.Errorf("reply: %w", taskTerminal), 1, meshd.ReasonPermanent},
		{"a 5xx from a call made for the event is retried", &meshclient.APIError{Status: 503, Code: "unavailable"}, 3, meshd.ReasonExhausted},
		{"a 429 from a call made for the event is retried", &meshclient.APIError{Status: 429, Code: "rate_limited"}, 3, meshd.ReasonExhausted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			for i := 1; i <= 4; i++ {
				f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))
			}
			h := newRecorder()
			h.fail = func(env mesh.Envelope, attempt int) error {
				if env.Seq == 2 {
					return tc.fail
				}
				return nil
			}
			r := f.start(h, func(c *meshd.Config) {
				c.Mode, c.HandlerAttempts, c.HeartbeatEvery = meshd.ModePoll, 3, 50*time.Millisecond
			})
			h.waitFor(t, 3, 10*time.Second)
			// The owner's console shows parked events from the heartbeats.
			parked := func() bool {
				f.api.mu.Lock()
				defer f.api.mu.Unlock()
				return f.api.lastStats["parked"] == 1.0
			}
			for deadline := time.Now().Add(5 * time.Second); !parked(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no heartbeat reported the parked event; last stats %v", f.api.lastStats)
				}
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if got := h.handled(); !slices.Equal(got, []int64{1, 3, 4}) {
				t.Errorf("handled %v, want 1, 3, 4 in order", got)
			}
			h.mu.Lock()
			tries := h.tries[2]
			h.mu.Unlock()
			if tries != tc.wantAttempts {
				t.Errorf("seq 2 was tried %d times, want %d", tries, tc.wantAttempts)
			}
			if st := f.state(); st.LastSeq != 4 {
				t.Errorf("state %+v, want last_seq 4", st)
			}
			dls, err := meshd.ListDeadLetters(f.dir, "bob")
			if err != nil || len(dls) != 1 {
				t.Fatalf("dead letters %+v (%v), want seq 2 only", dls, err)
			}
			dl := dls[0]
			if dl.Seq != 2 || dl.Reason != tc.wantReason || dl.Attempts != tc.wantAttempts || dl.TaskID != "task-2" ||
				!strings.Contains(dl.Error, tc.fail.Error()) || dl.Event.Seq != 2 || len(dl.Event.Body) == 0 {
				t.Errorf("dead letter %+v", dl)
			}
			calls := f.api.statusCalls()
			if len(calls) != 1 || calls[0].TaskID != "task-2" || calls[0].Req.Status != mesh.TaskFailed ||
				calls[0].Req.Message == nil || !strings.Contains(calls[0].Req.Message.Parts[0].Text, tc.fail.Error()) {
				t.Errorf("status calls %+v, want task-2 failed with the handler's error", calls)
			}
			logs := f.logs.String()
			if !strings.Contains(logs, `"msg":"event parked`) || strings.Count(logs, `"msg":"event handled"`) != 3 {
				t.Errorf("want one parked and three handled log lines:\n%s", logs)
			}
		})
	}
}

func TestAParkedEventFailsTheTaskOnlyWhenTheAgentIsItsRecipient(t *testing.T) {
	f := newFixture(t, false)
	// Seq 1: alice's reply in a task bob started (bob is the initiator: he
	// may not fail it). Seq 2: a message in a task bob received, already
	// finished (409 is fine). Seq 3: a normal one.
	f.api.addBody(mesh.EventMessage, "alice", map[string]any{"parts": []mesh.Part{{Kind: "text", Text: "m1"}},
		"task": map[string]string{"initiator": "bob", "recipient": "alice"}})
	f.api.add(mesh.EventMessage, "alice", "m2")
	f.api.add(mesh.EventMessage, "alice", "m3")
	f.api.mu.Lock()
	f.api.terminal["task-2"] = true
	f.api.mu.Unlock()
	h := newRecorder()
	h.fail = func(env mesh.Envelope, attempt int) error {
		if env.Seq < 3 {
			return meshd.Permanent(errors.New("no"))
		}
		return nil
	}
	r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
	h.waitFor(t, 1, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	calls := f.api.statusCalls()
	if len(calls) != 1 || calls[0].TaskID != "task-2" {
		t.Errorf("status calls %+v, want only task-2 (bob's a recipient there)", calls)
	}
	if dls, _ := meshd.ListDeadLetters(f.dir, "bob"); len(dls) != 2 {
		t.Errorf("dead letters %+v, want seqs 1 and 2", dls)
	}
	if strings.Contains(f.logs.String(), "could not move the parked event's task") {
		t.Error("the 409 of a finished task was logged as a failure")
	}
}

func TestAnUndeliverablePlaceholderIsParkedNotHandled(t *testing.T) {
	f := newFixture(t, false)
	f.api.add(mesh.EventMessage, "alice", "m1")
	f.api.addBody(mesh.EventUndeliverable, "alice", mesh.UndeliverableBody{Code: "unencodable", OriginalType: mesh.EventMessage})
	f.api.add(mesh.EventMessage, "alice", "m3")
	h := newRecorder()
	r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
	h.waitFor(t, 2, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	tries := h.tries[2]
	h.mu.Unlock()
	if got := h.handled(); !slices.Equal(got, []int64{1, 3}) || tries != 0 {
		t.Errorf("handled %v (seq 2 tried %d times), want 1 and 3 and the placeholder never given to the handler", got, tries)
	}
	dls, err := meshd.ListDeadLetters(f.dir, "bob")
	if err != nil || len(dls) != 1 || dls[0].Seq != 2 || dls[0].Reason != meshd.ReasonUndeliverable || !strings.Contains(dls[0].Error, "unencodable") {
		t.Errorf("dead letters %+v (%v)", dls, err)
	}
	if len(f.api.statusCalls()) != 0 {
		t.Error("an undeliverable placeholder failed its task")
	}
	if !strings.Contains(f.logs.String(), `"level":"ERROR","msg":"undeliverable event`) {
		t.Error("no error log for the placeholder")
	}
}

func TestTheDeadLetterListIsBounded(t *testing.T) {
	f := newFixture(t, false)
	for i := 1; i <= 4; i++ {
		f.api.add(mesh.EventMessage, "alice", fmt.Sprintf("m%d", i))
	}
	h := newRecorder()
	h.fail = func(env mesh.Envelope, attempt int) error {
		if env.Seq < 4 {
			return meshd.Permanent(errors.New("no"))
		}
		return nil
	}
	r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll; c.MaxDeadLetters = 2 })
	h.waitFor(t, 1, 10*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	dls, _ := meshd.ListDeadLetters(f.dir, "bob")
	var got []int64
	for _, dl := range dls {
		got = append(got, dl.Seq)
	}
	if !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("parked %v, want the newest two (2, 3)", got)
	}
	if !strings.Contains(f.logs.String(), `"dropped_seq":1`) {
		t.Error("dropping seq 1 was not logged")
	}
}

func TestRetryDeadLetterRunsAParkedEventAgain(t *testing.T) {
	f := newFixture(t, false)
	f.api.add(mesh.EventMessage, "alice", "m1")
	f.api.add(mesh.EventMessage, "alice", "m2")
	broken := true
	h := newRecorder()
	h.fail = func(env mesh.Envelope, attempt int) error {
		if env.Seq == 1 && broken {
			return meshd.Permanent(errors.New("bad day"))
		}
		return nil
	}
	r := f.start(h, func(c *meshd.Config) { c.Mode = meshd.ModePoll })
	h.waitFor(t, 1, 10*time.Second)
	cfg := meshd.RetryConfig{StateDir: f.dir, AgentID: "bob", Handler: h, Log: slog.New(slog.NewJSONHandler(f.logs, nil))}

	t.Run("a retry while meshd run holds the state is refused", func(t *testing.T) {
		err := meshd.RetryDeadLetter(context.Background(), cfg, 1)
		if err == nil || !strings.Contains(err.Error(), "already running") {
			t.Errorf("err = %v", err)
		}
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	t.Run("a failing retry keeps the event parked and counts the attempt", func(t *testing.T) {
		err := meshd.RetryDeadLetter(context.Background(), cfg, 1)
		if err == nil || !strings.Contains(err.Error(), "bad day") {
			t.Errorf("err = %v", err)
		}
		dl, err := meshd.LoadDeadLetter(f.dir, "bob", 1)
		if err != nil || dl.Attempts != 2 {
			t.Errorf("dead letter %+v (%v), want 2 attempts", dl, err)
		}
	})
	t.Run("a successful retry runs the handler with the event and removes it", func(t *testing.T) {
		broken = false
		if err := meshd.RetryDeadLetter(context.Background(), cfg, 1); err != nil {
			t.Fatal(err)
		}
		if got := h.handled(); !slices.Equal(got, []int64{2, 1}) || h.texts[1] != "m1" {
			t.Errorf("handled %v %v", got, h.texts)
		}
		if dls, _ := meshd.ListDeadLetters(f.dir, "bob"); len(dls) != 0 {
			t.Errorf("still parked: %+v", dls)
		}
	})
	t.Run("retrying a seq that is not parked says so", func(t *testing.T) {
		err := meshd.RetryDeadLetter(context.Background(), cfg, 2)
		if err == nil || !strings.Contains(err.Error(), "no parked event with seq 2") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestRunRefusesAHandlerCommandThatCannotStart(t *testing.T) {
	f := newFixture(t, false)
	began := time.Now()
	err := meshd.Run(context.Background(), meshd.Config{
		API: meshclient.New(f.apiURL, "amk_test"), StateDir: f.dir,
		Handler: meshd.CommandHandler{Command: []string{"/no/such/handler"}},
	})
	if err == nil || !strings.Contains(err.Error(), `"/no/such/handler"`) {
		t.Errorf("err = %v, want one naming the handler", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
	if f.api.servedCount(1) != 0 || len(f.api.beats) != 0 {
		t.Error("meshd went online with a handler that cannot run")
	}
}
