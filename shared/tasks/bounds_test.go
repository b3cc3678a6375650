package tasks_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/jsonlimit"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/metrics"
	"github.com/agentmesh/agentmesh/shared/testenv"

	"github.com/agentmesh/agentmesh/shared/tasks"
)

// nestedData is a data part whose value nests depth levels deep.
func nestedData(depth int) []mesh.Part {
	return []mesh.Part{{Kind: tasks.PartData, Data: json.RawMessage(strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth))}}
}

// Every route that takes parts caps the nesting of a data part's value at
// 32 levels, before anything is written, and the recipient's inbox keeps
// answering whatever was tried.
func TestDataNestedDeeperThan32LevelsIsRefusedOnEveryRouteAndTheInboxKeepsFlowing(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob", "cat")
	f.friends(t, "ann", "bob")
	f.group(t, "crew", "ctx-crew", "ann", "bob", "cat")
	task := f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: text("start")}).TaskID
	if r := f.status(t, "bob", task, tasks.StatusRequest{Status: mesh.TaskWorking}); r.Status != 200 {
		t.Fatalf("working: %d %s", r.Status, r.Body)
	}

	// Each route: who writes, whose inbox gets it, and the write itself.
	routes := []struct {
		name      string
		by, to    string
		write     func(parts []mesh.Part) response
		okStatus  int
		followUp  func(note string) response
		followsOK int
	}{
		{"a direct send", "ann", "bob",
			func(p []mesh.Part) response {
				return f.call(t, req{fn: "SendMessageFunction", caller: "ann", method: "POST", path: "/v1/messages", body: tasks.SendRequest{To: "bob", Parts: p}})
			}, 202, nil, 0},
		{"a group send", "ann", "cat",
			func(p []mesh.Part) response { return f.groupSend(t, "ann", "crew", tasks.GroupSendRequest{Parts: p}) }, 202,
			func(note string) response {
				return f.groupSend(t, "ann", "crew", tasks.GroupSendRequest{Parts: text(note)})
			}, 202},
		{"a reply", "ann", "bob",
			func(p []mesh.Part) response { return f.reply(t, "ann", task, tasks.ReplyRequest{Parts: p}) }, 202, nil, 0},
		{"a status note", "bob", "ann",
			func(p []mesh.Part) response {
				body := map[string]any{"status": mesh.TaskInputRequired, "message": map[string]any{"parts": p}}
				return f.status(t, "bob", task, body)
			}, 200, nil, 0},
		{"an artifact", "bob", "ann",
			func(p []mesh.Part) response {
				return f.artifact(t, "bob", task, tasks.ArtifactRequest{Name: "out", Parts: p})
			}, 201, nil, 0},
	}
	for _, rt := range routes {
		if rt.followUp == nil { // a reply in the task reaches the same inbox
			by := rt.by
			rt.followUp = func(note string) response { return f.reply(t, by, task, tasks.ReplyRequest{Parts: text(note)}) }
			rt.followsOK = 202
		}
		for _, depth := range []int{10000, 1000, 33, 32} {
			t.Run(fmt.Sprintf("%s with data %d levels deep, then a normal message", rt.name, depth), func(t *testing.T) {
				before := f.state(t)
				r := rt.write(nestedData(depth))
				if depth > tasks.MaxDataDepth {
					if r.Status != 400 || r.code() != "too_deep" || r.Headers["Content-Type"] != "application/problem+json" {
						t.Fatalf("got %d %s, want 400 too_deep problem+json", r.Status, r.Body)
					}
					f.unchanged(t, before, "a refused write changed the database")
				} else if r.Status != rt.okStatus {
					t.Fatalf("32 levels: got %d %s, want %d", r.Status, r.Body, rt.okStatus)
				}
				note := fmt.Sprintf("after %s at %d", rt.name, depth)
				if r := rt.followUp(note); r.Status != rt.followsOK {
					t.Fatalf("follow-up: %d %s", r.Status, r.Body)
				}
				evs := f.events(t, rt.to) // from 0, every page answering 200
				for i, e := range evs {
					if e.Seq != int64(i+1) {
						t.Fatalf("inbox of %s is not gapless at %d: seq %d", rt.to, i, e.Seq)
					}
				}
				last := evs[len(evs)-1]
				if !bytes.Contains(last.Body, []byte(note)) {
					t.Fatalf("the normal message is not the newest event of %s: %s", rt.to, last.Body)
				}
				if depth == tasks.MaxDataDepth {
					prev := evs[len(evs)-2]
					if d := jsonlimit.Depth(prev.Body); prev.Type == mesh.EventUndeliverable || d < tasks.MaxDataDepth {
						t.Fatalf("the accepted 32-level event was not served as written (type %s, depth %d)", prev.Type, d)
					}
				}
			})
		}
	}
}

