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
	// Every read of the page, and every click on a page that refreshes by
	// itself, goes through inPage: one JavaScript task that reads (or acts)
	// and answers, tried again in the new page when a reload took the old
	// one away. No DOM node outlives the call that found it.
	waitFor := func(t *testing.T, what, predicate string) {
		t.Helper()
		inPage[bool](t, bctx, what, "!!("+predicate+")")
	}
	// act runs body, a function body that returns false while the element it
	// needs is not there yet and true once it has acted.
	act := func(t *testing.T, what, body string) {
		t.Helper()
		inPage[bool](t, bctx, what, "(function () {"+body+"})()")
	}
	// open navigates to path; a navigation aborted by the page's own
	// refresh is made again.
	open := func(t *testing.T, what, path string) {
		t.Helper()
		retry(t, bctx, what, func(ctx context.Context) error { return chromedp.Do(ctx, chromedp.Navigate(base+path)) })
	}
	click := func(t *testing.T, what, selector string) {
		t.Helper()
		act(t, what, fmt.Sprintf(`var e = document.querySelector(%s); if (!e) return false; e.click(); return true;`, jsString(selector)))
	}
	// contains waits until an element matching selector shows text.
	contains := func(t *testing.T, what, selector, text string) {
		t.Helper()
		waitFor(t, what, fmt.Sprintf(`Array.prototype.some.call(document.querySelectorAll(%s), function (e) { return e.innerText.includes(%s); })`, jsString(selector), jsString(text)))
	}
	var saved []string
	shot := func(t *testing.T, name string) {
		t.Helper()
		waitFor(t, "the page loaded", `true`)
		var b []byte
		retry(t, bctx, "screenshot "+name, func(ctx context.Context) (err error) {
			b, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
			return err
		})
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		saved = append(saved, p)
	}
	defer func() { t.Logf("screenshots (1280x800): %s", strings.Join(saved, " ")) }()
	do(t, "set the viewport", chromedp.EmulateViewport(1280, 800))

	// signIn fills the sign-in form, which does not refresh itself: real
	// key strokes here.
	signIn := func(t *testing.T) {
		t.Helper()
		do(t, "sign in", chromedp.SendKeys(chromedp.CSS(`input[name="email"]`), email), chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), password),
			chromedp.Click(chromedp.CSS(`form#signin button[type="submit"]`)))
	}
	t.Run("a signed-out visitor lands on the sign-in page and signs in", func(t *testing.T) {
		open(t, "open the console", "/console")
		waitFor(t, "the sign-in form", `document.querySelector("form#signin") !== null`)
		shot(t, "01-signin")
		signIn(t)
		waitFor(t, "the agents page", `location.pathname === "/console/agents" && document.querySelector("form#create-agent") !== null`)
	})

	// createAgent creates an agent with the agents page's form and returns
	// the API key the page shows, once the key box is dismissed.
	createAgent := func(t *testing.T, id, name, screenshot string) string {
		t.Helper()
		// Filled and submitted in one task: a refresh cannot fall between
		// the fields. Submitting holds the refresh until the key is gone.
		act(t, "create "+id, fmt.Sprintf(`var f = document.getElementById("create-agent"); if (!f) return false;
			f.querySelector('input[name="agent_id"]').value = %s;
			f.querySelector('input[name="name"]').value = %s;
			f.requestSubmit(f.querySelector('button[type="submit"]')); return true;`, jsString(id), jsString(name)))
		key := inPage[string](t, bctx, "the key box", `(function () { var b = document.getElementById("new-key"), v = document.getElementById("new-key-value");
			return b !== null && !b.hidden && v !== null && v.textContent; })()`)
		if !strings.HasPrefix(key, "amk_") {
			t.Fatalf("shown key %q", key)
		}
		if screenshot != "" {
			shot(t, screenshot)
		}
		click(t, "dismiss the key", "#new-key-done")
		waitFor(t, "the agent's row", fmt.Sprintf(`document.querySelector('tr[data-agent=%s]') !== null && document.getElementById("new-key").hidden`, jsString(id)))
		return key
	}

	var apiKey string
	t.Run("creating an agent shows its API key once", func(t *testing.T) {
		apiKey = createAgent(t, "browser-bot", "Browser bot", "02-agents-new-key")
		page := inPage[string](t, bctx, "read the page", `document.documentElement.outerHTML`)
		if strings.Contains(page, apiKey) {
			t.Fatal("the API key is still on the page after it was shown")
		}
		// The key works: the agent exchanges it for a token.
		api(t, base, "POST", "/v1/auth/token", "", map[string]any{"api_key": apiKey})
	})

	t.Run("the account takes friend requests of the agent into its own hands and approves one", func(t *testing.T) {
		// The page reloads once the policy is saved: the marker goes, and
		// the reloaded page shows the policy the server has.
		act(t, "choose my approval", `var s = document.querySelector('select.policy[data-agent="browser-bot"]'); if (!s) return false;
			window.__before = true; s.value = "account"; s.dispatchEvent(new Event("change")); return true;`)
		waitFor(t, "the policy saved", `(function(){var s=document.querySelector('select.policy[data-agent="browser-bot"]'); return window.__before !== true && s && s.value === "account";})()`)
		api(t, base, "POST", "/v1/friends/requests", visitorTok, map[string]any{"to": "browser-bot"})
		shot(t, "03-agents")
		open(t, "open the requests", "/console/requests")
		waitFor(t, "the request listed", `document.querySelector("button.decide") !== null`)
		shot(t, "04-friend-requests")
		click(t, "approve", `button.decide[data-decision="accept"]`)
		waitFor(t, "the request gone", `document.querySelector("button.decide") === null && document.body.innerText.includes("No friend requests wait for you.")`)
		friends := api(t, base, "GET", "/v1/friends", visitorTok, nil)
		if b, _ := json.Marshal(friends); !strings.Contains(string(b), `"browser-bot"`) {
			t.Fatalf("visitor's friends after the approval: %s", b)
		}
		open(t, "open the friendships", "/console/friends")
		contains(t, "the friendship on the friendships page", "table", "visitor")
		shot(t, "05-friendships")
	})

	t.Run("the account publishes the agent's A2A card with the switch and withdraws it", func(t *testing.T) {
		open(t, "open the agents", "/console/agents")
		cardURL := base + "/a2a/agents/browser-bot/.well-known/agent-card.json"
		contains(t, "the card URL on the agent's row", `tr[data-agent="browser-bot"] td.a2a`, cardURL)
		// Described and switched on in one task: the page reloads once the
		// card is saved, taking the marker with it.
		act(t, "describe and publish", `var s = document.querySelector('input.a2a-publish[data-agent="browser-bot"]'),
			d = document.querySelector('textarea.a2a-desc[data-agent="browser-bot"]'),
			k = document.querySelector('textarea.a2a-skills[data-agent="browser-bot"]'); if (!s || !d || !k) return false;
			window.__before = true; d.value = "Answers in the browser test.";
			k.value = '[{"id":"echo","name":"Echo","description":"says it back","tags":["test"]}]';
			s.click(); return true;`)
		waitFor(t, "the card published", `(function(){var s=document.querySelector('input.a2a-publish[data-agent="browser-bot"]'); return window.__before !== true && s && s.checked && document.querySelector('tr[data-agent="browser-bot"] a.a2a-url') !== null;})()`)
		shot(t, "03b-agents-a2a-card")
		var published bool
		var desc, skills string
		if err := db.QueryRow("SELECT published, description, skills FROM a2a_cards WHERE agent_id = 'browser-bot'").Scan(&published, &desc, &skills); err != nil ||
			!published || desc != "Answers in the browser test." || !strings.Contains(skills, `"id":"echo"`) {
			t.Fatalf("stored card: %v %q %s %v", published, desc, skills, err)
		}
		act(t, "withdraw", `var s = document.querySelector('input.a2a-publish[data-agent="browser-bot"]'); if (!s || !s.checked) return false;
			window.__before = true; s.click(); return true;`)
		waitFor(t, "the card withdrawn", `(function(){var s=document.querySelector('input.a2a-publish[data-agent="browser-bot"]'); return window.__before !== true && s && !s.checked;})()`)
		if err := db.QueryRow("SELECT published, description FROM a2a_cards WHERE agent_id = 'browser-bot'").Scan(&published, &desc); err != nil || published || desc != "Answers in the browser test." {
			t.Fatalf("stored card after withdrawing: %v %q %v", published, desc, err)
		}
	})

	var taskID string
	t.Run("a message sent to the agent through the API appears in its task timeline", func(t *testing.T) {
		text := "Hello browser-bot, this came through POST /v1/messages."
		sent := api(t, base, "POST", "/v1/messages", visitorTok, map[string]any{"to": "browser-bot", "parts": []map[string]any{{"kind": "text", "text": text}}})
		g := api(t, base, "POST", "/v1/groups", visitorTok, map[string]any{"name": "Browser testers"})
		api(t, base, "POST", "/v1/groups/"+g["group_id"].(string)+"/members", visitorTok, map[string]any{"agent_id": "browser-bot"})
		taskID = sent["task_id"].(string)
		open(t, "open the tasks", "/console/agents/browser-bot/tasks")
		contains(t, "the task listed", "table", taskID)
		shot(t, "06-tasks")
		click(t, "open the timeline", fmt.Sprintf(`a[href$="%s"]`, taskID))
		contains(t, "the message in the timeline", "ol.timeline", text)
		shot(t, "07-task-timeline")
		open(t, "open the groups", "/console/groups")
		contains(t, "the group on the groups page", "table", "Browser testers")
		shot(t, "08-groups")
	})

	t.Run("the operator redrives a dead letter from the outbox page", func(t *testing.T) {
		if _, err := db.Exec("DELETE FROM outbox_queue WHERE recipient = 'browser-bot'"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("UPDATE outbox_events SET delivery = 'failed', last_error = 'broker refused the record', sent_at = UTC_TIMESTAMP(6) WHERE recipient = 'browser-bot'"); err != nil {
			t.Fatal(err)
		}
		open(t, "open the outbox", "/console/outbox")
		waitFor(t, "the redrive button", `document.getElementById("redrive") !== null`)
		shot(t, "09-outbox")
		// The flash lives until the page reloads (0.8 s later, or sooner
		// by the page's own refresh): the page copies it into its tab's
		// sessionStorage, which outlives the reload, for the test to read.
		act(t, "redrive", `var b = document.getElementById("redrive"), f = document.getElementById("flash"); if (!b || !f) return false;
			sessionStorage.removeItem("flash");
			new MutationObserver(function () { sessionStorage.setItem("flash", f.innerText); }).observe(f, {childList: true, characterData: true, subtree: true});
			b.click(); return true;`)
		waitFor(t, "the redrive reported", `(sessionStorage.getItem("flash") || "").startsWith("Requeued")`)
		// The page reloads: the event is pending again, in the backlog chart.
		contains(t, "the backlog chart", ".chart .bar", "browser-bot")
		shot(t, "09b-outbox-after-redrive")
		var failed int
		if err := db.QueryRow("SELECT COUNT(*) FROM outbox_events WHERE recipient = 'browser-bot' AND delivery = 'failed'").Scan(&failed); err != nil || failed != 0 {
			t.Fatalf("dead letters left: %d (%v)", failed, err)
		}
	})

	t.Run("the audit log shows the approval, the policy and the redrive", func(t *testing.T) {
		open(t, "open the audit log", "/console/audit")
		for _, want := range []string{"agent.created", "policy.changed", "friendship.created", "group.member_added", "outbox.redriven"} {
			contains(t, "the audit log shows "+want, "table", want)
		}
		shot(t, "10-audit")
	})

	// The dialog's parts, read in one task.
	const dialogOpen = `(function () { var d = document.getElementById("confirm-delete"); return d !== null && d.open; })()`
	dialogText := func(part string) string {
		return fmt.Sprintf(`document.querySelector("#confirm-delete %s").innerText`, part)
	}
	goDisabled := `document.querySelector("#confirm-delete .confirm-go").disabled`
	withAgentsShown := `(document.querySelector("#confirm-delete .with-agents").getClientRects().length > 0)`
	typeBack := func(t *testing.T, text string) {
		t.Helper()
		do(t, "type "+text, chromedp.SendKeys(chromedp.CSS(`#confirm-delete input[name="confirm"]`), text))
	}

	t.Run("deleting an agent asks for its id typed back, then the list refreshes without it", func(t *testing.T) {
		open(t, "open the agents", "/console/agents")
		// Opening the dialog holds the page's refresh until it closes.
		click(t, "delete browser-bot", `button.delete-agent[data-agent="browser-bot"]`)
		waitFor(t, "the dialog naming the agent", dialogOpen+` && `+dialogText(".confirm-title")+`.includes("browser-bot") && `+
			dialogText(".confirm-name")+` === "browser-bot" && `+goDisabled+` && `+withAgentsShown+` === false`)
		typeBack(t, "browser-bo")
		if state := inPage[string](t, bctx, "the button after a wrong id", goDisabled+` ? "disabled" : "armed"`); state != "disabled" {
			t.Fatal("the Delete button is armed before the whole id was typed")
		}
		typeBack(t, "t")
		waitFor(t, "the button armed", `!(`+goDisabled+`)`)
		shot(t, "11-delete-agent-confirm")
		// An open card editor holds the page's own refresh: the list that
		// comes back is the deletion's reload, not the 5 s one.
		act(t, "hold the refresh and confirm", `var d = document.querySelector("details.a2a-edit"), b = document.querySelector("#confirm-delete .confirm-go");
			if (!d || !b) return false; d.open = true; b.click(); return true;`)
		waitFor(t, "the list without the agent, and the notice", `document.querySelector('tr[data-agent="browser-bot"]') === null &&
			document.getElementById("flash").innerText.includes("Deleted the agent browser-bot.")`)
		shot(t, "12-agent-deleted")
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM agents WHERE agent_id = 'browser-bot'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("agents rows of browser-bot: %d (%v)", n, err)
		}
		// The other party's task ended, and names the agent "deleted".
		task, _ := json.Marshal(api(t, base, "GET", "/v1/tasks/"+taskID, visitorTok, nil))
		if !strings.Contains(string(task), `"status":"failed"`) || !strings.Contains(string(task), `"recipient":"deleted"`) {
			t.Fatalf("the visitor's task after the deletion: %s", task)
		}
	})

	t.Run("creating an agent with a deleted agent's id shows the API's error", func(t *testing.T) {
		act(t, "create browser-bot again", `var f = document.getElementById("create-agent"); if (!f) return false;
			f.querySelector('input[name="agent_id"]').value = "browser-bot";
			f.requestSubmit(f.querySelector('button[type="submit"]')); return true;`)
		contains(t, "the error's detail, code and status", "#flash.bad", "(agent_id_retired, HTTP 409)")
		shot(t, "13-agent-id-retired")
	})

	t.Run("the pages refresh by themselves", func(t *testing.T) {
		open(t, "open the agents", "/console/agents")
		act(t, "mark the page", `if (document.querySelector("footer") === null) return false; window.__marked = true; return true;`)
		waitFor(t, "a reload", `window.__marked !== true && document.querySelector("footer") !== null`)
	})

	t.Run("signing out ends the session", func(t *testing.T) {
		click(t, "sign out", "#signout")
		waitFor(t, "the sign-in page", `location.pathname === "/console/signin"`)
		open(t, "open the agents again", "/console/agents")
		waitFor(t, "sent to sign in", `location.pathname === "/console/signin"`)
	})

	t.Run("deleting the account offers to take its agents along, then signs out", func(t *testing.T) {
		signIn(t)
		waitFor(t, "the agents page", `location.pathname === "/console/agents" && document.querySelector("form#create-agent") !== null`)
		createAgent(t, "doomed-bot", "Doomed bot", "")
		click(t, "delete the account", "#delete-account")
		waitFor(t, "the dialog naming the account, with the choice", dialogOpen+` && `+dialogText(".confirm-name")+` === `+jsString(email)+
			` && `+withAgentsShown)
		typeBack(t, email)
		// Without the box: the API refuses, and the dialog says why.
		click(t, "confirm without the agents", "#confirm-delete .confirm-go")
		waitFor(t, "the refusal in the dialog", dialogOpen+` && `+dialogText(".confirm-error")+`.includes("(account_has_agents, HTTP 409)")`)
		shot(t, "14-delete-account-has-agents")
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM accounts WHERE email = ?", email).Scan(&n); err != nil || n != 1 {
			t.Fatalf("accounts after the refusal: %d (%v)", n, err)
		}
		act(t, "tick the box and confirm", `var d = document.getElementById("confirm-delete"); if (!d || !d.open) return false;
			d.querySelector('input[name="with_agents"]').checked = true; d.querySelector(".confirm-go").click(); return true;`)
		waitFor(t, "signed out, with the notice", `location.pathname === "/console/signin" &&
			document.getElementById("flash").innerText.includes("was deleted")`)
		shot(t, "15-account-deleted")
		var accountsLeft, agentsLeft int
		if err := db.QueryRow("SELECT (SELECT COUNT(*) FROM accounts WHERE email = ?), (SELECT COUNT(*) FROM agents WHERE agent_id = 'doomed-bot')", email).
			Scan(&accountsLeft, &agentsLeft); err != nil || accountsLeft != 0 || agentsLeft != 0 {
			t.Fatalf("left after the deletion: %d accounts, %d agents (%v)", accountsLeft, agentsLeft, err)
		}
		open(t, "open the agents again", "/console/agents")
		waitFor(t, "sent to sign in", `location.pathname === "/console/signin"`)
		signIn(t)
		contains(t, "the sign-in refused", "#flash.bad", "HTTP 401")
	})
}

