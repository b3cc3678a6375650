package meshmcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshmcp"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// stack is the real API (template routes, real handlers, real MariaDB)
// served in-process, with agents alice, bob (friends) and eve (a stranger).
type stack struct {
	url  string
	keys map[string]string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	api := localstacktest.Start(t, localstacktest.Options{})
	st := &stack{url: api.URL, keys: api.Agents(t, "alice", "bob", "eve")}
	api.Befriend(t, "alice", "bob")
	return st
}

// session is an MCP client connected to a meshmcp server of one agent over
// the SDK's in-memory transport. Every tool answer is kept in transcript
// so tests can check that no secret ever reaches the model.
type session struct {
	cs   *mcp.ClientSession
	stop func()

	mu         *sync.Mutex
	transcript *bytes.Buffer
}

func (st *stack) connect(t *testing.T, agent, stateDir string, logs *testenv.Buffer, transcript *bytes.Buffer, mu *sync.Mutex) *session {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := meshmcp.New(meshmcp.Config{
		API:      meshclient.New(st.url, st.keys[agent]),
		StateDir: stateDir,
		Log:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Version:  "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	serverT, clientT := mcp.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, serverT) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, clientT, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cs.Close()
		if err := <-done; err != nil {
			t.Errorf("%s's MCP server ended with %v", agent, err)
		}
		cancel()
	}
	t.Cleanup(stop)
	return &session{cs: cs, stop: stop, mu: mu, transcript: transcript}
}

// raw calls a tool and returns its result; a protocol error fails the test
// (tool failures must be tool errors, never protocol errors).
func (s *session) raw(t *testing.T, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v (want a result)", tool, err)
	}
	s.mu.Lock()
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s.transcript.WriteString(tc.Text + "\n")
		}
	}
	s.mu.Unlock()
	return res
}

// call calls a tool that must succeed and decodes its structured result.
func call[Out any](t *testing.T, s *session, tool string, args any) Out {
	t.Helper()
	res := s.raw(t, tool, args)
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", tool, args, text(res))
	}
	var out Out
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured result %s: %v", tool, b, err)
	}
	return out
}

