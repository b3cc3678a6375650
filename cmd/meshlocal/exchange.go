package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
	"github.com/agentmesh/agentmesh/shared/tasks"
)

// exchangeTimeout bounds the demo exchange. The dispatcher's scheduled runs
// overlap, so one is always draining and delivery takes well under a second;
// the bound leaves room for a first start on a slow machine.
const exchangeTimeout = 90 * time.Second

// exchange starts alice's and bob's meshd in-process (the same shared/meshd
// that cmd/meshd runs), has alice send bob a message over HTTP and waits for
// bob's handler to reply and alice's meshd to receive the reply. Both meshd
// keep running until meshlocal stops, so messages sent from the quickstart
// are answered too.
func (d *demo) exchange(ctx context.Context, creds *demoCreds, cleanups *[]func()) error {
	start := time.Now()
	d.say("[6/6] demo exchange: alice → bob over HTTP; outbox → dispatcher → Kafka, pushed over the WebSocket API → bob's meshd (in-process)")
	stateDir := filepath.Join(d.stateDir, "meshd")
	if creds.Created {
		// The agents are new, so their inboxes start at seq 1 again: progress
		// remembered from an earlier database would skip the new events.
		_ = os.RemoveAll(stateDir)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	alice := meshclient.New(d.base, creds.Keys["alice"], meshclient.WithLogger(d.log))
	bob := meshclient.New(d.base, creds.Keys["bob"], meshclient.WithLogger(d.log))

	var sentTask string
	var mu sync.Mutex
	gotReply := make(chan struct{})
	var once sync.Once
	// What bob's handler did with each task, so a failed exchange names
	// its cause: not delivered, or delivered and the reply failed.
	bobSaw := map[string]error{}
	var bobLastFail string           // the latest failure, whatever the task
	bobGaveUp := make(chan error, 1) // a permanent failure on the sent task
	bobHandler := meshd.HandlerFunc(func(ctx context.Context, env mesh.Envelope) error {
		if env.Type != mesh.EventMessage {
			return nil
		}
		text := messageText(env.Body)
		d.say("      bob's meshd    ← seq %d from %s: %q", env.Seq, env.From, text)
		reply := fmt.Sprintf("Hi %s, bob's handler got your %d-character message.", env.From, len([]rune(text)))
		// The reply's id derives from the event, so a retried handler (say,
		// after a crash) cannot send a second reply.
		_, err := bob.Reply(ctx, env.TaskID, meshclient.ReplyRequest{
			Parts:     []mesh.Part{{Kind: "text", Text: reply}},
			MessageID: "reply-" + env.EventID,
		})
		mu.Lock()
		bobSaw[env.TaskID] = err
		if err != nil {
			bobLastFail = fmt.Sprintf("seq %d (task %s): %v", env.Seq, env.TaskID, err)
		}
		ours := env.TaskID == sentTask
		mu.Unlock()
		if err != nil {
			if meshd.IsPermanent(err) && ours {
				// meshd parks the event and moves on; the exchange cannot
				// complete, so say why now rather than at the timeout.
				select {
				case bobGaveUp <- err:
				default:
				}
			}
			return err
		}
		d.say("      bob's handler  → POST /v1/tasks/%s/messages: %q", env.TaskID, reply)
		return nil
	})
	aliceHandler := meshd.HandlerFunc(func(ctx context.Context, env mesh.Envelope) error {
		if env.Type != mesh.EventMessage {
			return nil
		}
		d.say("      alice's meshd  ← seq %d from %s: %q", env.Seq, env.From, messageText(env.Body))
		mu.Lock()
		ours := env.TaskID == sentTask
		mu.Unlock()
		if ours {
			once.Do(func() { close(gotReply) })
		}
		return nil
	})

	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, a := range []struct {
		name string
		api  *meshclient.Client
		h    meshd.Handler
	}{{"alice", alice, aliceHandler}, {"bob", bob, bobHandler}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := meshd.Run(runCtx, meshd.Config{API: a.api, StateDir: stateDir, Handler: a.h, Log: d.log.With("meshd", a.name)})
			if err != nil {
				errs <- fmt.Errorf("%s's meshd: %w", a.name, err)
			}
		}()
	}
	*cleanups = append(*cleanups, func() {
		stop()
		wg.Wait()
		d.say("  demo meshd of alice and bob stopped (their progress is in %s)", stateDir)
	})

	// Send only once both meshd are online, so the exchange shows delivery
	// through Kafka rather than catch-up from the inbox.
	online := func(c *meshclient.Client) bool {
		var a struct {
			Status string `json:"status"`
		}
		return d.get(ctx, c, "/v1/agents/me", &a) == nil && a.Status == mesh.PresenceActive
	}
	if !waitFor(ctx, 15*time.Second, func() bool { return online(alice) && online(bob) }) {
		select {
		case err := <-errs:
			return err
		default:
		}
		return errors.New("the demo meshd did not come online within 15 s; see the log")
	}

	text := "Hello bob! This message travelled HTTP → MariaDB → Kafka → push → your meshd."
	mu.Lock()
	res, err := alice.Send(ctx, meshclient.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: text}}})
	sentTask = res.TaskID
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("alice's POST /v1/messages: %w", err)
	}
	d.say("      alice          → POST /v1/messages 202: task %s, message %s", res.TaskID, res.MessageID)

	select {
	case <-gotReply:
		d.say("      exchange complete in %.1f s", time.Since(start).Seconds())
		return nil
	case err := <-errs:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case err := <-bobGaveUp:
		return fmt.Errorf("bob's reply to task %s failed for good (his meshd parked the event and moved on): %w", res.TaskID, err)
	case <-time.After(exchangeTimeout):
		mu.Lock()
		herr, saw := bobSaw[res.TaskID]
		lastFail := bobLastFail
		mu.Unlock()
		switch {
		case !saw && lastFail != "":
			return fmt.Errorf("no reply within %v: bob's meshd has not reached task %s; his handler last failed on %s", exchangeTimeout, res.TaskID, lastFail)
		case !saw:
			return fmt.Errorf("no reply within %v: bob's meshd never received task %s (is the dispatcher publishing? see the log)", exchangeTimeout, res.TaskID)
		case herr != nil:
			return fmt.Errorf("no reply within %v: bob's handler got task %s but his reply keeps failing: %w", exchangeTimeout, res.TaskID, herr)
		default:
			return fmt.Errorf("no reply within %v: bob replied in task %s but alice's meshd has not received the reply (see the log)", exchangeTimeout, res.TaskID)
		}
	}
}

// get calls an agent route with c's token.
func (d *demo) get(ctx context.Context, c *meshclient.Client, path string, out any) error {
	tok, err := c.Token(ctx)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// messageText is the text of a message event's parts.
func messageText(body json.RawMessage) string {
	var b tasks.MessageBody
	if err := json.Unmarshal(body, &b); err != nil {
		return "(unreadable body)"
	}
	var parts []mesh.Part
	if err := json.Unmarshal(b.Message.Parts, &parts); err != nil {
		return "(unreadable parts)"
	}
	return meshclient.PartsText(parts)
}