// A request body is refused on its raw bytes before it is decoded, on
// every route that takes one (here the ones with free-form parts).
func TestBodiesNestedPast40LevelsAreRefusedBeforeDecoding(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	// 41 levels in a field the decoder would otherwise reject as unknown:
	// only the depth check can answer too_deep.
	body := `{"to":"bob","x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`
	r := f.call(t, req{fn: "SendMessageFunction", caller: "ann", method: "POST", path: "/v1/messages", body: body})
	if r.Status != 400 || r.code() != "too_deep" {
		t.Fatalf("got %d %s, want 400 too_deep", r.Status, r.Body)
	}
}

// poison stores content no route accepts today, as rows written before the
// caps (or by a bug) would hold it.
const poisonDeep = 10000

func poisonJSON() string { return strings.Repeat("[", poisonDeep) + strings.Repeat("]", poisonDeep) }

func TestStoredContentThatCannotBeServedBecomesAPlaceholderNotAFailedPage(t *testing.T) {
	f := newFixture(t)
	var logs testenv.Buffer
	var sink bytes.Buffer
	f.svc.Log = slogTo(&logs)
	f.svc.Inbox.Log = f.svc.Log
	f.svc.Metrics = &metrics.Sink{W: &sink}
	f.svc.Inbox.Metrics = f.svc.Metrics
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	var ids []string
	for i := range 4 {
		ids = append(ids, f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: text(fmt.Sprint("m", i))}).TaskID)
	}
	// seq 2: nested past any decoder's comfort; seq 3: not JSON at all.
	if _, err := f.db.Exec("UPDATE outbox_events SET body = ? WHERE recipient = 'bob' AND seq = 2", `{"message":{"parts":`+poisonJSON()+`}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Exec("UPDATE outbox_events SET body = ? WHERE recipient = 'bob' AND seq = 3", `{"message":`); err != nil {
		t.Fatal(err)
	}

	t.Run("the inbox from 0 answers every event in place, the bad ones as typed placeholders", func(t *testing.T) {
		evs := f.events(t, "bob")
		if len(evs) != 4 {
			t.Fatalf("%d events, want 4", len(evs))
		}
		want := map[int64]string{2: "too_deep", 3: "unencodable"}
		for _, e := range evs {
			code, bad := want[e.Seq]
			if !bad {
				if e.Type != mesh.EventMessage {
					t.Errorf("seq %d: type %s", e.Seq, e.Type)
				}
				continue
			}
			var b mesh.UndeliverableBody
			if e.Type != mesh.EventUndeliverable || json.Unmarshal(e.Body, &b) != nil || b.Code != code || b.OriginalType != mesh.EventMessage || e.EventID == "" {
				t.Errorf("seq %d: %s %s, want an undeliverable placeholder %q with its event id", e.Seq, e.Type, e.Body, code)
			}
		}
	})
	t.Run("each placeholder is logged with its seq and counted", func(t *testing.T) {
		for _, s := range []string{`"seq":2`, `"seq":3`} {
			if !strings.Contains(logs.String(), s) {
				t.Errorf("no error log for %s in %s", s, logs.String())
			}
		}
		if !strings.Contains(sink.String(), `"InboxUndeliverable":1`) {
			t.Errorf("no metric: %q", sink.String())
		}
	})
	t.Run("a task whose stored message cannot be served still reads, the message in place", func(t *testing.T) {
		if _, err := f.db.Exec("UPDATE task_messages SET parts = ? WHERE task_id = ?", poisonJSON(), ids[1]); err != nil {
			t.Fatal(err)
		}
		for _, r := range []response{f.getTask(t, "bob", ids[1]), f.messages(t, "bob", ids[1], "", 0)} {
			if r.Status != 200 || !strings.Contains(string(r.Body), `"undeliverable":"too_deep"`) || !strings.Contains(string(r.Body), `"parts":[]`) {
				t.Fatalf("got %d %.300s", r.Status, r.Body)
			}
		}
		if !strings.Contains(logs.String(), "task content served as undeliverable") || !strings.Contains(sink.String(), `"TaskContentUndeliverable":1`) {
			t.Errorf("no error log or metric: %s %s", logs.String(), sink.String())
		}
	})
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// messages calls GET /v1/tasks/{id}/messages.
func (f *fixture) messages(t testing.TB, caller, taskID, after string, limit int) response {
	t.Helper()
	q := map[string]string{}
	if after != "" {
		q["after"] = after
	}
	if limit > 0 {
		q["limit"] = fmt.Sprint(limit)
	}
	return f.call(t, req{fn: "ListTaskMessagesFunction", caller: caller, method: "GET", path: "/v1/tasks/" + taskID + "/messages",
		params: map[string]string{"id": taskID}, query: q})
}

// lambdaPayload is the size of the response document Lambda returns for r:
// what its 6 MB limit applies to.
func lambdaPayload(t testing.TB, r response) int {
	t.Helper()
	b, err := json.Marshal(events.APIGatewayV2HTTPResponse{StatusCode: r.Status, Headers: r.Headers, Body: string(r.Body)})
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// A message of 256 KiB made of quotes is 256 KiB stored and about 512 KiB
// on the wire (every quote escaped twice): the worst case for the bounds.
func bigParts() []mesh.Part {
	return text(strings.Repeat(`"`, (tasks.DefaultMaxMessageBytes-64)/2))
}

func TestLongTasksAndFullInboxesReadCompletelyInPagesThatFitLambda(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	const n = 40
	first := f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: bigParts(), MessageID: "m-00"})
	want := []string{"m-00"}
	for i := 1; i < n; i++ {
		id := fmt.Sprintf("m-%02d", i)
		if r := f.reply(t, "ann", first.TaskID, tasks.ReplyRequest{Parts: bigParts(), MessageID: id}); r.Status != 202 {
			t.Fatalf("reply %d: %d %s", i, r.Status, r.Body)
		}
		want = append(want, id)
	}
	largest := map[string]int{}
	fits := func(t *testing.T, what string, r response) {
		t.Helper()
		if r.Status != 200 {
			t.Fatalf("%s: %d %.300s", what, r.Status, r.Body)
		}
		p := lambdaPayload(t, r)
		if p > jsonlimit.LambdaResponseBytes {
			t.Fatalf("%s: the Lambda response takes %d bytes, over 6 MB", what, p)
		}
		largest[what] = max(largest[what], p)
	}
	defer func() { t.Logf("largest Lambda responses: %v", largest) }()

	t.Run("the task answers its newest messages and counts the earlier ones", func(t *testing.T) {
		r := f.getTask(t, "bob", first.TaskID)
		fits(t, "GET /v1/tasks/{id}", r)
		var d tasks.TaskDetail
		r.decode(t, &d)
		if len(d.Messages) == 0 || len(d.Messages)+d.EarlierMessages != n || d.Messages[len(d.Messages)-1].MessageID != want[n-1] {
			t.Fatalf("%d messages + %d earlier, newest %v", len(d.Messages), d.EarlierMessages, d.Messages)
		}
		if after := f.messages(t, "bob", first.TaskID, d.MessagesNextAfter, 0); !strings.Contains(string(after.Body), `"messages":[]`) {
			t.Fatalf("messages after the newest: %.200s", after.Body)
		}
	})
	t.Run("the messages route pages through all 40 in order, each page within Lambda's limit", func(t *testing.T) {
		var got []string
		after, pages := "", 0
		for more := true; more; pages++ {
			if pages > n {
				t.Fatal("paging does not end")
			}
			r := f.messages(t, "bob", first.TaskID, after, tasks.MaxMessagesLimit)
			fits(t, "GET /v1/tasks/{id}/messages", r)
			var p tasks.MessagePage
			r.decode(t, &p)
			for _, m := range p.Messages {
				got = append(got, m.MessageID)
			}
			after, more = p.NextAfter, p.More
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("read %v", got)
		}
		if pages < 2 {
			t.Fatalf("%d pages: the byte bound never cut one", pages)
		}
		t.Logf("%d messages in %d pages", len(got), pages)
	})
	t.Run("the inbox pages through all 40 events with an exact cursor, each page within Lambda's limit", func(t *testing.T) {
		var seqs []int64
		for after, pages := int64(0), 0; ; pages++ {
			r := f.inbox(t, "bob", map[string]string{"after": fmt.Sprint(after), "limit": "500"})
			fits(t, "GET /v1/inbox", r)
			var p inboxPage
			r.decode(t, &p)
			if len(p.Events) == 0 {
				if pages < 2 {
					t.Fatalf("%d pages: the byte bound never cut one", pages)
				}
				t.Logf("%d events in %d pages", len(seqs), pages)
				break
			}
			for _, e := range p.Events {
				seqs = append(seqs, e.Seq)
			}
			if p.NextAfter != p.Events[len(p.Events)-1].Seq {
				t.Fatalf("next_after %d, last seq %d", p.NextAfter, p.Events[len(p.Events)-1].Seq)
			}
			after = p.NextAfter
		}
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Fatalf("seqs %v", seqs)
			}
		}
		if len(seqs) != n {
			t.Fatalf("%d events", len(seqs))
		}
	})
	t.Run("the task list stays small whatever the tasks hold", func(t *testing.T) {
		fits(t, "GET /v1/tasks", f.call(t, req{fn: "ListTasksFunction", caller: "bob", method: "GET", path: "/v1/tasks", query: map[string]string{"limit": fmt.Sprint(tasks.MaxListLimit)}}))
	})
}