// pageDeadline bounds one wait on the page. It is a failure deadline, not
// an expected duration: a wait that is met returns at once.
const pageDeadline = 30 * time.Second

// inPage waits until expr, evaluated in the tab's current page, yields a
// truthy value, and returns that value (decoded as chromedp.Evaluate does).
// The page itself checks expr every 50 ms, once it has loaded (its script
// has set up the buttons), and answers once; each check runs as one
// JavaScript task, so what it reads, or does, all belongs to one page. The
// console reloads itself (every 5 s, and after each write): a reload
// rejects the wait, and it starts over in the new page. (Runtime evaluation
// without a context id lands in the page of the moment, where chromedp.Poll
// aims at a context id that a reload may have retired.) The test fails
// when no page yields a truthy value by the deadline.
func inPage[T any](t *testing.T, bctx context.Context, what, expr string) T {
	t.Helper()
	wait := `new Promise(function (resolve) {
  function check() { var v; try { v = document.readyState === "complete" && (` + expr + `); } catch (e) { v = false; } if (v) resolve(v); return !!v; }
  if (!check()) { var id = setInterval(function () { if (check()) clearInterval(id); }, 50); }
})`
	var v T
	retry(t, bctx, what, func(ctx context.Context) (err error) {
		v, err = chromedp.Run(ctx, chromedp.Evaluate[T](wait, chromedp.EvalAwaitPromise))
		return err
	})
	return v
}

// retry runs step until it succeeds, each failure (a reload that took the
// page away, a navigation aborted by the page's own refresh) trying again,
// and fails the test at the deadline.
func retry(t *testing.T, bctx context.Context, what string, step func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, pageDeadline)
	defer cancel()
	var last error
	for {
		err := step(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: not within %v (%v; the try before: %v)", what, pageDeadline, err, last)
		}
		last = err
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