// fail calls a tool that must fail and returns the error text.
func (s *session) fail(t *testing.T, tool string, args any) string {
	t.Helper()
	res := s.raw(t, tool, args)
	if !res.IsError {
		t.Fatalf("%s(%v) succeeded with %s; want a tool error", tool, args, text(res))
	}
	return text(res)
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func TestMCPServer(t *testing.T) {
	st := newStack(t)
	logs := &testenv.Buffer{}
	var transcript bytes.Buffer
	var mu sync.Mutex
	aliceDir, bobDir := t.TempDir(), t.TempDir()
	alice := st.connect(t, "alice", aliceDir, logs, &transcript, &mu)
	bob := st.connect(t, "bob", bobDir, logs, &transcript, &mu)

	t.Run("lists every tool with a description and an object schema", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tools := map[string]*mcp.Tool{}
		for tool, err := range bob.cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			tools[tool.Name] = tool
		}
		want := []string{"mesh_accept_friend_request", "mesh_ack", "mesh_add_artifact", "mesh_add_group_member", "mesh_check_inbox", "mesh_create_group",
			"mesh_get_group_roster", "mesh_get_task", "mesh_get_task_messages", "mesh_list_friend_requests", "mesh_list_friends", "mesh_list_groups", "mesh_list_tasks",
			"mesh_reject_friend_request", "mesh_reply", "mesh_send_friend_request", "mesh_send_group_message", "mesh_send_message", "mesh_update_task", "mesh_whoami"}
		var names []string
		for n := range tools {
			names = append(names, n)
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Fatalf("tools %v, want %v", names, want)
		}
		for _, tool := range tools {
			schema, _ := json.Marshal(tool.InputSchema)
			var s struct {
				Type       string                     `json:"type"`
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			}
			if err := json.Unmarshal(schema, &s); err != nil || s.Type != "object" || len(tool.Description) < 40 || tool.OutputSchema == nil {
				t.Errorf("%s: schema %s, description %q, output schema %v", tool.Name, schema, tool.Description, tool.OutputSchema != nil)
			}
		}
		schema, _ := json.Marshal(tools["mesh_update_task"].InputSchema)
		for _, s := range []string{`"required":["task_id","status"]`, `"enum":["working","input-required","completed","failed","rejected","canceled"]`} {
			if !strings.Contains(string(schema), s) {
				t.Errorf("mesh_update_task schema %s lacks %s", schema, s)
			}
		}
		schema, _ = json.Marshal(tools["mesh_check_inbox"].InputSchema)
		if !strings.Contains(string(schema), `"maximum":20`) || strings.Contains(string(schema), `"required"`) {
			t.Errorf("mesh_check_inbox schema %s: want optional arguments and wait_seconds ≤ 20", schema)
		}
	})

	msg := "Hello bob — ünïcode, \"quotes\"\nand a second line"
	var sent meshmcp.SendOutput
	t.Run("alice's message reaches bob's inbox with its exact text", func(t *testing.T) {
		sent = call[meshmcp.SendOutput](t, alice, "mesh_send_message", map[string]any{"to": "bob", "text": msg,
			"parts": []any{map[string]any{"kind": "data", "data": map[string]any{"priority": 2}}}})
		if sent.TaskID == "" || sent.MessageID == "" || sent.ContextID == "" {
			t.Fatalf("send returned %+v; want task, message and context ids", sent)
		}
		in := call[meshmcp.InboxOutput](t, bob, "mesh_check_inbox", map[string]any{})
		if len(in.Events) != 1 || in.AgentID != "bob" || in.AckedSeq != 0 || in.More {
			t.Fatalf("bob's inbox %+v; want one event, nothing acknowledged", in)
		}
		ev := in.Events[0]
		if ev.Seq != 1 || ev.Type != mesh.EventMessage || ev.From != "alice" || ev.TaskID != sent.TaskID || ev.MessageID != sent.MessageID || ev.Text != msg || ev.TaskStatus != "submitted" {
			t.Fatalf("event %+v; want seq 1 message %s from alice with text %q", ev, sent.MessageID, msg)
		}
		// The text once, beside only the parts that are not text: the model
		// never reads the message twice.
		if len(ev.Parts) != 1 || ev.Parts[0].Kind != "data" || string(ev.Parts[0].Data) != `{"priority":2}` {
			t.Fatalf("event parts %+v: want only the data part", ev.Parts)
		}
		if raw := text(bob.raw(t, "mesh_check_inbox", map[string]any{})); strings.Count(raw, "ünïcode") != 1 {
			t.Errorf("bob's inbox answer carries the text %d times, want once: %s", strings.Count(raw, "ünïcode"), raw)
		}
	})

	t.Run("an unacknowledged event comes back; after mesh_ack it does not", func(t *testing.T) {
		again := call[meshmcp.InboxOutput](t, bob, "mesh_check_inbox", map[string]any{})
		if len(again.Events) != 1 || again.Events[0].Seq != 1 {
			t.Fatalf("second check %+v; want the unacknowledged event again", again)
		}
		if got := call[meshmcp.AckOutput](t, bob, "mesh_ack", map[string]any{"seq": 1}); got.AckedSeq != 1 {
			t.Fatalf("ack returned %+v", got)
		}
		if got := call[meshmcp.InboxOutput](t, bob, "mesh_check_inbox", map[string]any{}); len(got.Events) != 0 || got.AckedSeq != 1 {
			t.Fatalf("check after ack %+v; want nothing new", got)
		}
		if c, err := meshmcp.LoadCursor(bobDir, "bob"); err != nil || c.AckedSeq != 1 {
			t.Fatalf("cursor on disk %+v (%v); want acked_seq 1", c, err)
		}
		if got := call[meshmcp.AckOutput](t, bob, "mesh_ack", map[string]any{"seq": 1}); got.AckedSeq != 1 {
			t.Fatalf("acknowledging again returned %+v; want the same position", got)
		}
		if got := call[meshmcp.InboxOutput](t, bob, "mesh_check_inbox", map[string]any{"after": 0}); len(got.Events) != 1 || got.AckedSeq != 1 {
			t.Fatalf("check with after=0 %+v; want the history without moving the position", got)
		}
	})

	t.Run("acknowledging an event the agent never saw is refused", func(t *testing.T) {
		if e := bob.fail(t, "mesh_ack", map[string]any{"seq": 7}); !strings.HasPrefix(e, "invalid_arguments:") {
			t.Fatalf("ack beyond the inbox: %q", e)
		}
		if c, _ := meshmcp.LoadCursor(bobDir, "bob"); c.AckedSeq != 1 {
			t.Fatalf("a refused ack moved the cursor to %d", c.AckedSeq)
		}
	})

	t.Run("bob replies and moves the task; alice reads both in her inbox", func(t *testing.T) {
		r := call[meshmcp.SendOutput](t, bob, "mesh_reply", map[string]any{"task_id": sent.TaskID, "text": "Hi alice"})
		if r.TaskID != sent.TaskID || r.MessageID == "" {
			t.Fatalf("reply returned %+v", r)
		}
		u := call[meshmcp.UpdateTaskOutput](t, bob, "mesh_update_task", map[string]any{"task_id": sent.TaskID, "status": "completed", "text": "done: 42"})
		if u.Status != "completed" || u.PreviousStatus != "submitted" {
			t.Fatalf("update returned %+v", u)
		}
		in := call[meshmcp.InboxOutput](t, alice, "mesh_check_inbox", map[string]any{})
		if len(in.Events) != 2 || in.Events[0].Text != "Hi alice" || in.Events[0].Type != mesh.EventMessage ||
			in.Events[1].Type != mesh.EventStatus || in.Events[1].Text != "done: 42" || in.Events[1].TaskStatus != "completed" {
			t.Fatalf("alice's inbox %+v; want the reply, then the completion with its note", in)
		}
		task := call[meshclient.TaskDetail](t, alice, "mesh_get_task", map[string]any{"task_id": sent.TaskID})
		if task.Status != "completed" || len(task.Messages) != 3 || task.Messages[0].Parts[0].Text != msg || task.Messages[1].From != "bob" ||
			task.EarlierMessages != 0 || task.MessagesNextAfter == "" {
			t.Fatalf("task %+v; want the three messages in order and a cursor after them", task)
		}
		first := call[meshclient.TaskMessagePage](t, alice, "mesh_get_task_messages", map[string]any{"task_id": sent.TaskID, "limit": 2})
		rest := call[meshclient.TaskMessagePage](t, alice, "mesh_get_task_messages", map[string]any{"task_id": sent.TaskID, "after": first.NextAfter})
		if len(first.Messages) != 2 || !first.More || first.Messages[0].Parts[0].Text != msg ||
			len(rest.Messages) != 1 || rest.More || rest.Messages[0].MessageID != task.Messages[2].MessageID {
			t.Fatalf("history pages %+v then %+v; want 2 (more) then the third", first, rest)
		}
		list := call[meshclient.TaskPage](t, bob, "mesh_list_tasks", map[string]any{"status": "completed", "role": "recipient"})
		if len(list.Tasks) != 1 || list.Tasks[0].TaskID != sent.TaskID {
			t.Fatalf("bob's completed tasks %+v", list)
		}
		friends := call[meshclient.FriendPage](t, bob, "mesh_list_friends", map[string]any{})
		if len(friends.Friends) != 1 || friends.Friends[0].AgentID != "alice" || friends.Friends[0].Status != "active" {
			t.Fatalf("bob's friends %+v; want alice, active (her MCP server heartbeats)", friends)
		}
		if groups := call[meshclient.GroupPage](t, bob, "mesh_list_groups", map[string]any{}); len(groups.Groups) != 0 {
			t.Fatalf("bob's groups %+v; want none", groups)
		}
	})

	t.Run("mistakes come back as tool errors with the API's code", func(t *testing.T) {
		eve := st.connect(t, "eve", t.TempDir(), logs, &transcript, &mu)
		st.keys["mallory"] = "amk_" + strings.Repeat("x", 40) // a key the mesh never issued
		mallory := st.connect(t, "mallory", t.TempDir(), logs, &transcript, &mu)
		cases := []struct {
			name string
			s    *session
			tool string
			args map[string]any
			want string
		}{
			{"a stranger is not reachable", eve, "mesh_send_message", map[string]any{"to": "bob", "text": "hi"}, "not_reachable (HTTP 403)"},
			{"a message to a stranger is not reachable", alice, "mesh_send_message", map[string]any{"to": "eve", "text": "hi"}, "not_reachable (HTTP 403)"},
			{"an empty message is refused before the API", alice, "mesh_send_message", map[string]any{"to": "bob"}, "invalid_arguments: the message is empty"},
			{"someone else's task is not found", eve, "mesh_get_task", map[string]any{"task_id": sent.TaskID}, "task_not_found (HTTP 404)"},
			{"a final task cannot move", bob, "mesh_update_task", map[string]any{"task_id": sent.TaskID, "status": "working"}, "illegal_transition (HTTP 409)"},
			{"a bad part is the API's invalid_part", alice, "mesh_send_message", map[string]any{"to": "bob", "parts": []any{map[string]any{"kind": "text"}}}, "invalid_part (HTTP 400)"},
			{"an unknown status fails the schema", bob, "mesh_update_task", map[string]any{"task_id": sent.TaskID, "status": "done"}, "/properties/status: enum"},
			{"a missing recipient fails the schema", alice, "mesh_send_message", map[string]any{"text": "hi"}, `missing properties: ["to"]`},
			{"a wrong API key says what to check", mallory, "mesh_check_inbox", map[string]any{}, "(HTTP 401)"},
			{"a wrong API key fails every tool", mallory, "mesh_list_friends", map[string]any{}, "check MESH_API_KEY"},
			{"a too long wait fails the schema", bob, "mesh_check_inbox", map[string]any{"wait_seconds": 60}, "/properties/wait_seconds: maximum"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if e := c.s.fail(t, c.tool, c.args); !strings.Contains(e, c.want) {
					t.Fatalf("error %q; want it to contain %q", e, c.want)
				}
			})
		}
		if in := call[meshmcp.InboxOutput](t, bob, "mesh_check_inbox", map[string]any{}); len(in.Events) != 0 {
			t.Fatalf("failed calls delivered %+v to bob", in.Events)
		}
	})

	t.Run("a restart returns the unacknowledged events and never the acknowledged ones", func(t *testing.T) {
		for _, txt := range []string{"two", "three"} {
			call[meshmcp.SendOutput](t, alice, "mesh_send_message", map[string]any{"to": "bob", "text": txt})
		}
		in := call[meshmcp.InboxOutput](t, bob, "mesh_check_inbox", map[string]any{"limit": 1})
		if len(in.Events) != 1 || in.Events[0].Text != "two" || !in.More {
			t.Fatalf("bob's first page %+v; want \"two\" and more waiting", in)
		}
		call[meshmcp.AckOutput](t, bob, "mesh_ack", map[string]any{"seq": in.Events[0].Seq})
		bob.stop()

		bob2 := st.connect(t, "bob", bobDir, logs, &transcript, &mu)
		if e := bob2.fail(t, "mesh_ack", map[string]any{"seq": in.Events[0].Seq + 1}); !strings.HasPrefix(e, "invalid_arguments:") {
			t.Fatalf("a restarted server acknowledged an event it had not shown: %q", e)
		}
		got := call[meshmcp.InboxOutput](t, bob2, "mesh_check_inbox", map[string]any{})
		if len(got.Events) != 1 || got.Events[0].Text != "three" || got.AckedSeq != in.Events[0].Seq {
			t.Fatalf("after the restart %+v; want only \"three\"", got)
		}
		call[meshmcp.AckOutput](t, bob2, "mesh_ack", map[string]any{"seq": got.Events[0].Seq})

		// A second session of bob shares the cursor.
		other := st.connect(t, "bob", bobDir, logs, &transcript, &mu)
		if got := call[meshmcp.InboxOutput](t, other, "mesh_check_inbox", map[string]any{}); len(got.Events) != 0 || got.AckedSeq != in.Events[0].Seq+1 {
			t.Fatalf("another session of bob %+v; want the shared position and nothing new", got)
		}
	})

	t.Run("wait_seconds long-polls until a message arrives", func(t *testing.T) {
		bob3 := st.connect(t, "bob", bobDir, logs, &transcript, &mu)
		// The call runs in another goroutine, so it reports through the
		// channel instead of failing the test from there.
		got := make(chan *mcp.CallToolResult, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := bob3.cs.CallTool(ctx, &mcp.CallToolParams{Name: "mesh_check_inbox", Arguments: map[string]any{"wait_seconds": 15}})
			if err != nil {
				res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
			}
			got <- res
		}()
		time.Sleep(500 * time.Millisecond)
		call[meshmcp.SendOutput](t, alice, "mesh_send_message", map[string]any{"to": "bob", "text": "are you there?"})
		select {
		case res := <-got:
			var in meshmcp.InboxOutput
			b, _ := json.Marshal(res.StructuredContent)
			if res.IsError || json.Unmarshal(b, &in) != nil || len(in.Events) != 1 || in.Events[0].Text != "are you there?" {
				t.Fatalf("long-poll returned %s", text(res))
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the long-poll never returned")
		}
	})

	t.Run("no credential reaches the model or the logs", func(t *testing.T) {
		alice.stop()
		secrets := map[string]string{}
		for _, id := range []string{"alice", "bob"} {
			tok, err := meshclient.New(st.url, st.keys[id]).Token(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			secrets[id+"'s API key"] = st.keys[id]
			secrets[id+"'s inbox key"] = tok.InboxKeys[0].Key
			// Tokens differ per issue; their signing key id and payload
			// prefix do not, so any leaked token would contain this.
			secrets[id+"'s token header"] = strings.SplitN(tok.Token, ".", 2)[0]
		}
		mu.Lock()
		all := transcript.String() + logs.String()
		mu.Unlock()
		if !strings.Contains(all, "Hello bob") || !strings.Contains(logs.String(), "tool call failed") {
			t.Fatal("the transcript or the logs are empty: the check would prove nothing")
		}
		for name, s := range secrets {
			if strings.Contains(all, s) {
				t.Errorf("%s leaked", name)
			}
		}
	})
}

func TestCursorFile(t *testing.T) {
	cases := []struct {
		name    string
		content string // "" = no file
		want    int64
		wantErr string
	}{
		{name: "a missing file is a fresh cursor", want: 0},
		{name: "a saved cursor is read back", content: `{"agent_id":"bob","acked_seq":41}`, want: 41},
		{name: "a corrupt file is an error, not a reset", content: `{"agent_id":"bob","acked_se`, wantErr: "corrupt"},
		{name: "another agent's file is an error", content: `{"agent_id":"alice","acked_seq":3}`, wantErr: "belongs to agent"},
		{name: "a negative position is an error", content: `{"agent_id":"bob","acked_seq":-1}`, wantErr: "impossible"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.content != "" {
				if err := os.WriteFile(meshmcp.CursorPath(dir, "bob"), []byte(c.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := meshmcp.LoadCursor(dir, "bob")
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v; want one about %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got.AckedSeq != c.want || got.AgentID != "bob" {
				t.Fatalf("got %+v, %v; want acked_seq %d", got, err, c.want)
			}
		})
	}

	t.Run("a saved cursor replaces the old one whole and leaves no temp file", func(t *testing.T) {
		dir := t.TempDir()
		for seq := int64(1); seq <= 3; seq++ {
			if err := meshmcp.SaveCursor(dir, meshmcp.Cursor{AgentID: "bob", AckedSeq: seq}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := meshmcp.LoadCursor(dir, "bob")
		entries, _ := os.ReadDir(dir)
		if err != nil || got.AckedSeq != 3 || len(entries) != 1 || entries[0].Name() != "bob.mcp.state.json" {
			t.Fatalf("cursor %+v (%v), dir %v; want acked_seq 3 in bob.mcp.state.json alone", got, err, entries)
		}
	})
	t.Run("a cursor of an invalid agent id is refused", func(t *testing.T) {
		if err := meshmcp.SaveCursor(t.TempDir(), meshmcp.Cursor{AgentID: "../etc"}); err == nil {
			t.Fatal("saved a cursor for agent ../etc")
		}
	})
}

// TestNewNeedsAnAPIAndAStateDir checks the configuration errors.
func TestNewNeedsAnAPIAndAStateDir(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  meshmcp.Config
	}{
		{"without an API", meshmcp.Config{StateDir: t.TempDir()}},
		{"without a state dir", meshmcp.Config{API: meshclient.New("http://127.0.0.1:1", "k")}},
	} {
		t.Run(fmt.Sprintf("New fails %s", c.name), func(t *testing.T) {
			if _, err := meshmcp.New(c.cfg); err == nil {
				t.Fatal("New succeeded")
			}
		})
	}
}