// A group send answers one task per recipient: past MaxFanoutMembers the
// answer would outgrow a Lambda response, so it is refused whole.
func TestAGroupSendToMoreThanMaxFanoutMembersIsRefusedAndWritesNothing(t *testing.T) {
	f := newFixture(t)
	members := []string{"ann"}
	for i := range tasks.MaxFanoutMembers + 1 {
		members = append(members, fmt.Sprintf("m%05d", i))
	}
	f.agents(t, members...)
	f.group(t, "all", "ctx-all", members...)
	before := f.state(t)
	r := f.groupSend(t, "ann", "all", tasks.GroupSendRequest{Parts: text("hi all")})
	if r.Status != 413 || r.code() != "fanout_too_large" {
		t.Fatalf("got %d %.300s, want 413 fanout_too_large", r.Status, r.Body)
	}
	f.unchanged(t, before, "a refused fan-out changed the database")
	if _, err := f.db.Exec("DELETE FROM group_members WHERE group_id = 'all' AND agent_id = 'm00000'"); err != nil {
		t.Fatal(err)
	}
	if r := f.groupSend(t, "ann", "all", tasks.GroupSendRequest{Parts: text("hi all")}); r.Status != 202 || lambdaPayload(t, r) > jsonlimit.LambdaResponseBytes {
		t.Fatalf("exactly %d recipients: %d, %d bytes", tasks.MaxFanoutMembers, r.Status, len(r.Body))
	}
}

