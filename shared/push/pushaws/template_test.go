package pushaws_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentmesh/agentmesh/shared/push"
	"github.com/agentmesh/agentmesh/shared/push/pushaws"
)

// templateResource returns resource id of the repository's template.yaml.
func templateResource(t *testing.T, id string) *yaml.Node {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	res := child(doc.Content[0], "Resources")
	n := child(res, id)
	if n == nil {
		t.Fatalf("template.yaml has no resource %s", id)
	}
	return n
}

// child is the value of key in mapping n, nil when absent.
func child(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// TestTimeoutsNestAlongThePushPath: the relay function ends before its
// caller's invocation gives up, which ends before the Sender's round does,
// so no caller abandons a relay that is still posting (the next round
// would overtake it on a connection).
func TestTimeoutsNestAlongThePushPath(t *testing.T) {
	v := child(child(templateResource(t, "PushRelayFunction"), "Properties"), "Timeout")
	if v == nil {
		t.Fatal("PushRelayFunction has no Timeout of its own")
	}
	secs, err := strconv.Atoi(v.Value)
	if err != nil {
		t.Fatalf("PushRelayFunction Timeout %q: %v", v.Value, err)
	}
	fn := time.Duration(secs) * time.Second
	if !(fn < pushaws.DefaultInvokeTimeout && pushaws.DefaultInvokeTimeout < push.DefaultSenderTimeout) {
		t.Fatalf("relay function %v, invoke %v, Sender round %v: want each shorter than the next", fn, pushaws.DefaultInvokeTimeout, push.DefaultSenderTimeout)
	}
}

// TestTheRelayMayOnlyPostAndClose: the relay's policy allows @connections
// POST and DELETE on the push stage, not GET (a connection's identity and
// source address) nor any other stage.
func TestTheRelayMayOnlyPostAndClose(t *testing.T) {
	stmts := child(child(child(templateResource(t, "PushManageConnectionsPolicy"), "Properties"), "PolicyDocument"), "Statement")
	if stmts == nil || len(stmts.Content) != 1 {
		t.Fatal("PushManageConnectionsPolicy should have one statement")
	}
	res := child(stmts.Content[0], "Resource")
	var got []string
	if res != nil && res.Kind == yaml.SequenceNode {
		for _, r := range res.Content {
			got = append(got, r.Tag+" "+r.Value)
		}
	} else if res != nil {
		got = append(got, res.Tag+" "+res.Value)
	}
	const arn = "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${PushApi}/push/"
	want := []string{"!Sub " + arn + "POST/@connections/*", "!Sub " + arn + "DELETE/@connections/*"}
	if !slices.Equal(got, want) {
		t.Fatalf("resources %q, want %q", got, want)
	}
}
