package buildcheck_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/shared/awstest"
	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// A built function under the Lambda emulator takes every secret it is given
// from Secrets Manager (moto here) in exactly one call at init, and answers.
func TestBuiltFunctionsLoadTheirSecretsInOneCallAndAnswer(t *testing.T) {
	root := moduleRoot(t)
	moto := awstest.Start(t)
	_, dsn := mysqltest.New(t)
	dc, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(dc.Addr)
	name := strings.ReplaceAll(t.Name(), "/", "-")
	adminKey := "admin-" + name
	dbArn := moto.PutSecret(t, "mesh/db-"+name, `{"username":"`+dc.User+`","password":"`+dc.Passwd+`"}`)
	adminArn := moto.PutSecret(t, "mesh/admin-"+name, adminKey)

	adminEvent := sampleEvent(t, root, "admin-create-agent", func(ev map[string]any) {
		ev["headers"].(map[string]any)["authorization"] = "Bearer " + adminKey
		ev["body"] = `{"agent_id":"rie-secrets-agent","name":"RIE"}`
		delete(ev["headers"].(map[string]any), "content-length")
	})
	tests := []struct {
		name    string
		fn      string
		event   string
		secrets map[string]string
		status  int
	}{
		{"health reads the database secret and answers 200", "health", filepath.Join(root, "events", "health.json"),
			map[string]string{"MESH_DB_SECRET_ARN": dbArn}, 200},
		{"an admin route reads the database secret and the admin key in the same call and creates an agent", "admin-create-agent", adminEvent,
			map[string]string{"MESH_DB_SECRET_ARN": dbArn, "MESH_ADMIN_KEY_SECRET_ARN": adminArn}, 201},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"MESH_DB_HOST": host, "MESH_DB_PORT": port, "MESH_DB_NAME": dc.DBName, "MESH_DB_TLS": "false"}
			for k, v := range tc.secrets {
				env[k] = v
			}
			stdout, stderr := runUnderRIE(t, root, moto, tc.fn, tc.event, env)
			var resp events.APIGatewayV2HTTPResponse
			if err := json.Unmarshal(bytes.TrimSpace(stdout), &resp); err != nil {
				t.Fatalf("the response is not an API Gateway v2 response: %v\n%s", err, stdout)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d %s, want %d\nstderr:\n%s", resp.StatusCode, resp.Body, tc.status, stderr)
			}
		})
	}

	t.Run("the token function publishes its public key to CloudFormation and nothing else", func(t *testing.T) {
		secret := strings.Repeat("s3cr3t", 8)
		env := map[string]string{"MESH_DB_HOST": host, "MESH_DB_PORT": port, "MESH_DB_NAME": dc.DBName, "MESH_DB_TLS": "false",
			"MESH_DB_SECRET_ARN":               dbArn,
			"MESH_JWT_KEYS_SECRET_ARN":         moto.PutSecret(t, "mesh/jwt-"+name, `{"kid":"k1","secret":"`+secret+`"}`),
			"MESH_INBOX_MASTER_KEY_SECRET_ARN": moto.PutSecret(t, "mesh/inbox-"+name, `{"secret":"`+secret+`"}`),
		}
		moto.CreateBucket(t, "cfn-replies")
		key := "stack|JwtPublicKeys|publish-1"
		event := sampleEvent(t, root, "migrate", func(ev map[string]any) {
			ev["LogicalResourceId"], ev["ResourceType"], ev["RequestId"] = "JwtPublicKeys", "Custom::JwtPublicKeys", "publish-1"
			ev["ResponseURL"] = moto.PresignedPutURL("cfn-replies", key)
		})
		runUnderRIE(t, root, moto, "auth-token", event, env)
		var r struct {
			Status string
			Data   map[string]string
		}
		if err := json.Unmarshal(moto.GetObject(t, "cfn-replies", key), &r); err != nil {
			t.Fatal(err)
		}
		want := config.FormatJWTPublicKeys([]config.JWTPublicKey{config.JWTKey{ID: "k1", Secret: []byte(secret)}.Public()})
		if r.Status != "SUCCESS" || r.Data["Keys"] != want {
			t.Fatalf("answer %+v, want SUCCESS with Keys %s", r, want)
		}
		if strings.Contains(string(moto.GetObject(t, "cfn-replies", key)), secret) {
			t.Fatal("the answer contains the signing secret")
		}
	})
}

// runUnderRIE runs functions/<fn> under the Lambda emulator with event,
// the AWS API pointed at moto and env added, and checks that its init made
// exactly one Secrets Manager call. It returns the function's answer and
// the emulator's log.
func runUnderRIE(t *testing.T, root string, moto *awstest.Moto, fn, event string, env map[string]string) ([]byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "infra", "rie.sh"), "functions/"+fn, event)
	cmd.Dir = root
	cmd.Env = append(withoutMeshSettings(os.Environ()), moto.Env()...)
	cmd.Env = append(cmd.Env, "GO="+goCommand(t))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	moto.Calls()
	if err := cmd.Run(); err != nil {
		t.Fatalf("infra/rie.sh: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	calls := moto.Calls()
	sm := 0
	for op, n := range calls {
		if strings.HasPrefix(op, "secretsmanager.") {
			sm += n
		}
	}
	if calls["secretsmanager.BatchGetSecretValue"] != 1 || sm != 1 {
		t.Errorf("Secrets Manager calls: %v, want exactly one secretsmanager.BatchGetSecretValue", calls)
	}
	return stdout.Bytes(), stderr.String()
}

// withoutMeshSettings drops the settings rie.sh would otherwise pass on in
// place of the secrets (the caller's database, keys or AWS endpoint).
func withoutMeshSettings(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "MYSQL_DSN" || strings.HasPrefix(k, "MESH_") || strings.HasPrefix(k, "AWS_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// sampleEvent writes events/<name>.json, changed by edit, to a temporary
// file and returns its path.
func sampleEvent(t *testing.T, root, name string, edit func(map[string]any)) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "events", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	edit(ev)
	if b, ok := ev["body"].(string); ok && ev["isBase64Encoded"] == true {
		ev["body"] = base64.StdEncoding.EncodeToString([]byte(b))
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