func TestTaskMessagesPageByCountAcrossReadBatches(t *testing.T) {
	f := newFixture(t)
	f.agents(t, "ann", "bob")
	f.friends(t, "ann", "bob")
	task := f.send(t, "ann", tasks.SendRequest{To: "bob", Parts: text("0")}).TaskID
	const n = 2*tasks.MessagesReadBatch + 7
	for i := 1; i < n; i++ {
		if r := f.reply(t, "ann", task, tasks.ReplyRequest{Parts: text(fmt.Sprint(i))}); r.Status != 202 {
			t.Fatalf("reply %d: %d", i, r.Status)
		}
	}
	for _, limit := range []int{1, tasks.MessagesReadBatch, tasks.MessagesReadBatch + 1, n, tasks.MaxMessagesLimit} {
		t.Run(fmt.Sprintf("pages of %d read all %d messages once, in order, more until the last", limit, n), func(t *testing.T) {
			var got []string
			after := ""
			for pages := 1; ; pages++ {
				r := f.messages(t, "bob", task, after, limit)
				var p tasks.MessagePage
				r.decode(t, &p)
				if r.Status != 200 || len(p.Messages) > limit || (p.More && len(p.Messages) != limit) {
					t.Fatalf("page %d: %d, %d messages, more %v", pages, r.Status, len(p.Messages), p.More)
				}
				for _, m := range p.Messages {
					got = append(got, m.Parts[0].Text)
				}
				after = p.NextAfter
				if !p.More {
					break
				}
			}
			for i, g := range got {
				if g != fmt.Sprint(i) {
					t.Fatalf("read %v", got)
				}
			}
			if len(got) != n {
				t.Fatalf("read %d of %d", len(got), n)
			}
		})
	}
}
