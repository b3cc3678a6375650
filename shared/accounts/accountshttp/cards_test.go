package accountshttp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/identity"
)

func TestTheAccountPublishesEditsAndWithdrawsItsAgentsCard(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.s.Cards = &cards.Service{DB: f.s.DB, Clock: f.clock.Now, BaseURL: "http://127.0.0.1:8080"}
	ada := f.account("ada@example.org", false)
	if _, err := f.s.CreateAgent(ctx, ada.Account, "ada-bot", "Ada's bot", identity.KindNormal); err != nil {
		t.Fatal(err)
	}
	put := func(body any) (resp, api.A2ACard) {
		r := f.call(req{fn: "AccountPutA2aCardFunction", method: http.MethodPut, path: map[string]string{"id": "ada-bot"}, cookie: ada.token, csrf: ada.csrf, body: body})
		var c api.A2ACard
		_ = json.Unmarshal([]byte(r.body), &c)
		return r, c
	}
	served := func() (cards.Published, error) { return f.s.Cards.PublishedCard(ctx, "ada-bot") }
	card := map[string]any{"published": true, "description": "Ada's helper.",
		"skills": []map[string]any{{"id": "sum", "name": "Sum", "description": "adds numbers", "tags": []string{"math"}}}}

	steps := []struct {
		name      string
		body      any
		status    int
		code      string
		published bool
	}{
		{"publishing serves the card under the agent's profile name", card, http.StatusOK, "", true},
		{"editing keeps it served with the new words", map[string]any{"published": true, "description": "Ada's better helper."}, http.StatusOK, "", true},
		{"an invalid skill id is a 422 and changes nothing", map[string]any{"published": false, "skills": []map[string]any{{"id": "no spaces", "name": "x"}}}, http.StatusUnprocessableEntity, "invalid_card", true},
		{"a body without published is a 422 and keeps the card served", map[string]any{"description": "Ada's better helper."}, http.StatusUnprocessableEntity, "invalid_card", true},
		{"an unknown field is a 400 and changes nothing", map[string]any{"published": false, "colour": "red"}, http.StatusBadRequest, "invalid_json", true},
		{"withdrawing stops serving it", map[string]any{"published": false, "description": "Ada's better helper."}, http.StatusOK, "", false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			r, c := put(st.body)
			if r.status != st.status || (st.code != "" && r.code() != st.code) {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if r.status == http.StatusOK && (c.Name != "Ada's bot" || c.CardURL != "http://127.0.0.1:8080/a2a/agents/ada-bot/.well-known/agent-card.json") {
				t.Fatalf("%+v", c)
			}
			p, err := served()
			if st.published != (err == nil) {
				t.Fatalf("served %+v %v, want published %v", p, err, st.published)
			}
			if st.published && (p.Name != "Ada's bot" || p.Description != "Ada's better helper." && !strings.HasPrefix(st.name, "publishing")) {
				t.Fatalf("served %+v", p)
			}
		})
	}
	t.Run("the account reads the withdrawn card's settings", func(t *testing.T) {
		r := f.call(req{fn: "AccountGetA2aCardFunction", method: http.MethodGet, path: map[string]string{"id": "ada-bot"}, cookie: ada.token})
		if r.status != http.StatusOK || !strings.Contains(r.body, `"published":false`) || !strings.Contains(r.body, "better helper") {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}
