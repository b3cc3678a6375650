package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshmcp"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// realMesh serves the real API in-process (template routes, real handlers,
// real MariaDB) with friends alice and bob; it returns the URL and keys.
func realMesh(t *testing.T) (string, map[string]string) {
	t.Helper()
	api := localstacktest.Start(t, localstacktest.Options{})
	keys := api.Agents(t, "alice", "bob")
	api.Befriend(t, "alice", "bob")
	return api.URL, keys
}

type readCloser struct {
	io.Reader
	io.Closer
}

// TestMCPCommandServesTheToolsOverStdio runs "meshd mcp" as Claude Code
// would: MCP frames on stdin/stdout, logs on stderr.
func TestMCPCommandServesTheToolsOverStdio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	apiURL, keys := realMesh(t)
	dir := t.TempDir()

	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr, frames testenv.Buffer
	code := make(chan int, 1)
	go func() {
		code <- cli(ctx, []string{"mcp"}, env(map[string]string{"MESH_API_URL": apiURL, "MESH_API_KEY": keys["bob"], "MESH_STATE_DIR": dir}), stdinR, stdoutW, &stderr)
		stdoutW.Close()
	}()
	// Everything the server writes to stdout is kept to check it is all MCP.
	out := readCloser{io.TeeReader(stdoutR, &frames), stdoutR}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "claude-code-stand-in", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: out, Writer: stdinW}, nil)
	if err != nil {
		t.Fatalf("connect: %v; stderr:\n%s", err, stderr.String())
	}
	if got := cs.InitializeResult().ServerInfo.Name; got != meshmcp.ServerName {
		t.Fatalf("server name %q", got)
	}

	sent, err := meshclient.New(apiURL, keys["alice"]).Send(ctx, meshclient.SendRequest{To: "bob", Parts: []mesh.Part{{Kind: "text", Text: "ping from alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: meshmcp.ToolCheckInbox, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("check inbox: %v %+v", err, res)
	}
	var in meshmcp.InboxOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &in); err != nil || len(in.Events) != 1 || in.Events[0].Text != "ping from alice" || in.Events[0].MessageID != sent.MessageID {
		t.Fatalf("bob's inbox over stdio: %s", b)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: meshmcp.ToolAck, Arguments: map[string]any{"seq": in.Events[0].Seq}}); err != nil || res.IsError {
		t.Fatalf("ack: %v %+v", err, res)
	}

	// The client going away (stdin closed) ends the command normally.
	cs.Close()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("meshd mcp exited %d; stderr:\n%s", c, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("meshd mcp did not stop when its client went away")
	}
	if cur, err := meshmcp.LoadCursor(dir, "bob"); err != nil || cur.AckedSeq != in.Events[0].Seq {
		t.Fatalf("cursor %+v (%v) in MESH_STATE_DIR", cur, err)
	}

	sc := bufio.NewScanner(strings.NewReader(frames.String()))
	sc.Buffer(nil, 1<<20)
	n := 0
	for ; sc.Scan(); n++ {
		var frame struct {
			JSONRPC string `json:"jsonrpc"`
		}
		if err := json.Unmarshal(sc.Bytes(), &frame); err != nil || frame.JSONRPC != "2.0" {
			t.Fatalf("stdout carried a non-MCP line: %q", sc.Text())
		}
	}
	if n < 3 {
		t.Fatalf("stdout carried %d frames; want the initialize and two tool answers", n)
	}
	logs := stderr.String()
	if !strings.Contains(logs, "mcp server started") || !strings.Contains(logs, "agent_id=bob") {
		t.Fatalf("stderr lacks the startup line:\n%s", logs)
	}
	if strings.Contains(logs+frames.String(), keys["bob"]) {
		t.Fatal("the API key leaked to stdout or stderr")
	}
}

func TestMCPCommandConfigurationErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"without an API key it says which variable to set", []string{"mcp"}, map[string]string{"HOME": t.TempDir()}, 1, "MESH_API_KEY is not set"},
		{"an argument is a mistake", []string{"mcp", "extra"}, map[string]string{"MESH_API_KEY": "k", "HOME": t.TempDir()}, 1, "mcp takes no arguments"},
		{"a bad API URL is refused", []string{"mcp"}, map[string]string{"MESH_API_KEY": "k", "MESH_API_URL": "ftp://x"}, 1, "MESH_API_URL must start with"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got := cli(context.Background(), c.args, env(c.env), strings.NewReader(""), &stdout, &stderr)
			if got != c.code || !strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
				t.Fatalf("exit %d, stderr %q, stdout %q; want %d and %q", got, stderr.String(), stdout.String(), c.code, c.want)
			}
		})
	}
}
