package samtemplate

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadReadsAFunctionURLAndWhereTheLocalStackServesIt(t *testing.T) {
	tpl, err := Load("testdata/templates/url.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, ok := tpl.Function("A2aFunction")
	if !ok {
		t.Fatal("A2aFunction is missing")
	}
	want := &FunctionURL{AuthType: "NONE", InvokeMode: "RESPONSE_STREAM", LocalPath: "/a2a/"}
	if !reflect.DeepEqual(f.URL, want) || f.Timeout != 330*time.Second {
		t.Errorf("A2aFunction: URL %+v timeout %v, want %+v and 5m30s", f.URL, f.Timeout, want)
	}
	if h, _ := tpl.Function("HealthFunction"); h.URL != nil {
		t.Errorf("a function without FunctionUrlConfig has URL %+v", h.URL)
	}
	if got := tpl.URLFunctions(); len(got) != 1 || got[0].LogicalID != "A2aFunction" {
		t.Errorf("URLFunctions() = %+v", got)
	}
}

// urlTemplate is a template with one HTTP route (/v1/health), a WebSocket
// API at /push and the function A2aFunction, whose Metadata and
// FunctionUrlConfig are the test's.
func urlTemplate(t *testing.T, extra, metadata, urlConfig string) string {
	t.Helper()
	src := `AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Resources:
  PushApi:
    Type: AWS::ApiGatewayV2::Api
    Properties:
      Name: push
      ProtocolType: WEBSOCKET
      RouteSelectionExpression: $request.body.action
  PushStage:
    Type: AWS::ApiGatewayV2::Stage
    Properties:
      ApiId: !Ref PushApi
      StageName: push
  HealthFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Get:
          Type: HttpApi
          Properties:
            Method: GET
            Path: /v1/health
` + extra + `
  A2aFunction:
    Type: AWS::Serverless::Function
    Metadata:
      BuildMethod: makefile
` + metadata + `
    Properties:
      Timeout: 60
` + urlConfig + "\n"
	path := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const streamURL = `      FunctionUrlConfig:
        AuthType: NONE
        InvokeMode: RESPONSE_STREAM`

func TestLoadRefusesFunctionURLsTheLocalStackCannotServe(t *testing.T) {
	local := "      MeshLocalPath: /a2a/"
	tests := []struct {
		name, extra, metadata, urlConfig, wantErr string
	}{
		{"a Function URL without MeshLocalPath is refused, naming the function", "", "", streamURL,
			"A2aFunction: a Function URL needs Metadata MeshLocalPath"},
		{"a MeshLocalPath without a Function URL is refused", "", local, "",
			"A2aFunction: Metadata MeshLocalPath is set but the function has no FunctionUrlConfig"},
		{"a MeshLocalPath of / is refused: it would shadow the whole API", "", "      MeshLocalPath: /", streamURL,
			"A2aFunction: Metadata MeshLocalPath / must be literal path segments between slashes"},
		{"a MeshLocalPath without its trailing slash is refused", "", "      MeshLocalPath: /a2a", streamURL,
			"MeshLocalPath /a2a must be literal path segments"},
		{"a BUFFERED Function URL is refused", "", local, "      FunctionUrlConfig:\n        AuthType: NONE\n        InvokeMode: BUFFERED",
			"A2aFunction: FunctionUrlConfig InvokeMode BUFFERED is not emulated by the local stack (RESPONSE_STREAM is)"},
		{"a Function URL without InvokeMode is BUFFERED, and refused", "", local, "      FunctionUrlConfig:\n        AuthType: NONE",
			"InvokeMode BUFFERED is not emulated"},
		{"an AWS_IAM Function URL is refused", "", local, "      FunctionUrlConfig:\n        AuthType: AWS_IAM\n        InvokeMode: RESPONSE_STREAM",
			`A2aFunction: FunctionUrlConfig AuthType "AWS_IAM" is not emulated`},
		{"a MeshLocalPath under the WebSocket stage is refused", "", "      MeshLocalPath: /push/a2a/", streamURL,
			"A2aFunction: Function URL path /push/a2a/ is under /push, where the WebSocket API PushApi is served"},
		{"a MeshLocalPath that an HTTP API route reaches under is refused, naming both", `
  ThingFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Get:
          Type: HttpApi
          Properties:
            Method: GET
            Path: /a2a/{thing}`, local, streamURL,
			"A2aFunction: route GET /a2a/{thing} of ThingFunction matches paths under /a2a/"},
		{"a greedy HTTP API route over the MeshLocalPath is refused", `
  ProxyFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Any:
          Type: HttpApi
          Properties:
            Method: ANY
            Path: /{proxy+}`, local, streamURL,
			"A2aFunction: route ANY /{proxy+} of ProxyFunction matches paths under /a2a/"},
		{"two Function URLs whose paths nest are refused", `
  OtherFunction:
    Type: AWS::Serverless::Function
    Metadata:
      MeshLocalPath: /a2a/agents/
    Properties:
      FunctionUrlConfig:
        AuthType: NONE
        InvokeMode: RESPONSE_STREAM`, local, streamURL,
			"OtherFunction: Function URL path /a2a/agents/ is under /a2a/, the path of A2aFunction's Function URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(urlTemplate(t, tt.extra, tt.metadata, tt.urlConfig))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	t.Run("a route beside the MeshLocalPath, and one that stops at it, are accepted", func(t *testing.T) {
		_, err := Load(urlTemplate(t, `
  ThingFunction:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Get:
          Type: HttpApi
          Properties:
            Method: GET
            Path: /{id}
        Other:
          Type: HttpApi
          Properties:
            Method: GET
            Path: /a2b/{id}`, local, streamURL))
		if err != nil {
			t.Fatal(err)
		}
	})
}
