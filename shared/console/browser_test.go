package console_test

// The console in a real browser: Debian's chromium, headless, driven through
// the DevTools protocol (chromedp), against the in-process mesh with every
// route of template.yaml on a real database. It signs in, creates an agent
// and sees its key once, has the account approve a friend request, watches a
// message sent through the API appear in the task timeline, redrives a dead
// letter and reads the audit log, saving a 1280x800 screenshot of every page.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
)

// chromiumPath installs Debian's chromium when missing (infra/chromium.sh)
// and returns it. Outside CI a machine that cannot install it skips the
// test, saying why; under CI it fails.
func chromiumPath(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "infra", "chromium.sh")).Output()
	path := strings.TrimSpace(string(out))
	if err != nil || path == "" {
		msg := fmt.Sprintf("no chromium for the console's browser test (infra/chromium.sh: %v)", err)
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + strings.TrimSpace(string(ee.Stderr))
		}
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; run infra/chromium.sh as root to install it")
	}
	return path
}

// screenshotDir is where the pages' screenshots go: MESH_SCREENSHOT_DIR, or
// .local/console-screenshots in the repository.
func screenshotDir(t *testing.T, root string) string {
	dir := os.Getenv("MESH_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(root, ".local", "console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// api calls a JSON route with a bearer credential.
func api(t *testing.T, base, method, path, bearer string, body any) map[string]any {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &out)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	return out
}

func TestTheConsoleInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser")
	}
	stack := localstacktest.Start(t, localstacktest.Options{Env: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092"}})
	chromium := chromiumPath(t, stack.Root)
	shots := screenshotDir(t, stack.Root)
	base := stack.URL
	db := stack.Env.DB

	const email, password = "demo@localhost", "demo-password-for-the-browser"
	api(t, base, "POST", "/v1/admin/accounts", stack.AdminKey, map[string]any{"email": email, "password": password, "name": "Demo operator", "operator": true})
	// A stranger who will ask the new agent to be friends and write to it.
	visitor := api(t, base, "POST", "/v1/admin/agents", stack.AdminKey, map[string]any{"agent_id": "visitor", "name": "Visitor"})
	visitorTok := api(t, base, "POST", "/v1/auth/token", "", map[string]any{"api_key": visitor["api_key"]})["token"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 800), chromedp.UserDataDir(t.TempDir()))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	do := func(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitFor polls a JavaScript predicate for up to 20 s. The page may be
	// navigating (a write reloads it): an evaluation that fails then is
	// tried again.
	waitFor := func(t *testing.T, what, predicate string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		var last error
		for time.Now().Before(deadline) {
			ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool]("!!("+predicate+")"))
			if err == nil && ok {
				return
			}
			last = err
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: not within 20 s (last error: %v)", what, last)
	}
	html := func(t *testing.T) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("html")))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var saved []string
	shot := func(t *testing.T, name string) {
		t.Helper()
		waitFor(t, "the page loaded", `document.readyState === "complete"`)
		b, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		saved = append(saved, p)
	}
	defer func() { t.Logf("screenshots (1280x800): %s", strings.Join(saved, " ")) }()
	do(t, "set the viewport", chromedp.EmulateViewport(1280, 800))

	t.Run("a signed-out visitor lands on the sign-in page and signs in", func(t *testing.T) {
		do(t, "open the console", chromedp.Navigate(base+"/console"), chromedp.WaitVisible(chromedp.CSS("form#signin")))
		shot(t, "01-signin")
		do(t, "sign in", chromedp.SendKeys(chromedp.CSS(`input[name="email"]`), email), chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), password),
			chromedp.Click(chromedp.CSS(`form#signin button[type="submit"]`)))
		waitFor(t, "the agents page", `location.pathname === "/console/agents" && document.querySelector("form#create-agent") !== null`)
	})

	var apiKey string
	t.Run("creating an agent shows its API key once", func(t *testing.T) {
		do(t, "create browser-bot", chromedp.SendKeys(chromedp.CSS(`#create-agent input[name="agent_id"]`), "browser-bot"),
			chromedp.SendKeys(chromedp.CSS(`#create-agent input[name="name"]`), "Browser bot"),
			chromedp.Click(chromedp.CSS(`#create-agent button[type="submit"]`)))
		waitFor(t, "the key box", `!document.getElementById("new-key").hidden`)
		key, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#new-key-value")))
		if err != nil || !strings.HasPrefix(key, "amk_") {
			t.Fatalf("shown key %q (%v)", key, err)
		}
		apiKey = key
		shot(t, "02-agents-new-key")
		do(t, "dismiss the key", chromedp.Click(chromedp.CSS("#new-key-done")))
		waitFor(t, "the agent's row", `document.querySelector('tr[data-agent="browser-bot"]') !== null && document.getElementById("new-key").hidden`)
		if strings.Contains(html(t), apiKey) {
			t.Fatal("the API key is still on the page after it was shown")
		}
		// The key works: the agent exchanges it for a token.
		api(t, base, "POST", "/v1/auth/token", "", map[string]any{"api_key": apiKey})
	})

	t.Run("the account takes friend requests of the agent into its own hands and approves one", func(t *testing.T) {
		// The page reloads once the policy is saved: the marker goes, and
		// the reloaded page shows the policy the server has.
		do(t, "choose my approval", chromedp.Evaluate[chromedp.Void](`(function(){window.__before = true; var s=document.querySelector('select.policy[data-agent="browser-bot"]'); s.value="account"; s.dispatchEvent(new Event("change"));})()`))
		waitFor(t, "the policy saved", `(function(){var s=document.querySelector('select.policy[data-agent="browser-bot"]'); return window.__before !== true && document.readyState === "complete" && s && s.value === "account";})()`)
		api(t, base, "POST", "/v1/friends/requests", visitorTok, map[string]any{"to": "browser-bot"})
		shot(t, "03-agents")
		do(t, "open the requests", chromedp.Navigate(base+"/console/requests"), chromedp.WaitVisible(chromedp.CSS("button.decide")))
		shot(t, "04-friend-requests")
		do(t, "approve", chromedp.Click(chromedp.CSS(`button.decide[data-decision="accept"]`)))
		waitFor(t, "the request gone", `document.querySelector("button.decide") === null && document.body.innerText.includes("No friend requests wait for you.")`)
		friends := api(t, base, "GET", "/v1/friends", visitorTok, nil)
		if b, _ := json.Marshal(friends); !strings.Contains(string(b), `"browser-bot"`) {
			t.Fatalf("visitor's friends after the approval: %s", b)
		}
		do(t, "open the friendships", chromedp.Navigate(base+"/console/friends"), chromedp.WaitVisible(chromedp.CSS("table")))
		if !strings.Contains(html(t), "visitor") {
			t.Fatal("the friendship is not on the friendships page")
		}
		shot(t, "05-friendships")
	})

	t.Run("a message sent to the agent through the API appears in its task timeline", func(t *testing.T) {
		text := "Hello browser-bot, this came through POST /v1/messages."
		sent := api(t, base, "POST", "/v1/messages", visitorTok, map[string]any{"to": "browser-bot", "parts": []map[string]any{{"kind": "text", "text": text}}})
		g := api(t, base, "POST", "/v1/groups", visitorTok, map[string]any{"name": "Browser testers"})
		api(t, base, "POST", "/v1/groups/"+g["group_id"].(string)+"/members", visitorTok, map[string]any{"agent_id": "browser-bot"})
		do(t, "open the tasks", chromedp.Navigate(base+"/console/agents/browser-bot/tasks"), chromedp.WaitVisible(chromedp.CSS("table")))
		waitFor(t, "the task listed", fmt.Sprintf(`document.body.innerText.includes(%q)`, sent["task_id"]))
		shot(t, "06-tasks")
		do(t, "open the timeline", chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href$="%s"]`, sent["task_id"]))))
		waitFor(t, "the message in the timeline", fmt.Sprintf(`document.querySelector("ol.timeline") !== null && document.querySelector("ol.timeline").innerText.includes(%q)`, text))
		shot(t, "07-task-timeline")
		do(t, "open the groups", chromedp.Navigate(base+"/console/groups"), chromedp.WaitVisible(chromedp.CSS("table")))
		if !strings.Contains(html(t), "Browser testers") {
			t.Fatal("the group is not on the groups page")
		}
		shot(t, "08-groups")
	})

	t.Run("the operator redrives a dead letter from the outbox page", func(t *testing.T) {
		if _, err := db.Exec("UPDATE outbox_events SET delivery = 'failed', last_error = 'broker refused the record', sent_at = UTC_TIMESTAMP(6) WHERE recipient = 'browser-bot'"); err != nil {
			t.Fatal(err)
		}
		do(t, "open the outbox", chromedp.Navigate(base+"/console/outbox"), chromedp.WaitVisible(chromedp.CSS("#redrive")))
		shot(t, "09-outbox")
		do(t, "redrive", chromedp.Click(chromedp.CSS("#redrive")))
		waitFor(t, "the redrive reported", `document.getElementById("flash").innerText.startsWith("Requeued")`)
		// The page reloads: the event is pending again, in the backlog chart.
		waitFor(t, "the backlog chart", `document.querySelector(".chart .bar") !== null && document.querySelector(".chart .bar").innerText.includes("browser-bot")`)
		shot(t, "09b-outbox-after-redrive")
		var failed int
		if err := db.QueryRow("SELECT COUNT(*) FROM outbox_events WHERE recipient = 'browser-bot' AND delivery = 'failed'").Scan(&failed); err != nil || failed != 0 {
			t.Fatalf("dead letters left: %d (%v)", failed, err)
		}
	})

	t.Run("the audit log shows the approval, the policy and the redrive", func(t *testing.T) {
		do(t, "open the audit log", chromedp.Navigate(base+"/console/audit"), chromedp.WaitVisible(chromedp.CSS("table")))
		page := html(t)
		for _, want := range []string{"agent.created", "policy.changed", "friendship.created", "group.member_added", "outbox.redriven"} {
			if !strings.Contains(page, want) {
				t.Errorf("the audit log lacks %s", want)
			}
		}
		shot(t, "10-audit")
	})

	t.Run("the pages refresh by themselves", func(t *testing.T) {
		do(t, "open the agents", chromedp.Navigate(base+"/console/agents"), chromedp.WaitVisible(chromedp.CSS("footer")))
		do(t, "mark the page", chromedp.Evaluate[chromedp.Void](`window.__marked = true`))
		waitFor(t, "a reload", `window.__marked !== true && document.querySelector("footer") !== null`)
	})

	t.Run("signing out ends the session", func(t *testing.T) {
		do(t, "sign out", chromedp.Click(chromedp.CSS("#signout")))
		waitFor(t, "the sign-in page", `location.pathname === "/console/signin"`)
		do(t, "open the agents again", chromedp.Navigate(base+"/console/agents"))
		waitFor(t, "sent to sign in", `location.pathname === "/console/signin"`)
	})
}
