// Agent Mesh console: every write goes to the JSON account API with the
// session's CSRF token; the pages themselves only read.
(function () {
  "use strict";
  var csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  var busy = false; // a write or a shown key holds the refresh

  function flash(text, bad) {
    var f = document.getElementById("flash");
    if (!f) return;
    f.textContent = text;
    f.className = bad ? "flash bad" : "flash";
    f.hidden = false;
  }

  function api(method, path, body) {
    var opts = { method: method, credentials: "same-origin", headers: { "X-CSRF-Token": csrf } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    return fetch(path, opts).then(function (r) {
      return r.text().then(function (t) {
        var data = null;
        try { data = t ? JSON.parse(t) : null; } catch (e) { data = null; }
        if (!r.ok) {
          var err = new Error(problemText(r.status, data));
          err.code = (data && data.code) || "";
          throw err;
        }
        return data;
      });
    });
  }

  // An error answer (application/problem+json) in words: its detail, then
  // its stable code and status, which the API reference lists.
  function problemText(status, p) {
    if (!p || typeof p !== "object") return "The request failed (HTTP " + status + ").";
    return (p.detail || p.title || "The request failed") + " (" + (p.code ? p.code + ", " : "") + "HTTP " + status + ")";
  }

  // A notice that outlives the reload or the redirect a write ends with:
  // kept in the tab's sessionStorage and shown by the next page.
  var noticeKey = "mesh-console-notice";
  function notice(text) {
    try { sessionStorage.setItem(noticeKey, text); } catch (e) { /* storage off: no notice */ }
  }
  try {
    var kept = sessionStorage.getItem(noticeKey);
    sessionStorage.removeItem(noticeKey);
    if (kept) flash(kept);
  } catch (e) { /* storage off */ }

  function act(promise, done) {
    busy = true;
    promise.then(function (d) {
      busy = false;
      if (done) done(d); else location.reload();
    }, function (e) {
      busy = false;
      flash(e.message, true);
    });
  }

  function on(sel, ev, fn) {
    Array.prototype.forEach.call(document.querySelectorAll(sel), function (el) { el.addEventListener(ev, fn); });
  }

  var enc = encodeURIComponent;

  var signin = document.getElementById("signin");
  if (signin) {
    signin.addEventListener("submit", function (e) {
      e.preventDefault();
      act(api("POST", "/v1/account/session", { email: signin.email.value, password: signin.password.value }), function () {
        location.href = "/console/agents";
      });
    });
  }
  var signout = document.getElementById("signout");
  if (signout) {
    signout.addEventListener("click", function () {
      act(api("DELETE", "/v1/account/session"), function () { location.href = "/console/signin"; });
    });
  }

  function showKey(agent, key) {
    busy = true;
    document.getElementById("new-key-agent").textContent = agent;
    document.getElementById("new-key-value").textContent = key;
    document.getElementById("new-key").hidden = false;
  }
  var done = document.getElementById("new-key-done");
  if (done) done.addEventListener("click", function () { location.reload(); });

  var create = document.getElementById("create-agent");
  if (create) {
    create.addEventListener("submit", function (e) {
      e.preventDefault();
      var body = { agent_id: create.agent_id.value, kind: create.kind.value };
      if (create.name.value) body.name = create.name.value;
      act(api("POST", "/v1/account/agents", body), function (d) { showKey(d.agent_id, d.api_key); });
    });
  }
  on("button.rotate", "click", function (e) {
    var a = e.target.dataset.agent;
    act(api("POST", "/v1/account/agents/" + enc(a) + "/keys", {}), function (d) { showKey(a, d.api_key); });
  });
  on("button.revoke", "click", function (e) {
    var d = e.target.dataset;
    act(api("DELETE", "/v1/account/agents/" + enc(d.agent) + "/keys/" + enc(d.key)));
  });
  on("button.drain", "click", function (e) {
    act(api("POST", "/v1/account/agents/" + enc(e.target.dataset.agent) + "/drain"));
  });
  function policy(agent) {
    var sel = document.querySelector('select.policy[data-agent="' + agent + '"]');
    var box = document.querySelector('input.same-auto[data-agent="' + agent + '"]');
    act(api("PUT", "/v1/account/agents/" + enc(agent) + "/policy", { friend_policy: sel.value, same_account_auto: box.checked }));
  }
  // Deleting asks first, in a dialog that names what goes and wants it typed
  // back: an agent's id, the account's email. go makes the call (with the
  // "with all its agents" box); an error answer stays in the dialog.
  var dialog = document.getElementById("confirm-delete");
  var pending = null;
  function confirmDelete(title, what, name, offerAll, go, done) {
    var f = dialog.querySelector("form");
    dialog.querySelector(".confirm-title").textContent = title;
    dialog.querySelector(".confirm-what").textContent = what;
    dialog.querySelector(".confirm-name").textContent = name;
    dialog.querySelector(".with-agents").hidden = !offerAll;
    dialog.querySelector(".confirm-error").hidden = true;
    f.with_agents.checked = false;
    f.confirm.value = "";
    f.querySelector(".confirm-go").disabled = true;
    pending = { name: name, go: go, done: done };
    busy = true;
    dialog.showModal();
    f.confirm.focus();
  }
  if (dialog) {
    var form = dialog.querySelector("form"), goButton = form.querySelector(".confirm-go");
    form.confirm.addEventListener("input", function () {
      goButton.disabled = !pending || form.confirm.value !== pending.name;
    });
    form.querySelector(".confirm-cancel").addEventListener("click", function () { dialog.close(); });
    dialog.addEventListener("close", function () { pending = null; busy = false; });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var p = pending;
      if (!p || form.confirm.value !== p.name) return;
      goButton.disabled = true;
      p.go(form.with_agents.checked).then(function () {
        dialog.close();
        p.done();
      }, function (err) {
        var box = dialog.querySelector(".confirm-error");
        box.textContent = err.message;
        box.hidden = false;
        // Agents made since the page was drawn: offer the choice now.
        if (err.code === "account_has_agents") dialog.querySelector(".with-agents").hidden = false;
        goButton.disabled = pending !== p || form.confirm.value !== p.name;
      });
    });
  }
  on("button.delete-agent", "click", function (e) {
    var a = e.target.dataset.agent;
    confirmDelete("Delete the agent " + a + "?",
      "Its keys stop working at once; its friendships, group memberships and A2A card end, and a group it owns passes to another member. " +
      "Its open tasks end (failed or canceled), and the other party sees \"deleted\" where its id was. The id " + a +
      " cannot be registered again while the audit log keeps the deletion. This cannot be undone.",
      a, false,
      function () { return api("DELETE", "/v1/account/agents/" + enc(a)); },
      function () { notice("Deleted the agent " + a + "."); location.reload(); });
  });
  var deleteAccount = document.getElementById("delete-account");
  if (deleteAccount) {
    deleteAccount.addEventListener("click", function () {
      var email = deleteAccount.dataset.email, owns = Number(deleteAccount.dataset.agents) > 0;
      confirmDelete("Delete the account " + email + "?",
        (owns ? "The account still owns agents: tick \"with all its agents\" to delete them with it (each as Delete on its row would). " : "") +
        "Its sessions end and you are signed out. This cannot be undone.",
        email, owns,
        function (all) { return api("DELETE", "/v1/account" + (all ? "?with_agents=true" : "")); },
        function () { notice("The account " + email + " was deleted."); location.href = "/console/signin"; });
    });
  }

  on("select.policy", "change", function (e) { policy(e.target.dataset.agent); });
  on("input.same-auto", "change", function (e) { policy(e.target.dataset.agent); });
  // The A2A card: the switch publishes or withdraws it with the words
  // shown; Save sends the edited words (skills as JSON) with the switch.
  function card(agent) {
    var sel = '[data-agent="' + agent + '"]';
    var skills = [];
    var text = document.querySelector("textarea.a2a-skills" + sel).value.trim();
    if (text) {
      try { skills = JSON.parse(text); } catch (err) { flash("The skills are not valid JSON: " + err.message, true); return; }
    }
    act(api("PUT", "/v1/account/agents/" + enc(agent) + "/a2a-card", {
      published: document.querySelector("input.a2a-publish" + sel).checked,
      description: document.querySelector("textarea.a2a-desc" + sel).value,
      skills: skills
    }));
  }
  on("input.a2a-publish", "change", function (e) { card(e.target.dataset.agent); });
  on("button.a2a-save", "click", function (e) { card(e.target.dataset.agent); });
  on("button.decide", "click", function (e) {
    var d = e.target.dataset;
    act(api("POST", "/v1/account/friend-requests/" + enc(d.request), { decision: d.decision }));
  });
  var redrive = document.getElementById("redrive");
  if (redrive) {
    redrive.addEventListener("click", function () {
      act(api("POST", "/v1/account/outbox/redrive", {}), function (d) {
        flash("Requeued " + d.requeued + " events.");
        setTimeout(function () { location.reload(); }, 800);
      });
    });
  }
  on("button.redrive-one", "click", function (e) {
    act(api("POST", "/v1/account/outbox/redrive", { recipient: e.target.dataset.recipient }));
  });

  // The chart's bars: widths from data attributes (the CSP allows no inline style).
  Array.prototype.forEach.call(document.querySelectorAll(".chart .fill"), function (el) {
    el.style.width = Math.max(2, Number(el.dataset.pct || 0)) + "%";
  });

  // Refresh by itself, unless something is being typed, written or shown.
  if (document.body.dataset.refresh === "on") {
    setInterval(function () {
      var a = document.activeElement;
      var typing = a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA");
      var editing = document.querySelector("details.a2a-edit[open]") !== null;
      if (!busy && !typing && !editing && !document.hidden) location.reload();
    }, 5000);
  }
})();
