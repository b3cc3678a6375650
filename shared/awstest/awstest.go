// Package awstest gives tests a local AWS API: moto in server mode (installed
// with pip by infra/aws-tools.sh) for Secrets Manager and S3, behind a proxy
// that counts the calls by operation, so a test can say "exactly one
// Secrets Manager call at init".
package awstest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/agentmesh/agentmesh/shared/testenv"
)

// Region is the region the local API answers for.
const Region = "us-east-1"

// Moto is one moto server private to a test.
type Moto struct {
	// URL reaches moto through the counting proxy: give it to the code
	// under test (AWS_ENDPOINT_URL_SECRETS_MANAGER, ...).
	URL string
	// Direct reaches moto without counting: for the test's own setup.
	Direct string

	mu    sync.Mutex
	calls map[string]int
}

// Start runs a moto server on a free port until the test ends. Under CI a
// missing moto fails the test; elsewhere it skips it.
func Start(t testing.TB) *Moto {
	t.Helper()
	bin, err := toolsBin()
	if err != nil {
		testenv.Missing(t, "moto (infra/aws-tools.sh)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var out testenv.Buffer
	cmd := exec.Command(filepath.Join(bin, "moto_server"), "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start moto: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	direct := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(direct + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("moto did not answer on %s within 30 s: %v\n%s", direct, err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	m := &Moto{Direct: direct, calls: map[string]int{}}
	target, _ := url.Parse(direct)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.Header.Get("X-Amz-Target") // JSON protocols: "secretsmanager.GetSecretValue"
		if op == "" {
			op = r.Method + " " + r.URL.Path // REST protocols (S3)
		}
		m.mu.Lock()
		m.calls[op]++
		m.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

// Calls returns how many requests of each operation went through URL, and
// resets the counts.
func (m *Moto) Calls() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.calls
	m.calls = map[string]int{}
	return out
}

// Env is the environment that points an AWS SDK at this moto (through the
// counting proxy) with dummy credentials.
func (m *Moto) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + m.URL,
		"AWS_ENDPOINT_URL_S3=" + m.URL,
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_SESSION_TOKEN=",
		"AWS_REGION=" + Region, "AWS_DEFAULT_REGION=" + Region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// SetEnv applies Env to this test's process environment.
func (m *Moto) SetEnv(t *testing.T) {
	for _, kv := range m.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// SecretsManager is a client of this moto that bypasses the count.
func (m *Moto) SecretsManager() *secretsmanager.Client {
	return secretsmanager.New(secretsmanager.Options{
		Region:       Region,
		BaseEndpoint: aws.String(m.Direct),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
	})
}

// PutSecret creates (or updates) a secret and returns its ARN.
func (m *Moto) PutSecret(t testing.TB, name, value string) string {
	t.Helper()
	ctx := context.Background()
	sm := m.SecretsManager()
	out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)})
	if err == nil {
		return aws.ToString(out.ARN)
	}
	if !strings.Contains(err.Error(), "ResourceExists") {
		t.Fatalf("create secret %s: %v", name, err)
	}
	put, err := sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(name), SecretString: aws.String(value)})
	if err != nil {
		t.Fatalf("update secret %s: %v", name, err)
	}
	return aws.ToString(put.ARN)
}

// toolsBin runs infra/aws-tools.sh (which installs once) and returns the
// directory holding moto_server.
func toolsBin() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "infra", "aws-tools.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("infra/aws-tools.sh: %v: %s", err, stderr.String())
	}
	bin := strings.TrimSpace(stdout.String())
	if _, err := os.Stat(filepath.Join(bin, "moto_server")); err != nil {
		return "", err
	}
	return bin, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the module (go env GOMOD: %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

// fakeAuth makes moto treat a request as signed (it does not check
// signatures; unsigned reads of private objects are refused).
const fakeAuth = "AWS4-HMAC-SHA256 Credential=test/20250101/" + Region + "/s3/aws4_request, SignedHeaders=host, Signature=00"

// CreateBucket makes an S3 bucket.
func (m *Moto) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	m.s3(t, http.MethodPut, "/"+bucket)
}

// PresignedPutURL is a URL shaped like the presigned S3 URL CloudFormation
// gives a custom resource (path style, through the counting proxy).
func (m *Moto) PresignedPutURL(bucket, key string) string {
	q := url.Values{
		"X-Amz-Algorithm":     {"AWS4-HMAC-SHA256"},
		"X-Amz-Credential":    {"test/20250101/" + Region + "/s3/aws4_request"},
		"X-Amz-Date":          {"20250101T000000Z"},
		"X-Amz-Expires":       {"7200"},
		"X-Amz-SignedHeaders": {"host"},
		"X-Amz-Signature":     {strings.Repeat("0", 64)},
	}
	return m.URL + "/" + bucket + "/" + url.PathEscape(key) + "?" + q.Encode()
}

// GetObject returns an object's bytes.
func (m *Moto) GetObject(t testing.TB, bucket, key string) []byte {
	t.Helper()
	return m.s3(t, http.MethodGet, "/"+bucket+"/"+url.PathEscape(key))
}

func (m *Moto) s3(t testing.TB, method, path string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, m.Direct+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", fakeAuth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("S3 %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("S3 %s %s: %d %s", method, path, resp.StatusCode, body.String())
	}
	return body.Bytes()
}
